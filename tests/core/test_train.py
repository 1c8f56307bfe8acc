import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from iclr26.core.train import TrainConfig, fit, lr_at

HERE = Path(__file__).parent


def _setup(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))

    def get_batch(step, rank, world):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(16, 3, generator=g)
        return x, x[:, :1] * 2 - x[:, 1:2]

    def loss_fn(m, batch):
        x, y = batch
        return ((m(x) - y) ** 2).mean()

    return model, get_batch, loss_fn


def test_lr_schedule_hand_values():
    cfg = TrainConfig(steps=110, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1)
    assert lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(60, cfg) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_at(110, cfg) == pytest.approx(0.1)


def test_training_reduces_loss_and_calls_eval():
    model, get_batch, loss_fn = _setup()
    seen = []
    cfg = TrainConfig(steps=60, lr=1e-2, warmup_steps=5, eval_every=20, progress=False)
    res = fit(model, loss_fn, get_batch, cfg, eval_fn=lambda m, s: seen.append((s, m.training)) or {"s": s})
    assert len(res.losses) == 60
    assert sum(res.losses[-10:]) < sum(res.losses[:10])
    assert [s for s, _ in res.evals] == [20, 40, 60]
    assert all(not training for _, training in seen)  # eval runs in eval mode
    assert model.training  # and training mode is restored


def test_resume_gives_exactly_the_uninterrupted_weights(tmp_path):
    cfg = TrainConfig(steps=30, lr=1e-2, warmup_steps=5, ckpt_every=10, progress=False)
    ref_model, get_batch, loss_fn = _setup()
    ref = fit(ref_model, loss_fn, get_batch, cfg)

    model, _, _ = _setup()

    def crashing(step, rank, world):
        if step == 17:
            raise KeyboardInterrupt("simulated preemption")
        return get_batch(step, rank, world)

    with pytest.raises(KeyboardInterrupt):
        fit(model, loss_fn, crashing, cfg, ckpt_dir=tmp_path)
    fresh, _, _ = _setup(seed=123)  # different init: everything must come from the checkpoint
    res = fit(fresh, loss_fn, get_batch, cfg, ckpt_dir=tmp_path)
    assert res.resumed_from == 10
    assert res.losses == ref.losses
    for a, b in zip(ref_model.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(a, b)


def test_non_finite_loss_raises():
    model, get_batch, _ = _setup()
    with pytest.raises(FloatingPointError, match="step 0"):
        fit(model, lambda m, b: m(b[0]).sum() * float("nan"), get_batch, TrainConfig(steps=3, progress=False))


@pytest.mark.dist
@pytest.mark.parametrize("accum", [1, 2])
def test_ddp_two_processes_matches_one_process(tmp_path, accum, torchrun):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)}
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    subprocess.run(
        [sys.executable, str(HERE / "ddp_fit_script.py"), str(one), str(accum)], check=True, env=env, timeout=120
    )
    torchrun(
        [
            str(HERE / "ddp_fit_script.py"),
            str(two),
            str(accum),
        ],
        env,
        timeout=240,
    )
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert len(a) == len(b) == 12
    assert all(math.isfinite(v) for v in a)
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4
    assert a[-1] < a[0]


def test_grad_accumulation_equals_one_big_batch():
    """k micro-batches of size b with a mean loss == one step on the concatenated k*b batch."""
    big_model, _, loss_fn = _setup()
    small_model, _, _ = _setup()
    small_model.load_state_dict(big_model.state_dict())
    big_model[2].p = small_model[2].p = 0.0  # no dropout: the two runs draw different masks

    def micro(step, rank, world):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(4, 3, generator=g)
        return x, x[:, :1] * 2 - x[:, 1:2]

    def big(step, rank, world):
        parts = [micro(step * 3 + i, rank, world) for i in range(3)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    base = dict(steps=6, lr=1e-2, warmup_steps=2, progress=False)
    a = fit(big_model, loss_fn, big, TrainConfig(**base))
    b = fit(small_model, loss_fn, micro, TrainConfig(**base, grad_accum=3))
    assert a.losses == pytest.approx(b.losses, abs=1e-6)
    for x, y in zip(big_model.parameters(), small_model.parameters()):
        assert torch.allclose(x, y, atol=1e-6)
    with pytest.raises(ValueError, match="grad_accum"):
        TrainConfig(grad_accum=0)


def test_rank_device_binds_cuda_to_the_local_rank(monkeypatch):
    from iclr26.core.train import rank_device

    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert rank_device("cuda") == "cuda:3" and rank_device("cuda:0") == "cuda:3"
    assert rank_device("cpu") == "cpu"
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert rank_device("cuda") == "cuda"
