"""Training-step time of +mesh vs the base recursive model at the same size, as a ratio (target <= 1.10).

Both models are timed in interleaved rounds (base, mesh, base, mesh, ...) on the same batches, after
warm-up steps, and the ratio of the median step times is reported. Run it directly::

    python -m iclr26.mesh.benchmark --d-model 256 --layout 2+4R2+2 --seq-len 256 --batch 8
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from typing import Any

import torch

from iclr26.mesh.model import MeshConfig, RecursiveNeoX, lm_loss


def _step_fn(cfg: MeshConfig, device: str, seed: int):
    torch.manual_seed(seed)
    model = RecursiveNeoX(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(batch: torch.Tensor) -> float:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = lm_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    return step


def step_time_ratio(
    base_cfg: MeshConfig,
    mesh_cfg: MeshConfig,
    batch: int = 8,
    seq_len: int = 128,
    steps: int = 10,
    warmup: int = 2,
    device: str = "cpu",
    seed: int = 0,
) -> dict[str, Any]:
    """Median training-step seconds of each model and ``ratio = mesh / base``."""
    if base_cfg.scheme != "base" or mesh_cfg.scheme != "mesh":
        raise ValueError("step_time_ratio compares a scheme='base' config with a scheme='mesh' config")
    if replace(base_cfg, scheme="mesh") != mesh_cfg:
        raise ValueError("the two configs must differ only in the scheme")
    g = torch.Generator().manual_seed(seed)
    batches = [
        torch.randint(0, base_cfg.vocab_size, (batch, seq_len + 1), generator=g).to(device)
        for _ in range(warmup + steps)
    ]
    base, mesh = _step_fn(base_cfg, device, seed), _step_fn(mesh_cfg, device, seed)
    tb, tm = [], []
    for i, b in enumerate(batches):
        x, y = base(b), mesh(b)
        if i >= warmup:
            tb.append(x)
            tm.append(y)
    mb, mm = statistics.median(tb), statistics.median(tm)
    return {
        "base_s": mb,
        "mesh_s": mm,
        "ratio": mm / mb,
        "steps": steps,
        "batch": batch,
        "seq_len": seq_len,
        "layout": base_cfg.layout,
        "d_model": base_cfg.d_model,
        "device": device,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--layout", default="1+2R2+1")
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", help="float32 or bfloat16 (autocast, GPU)")
    a = p.parse_args(argv)
    base = MeshConfig(
        vocab_size=a.vocab_size,
        d_model=a.d_model,
        n_heads=a.n_heads,
        layout=a.layout,
        scheme="base",
        max_seq_len=max(a.seq_len, 2048),
    )
    ctx = (
        torch.autocast(device_type=a.device.split(":")[0], dtype=torch.bfloat16)
        if a.dtype == "bfloat16"
        else torch.autocast(device_type="cpu", enabled=False)
    )
    with ctx:
        res = step_time_ratio(base, replace(base, scheme="mesh"), a.batch, a.seq_len, a.steps, device=a.device)
    res["dtype"] = a.dtype
    print(json.dumps(res))


if __name__ == "__main__":
    main()
