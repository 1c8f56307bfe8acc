"""Run by tests/core/test_train.py, once plainly and once under torchrun --nproc_per_node=2."""

import json
import sys

import torch

from iclr26.core.train import TrainConfig, fit

GLOBAL_BATCH = 8


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def get_batch(step, rank, world):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(GLOBAL_BATCH, 4, generator=g)
    y = x.sum(1, keepdim=True).sin()
    per = GLOBAL_BATCH // world
    return x[rank * per : (rank + 1) * per], y[rank * per : (rank + 1) * per]


def loss_fn(model, batch):
    x, y = batch
    return ((model(x) - y) ** 2).mean()


if __name__ == "__main__":
    torch.set_num_threads(1)
    accum = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    cfg = TrainConfig(steps=12, lr=3e-2, warmup_steps=3, grad_clip=0.5, progress=False, grad_accum=accum)
    res = fit(make_model(), loss_fn, get_batch, cfg)
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(res.losses, f)
    if dist.is_initialized():
        dist.destroy_process_group()
