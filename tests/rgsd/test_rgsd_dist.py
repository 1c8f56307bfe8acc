"""Gradient averaging over ranks for the paper-scale path (2 gloo processes, as under torchrun)."""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    from iclr26.rgsd.paper import average_gradients

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        lin = torch.nn.Linear(3, 2)
        with torch.no_grad():
            lin.weight.fill_(1.0)
            lin.bias.zero_()
        x = torch.full((1, 3), float(rank + 1))  # rank 0 sees 1s, rank 1 sees 2s
        lin(x).sum().backward()
        average_gradients(lin)
        torch.save(lin.weight.grad, os.path.join(out_dir, f"grad{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.dist
def test_average_gradients_two_gloo_ranks(tmp_path):
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    g0, g1 = torch.load(tmp_path / "grad0.pt"), torch.load(tmp_path / "grad1.pt")
    assert torch.equal(g0, g1)
    assert torch.allclose(g0, torch.full((2, 3), 1.5))  # mean of 1 and 2


def test_average_gradients_is_noop_in_one_process():
    from iclr26.rgsd.paper import average_gradients

    lin = torch.nn.Linear(2, 1)
    lin(torch.ones(1, 2)).sum().backward()
    before = lin.weight.grad.clone()
    average_gradients(lin)
    assert torch.equal(lin.weight.grad, before)
