"""InfGen training step: the sparse self-attention (per-query key lists, precomputed per sequence) against
the dense one (relative features, bias and softmax over every [L, L] pair), as a ratio (lower is better).

Both models start from the same weights and train on the same batches of the ``small`` scale's shape
(TinyTown windows of 11 steps, batch 4, d 64, 2 layers); the two give the same losses (checked here and in
``tests/infgen``), only the work differs. Interleaved repeats, medians; one torch thread (the experiment's).

Run alone: ``python benchmarks/infgen_train_step.py [--repeats 5 --steps 8]`` (also part of run_all.py).
Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import numpy as np
import torch

from iclr26.infgen.config import config_for
from iclr26.infgen.model import InfGenModel, attach_neighbours, collate, collate_maps, seq_neighbours
from iclr26.infgen.tokenizer import SceneTokenizer, long_run_windows
from iclr26.infgen.world import TinyTown


def _data(seconds: float = 240.0):
    cfg = config_for("small")
    tok = SceneTokenizer(motion=cfg.motion, n_slots=cfg.model.n_slots)
    log = TinyTown(cfg.world).simulate(seconds, seed=0)
    seqs = [s for _, s in long_run_windows(tok, log, length=cfg.data.train_len, stride=cfg.data.stride, seed=0)]
    return cfg, seqs


def _steps(model, opt, batches, seqs, lists=None) -> tuple[float, list[float]]:
    """Seconds per optimiser step and the losses; ``lists``: a cache of per-sequence key lists (sparse)."""
    losses = []
    t0 = time.perf_counter()
    for idx, b, mb in batches:
        if lists is not None:
            for i in idx:
                if i not in lists:
                    lists[i] = seq_neighbours(model, seqs[i])
            b = attach_neighbours(b, [lists[i] for i in idx])
        loss, _ = model.loss(b, mb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return (time.perf_counter() - t0) / len(batches), losses


def bench_infgen(repeats: int = 5, steps: int = 8, batch: int = 4) -> tuple[float, float, float, float]:
    """(s per dense step, s per sparse step, sparse / dense, largest loss difference on the first repeat)."""
    cfg, seqs = _data()
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    dense = InfGenModel(replace(cfg.model, sparse_attn=False))
    sparse = InfGenModel(replace(cfg.model, sparse_attn=True))
    sparse.load_state_dict(dense.state_dict())
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-4) for m in (dense, sparse)]
    lists: dict[int, np.ndarray] = {}
    td, ts, diff = [], [], 0.0
    for r in range(repeats + 1):  # the first round warms up (and fills the key-list cache on the fly)
        batches = []
        for _ in range(steps):
            idx = [int(i) for i in rng.choice(len(seqs), batch)]
            batches.append((idx, collate([seqs[i] for i in idx]), collate_maps([seqs[i].map for i in idx])))
        a, la = _steps(dense, opts[0], batches, seqs)
        b, lb = _steps(sparse, opts[1], batches, seqs, lists)
        if r == 0:
            diff = max(abs(x - y) for x, y in zip(la, lb, strict=True))
            continue
        td.append(a)
        ts.append(b)
    d, s = statistics.median(td), statistics.median(ts)
    return d, s, s / d, diff


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(1)
    d, s, r, diff = bench_infgen(args.repeats, args.steps)
    print(
        f"infgen train step, sparse / dense attention: {r:.3f}  ({s * 1e3:.0f} ms vs {d * 1e3:.0f} ms per step; "
        f"largest loss difference over the first {args.steps} steps {diff:.1e})"
    )


if __name__ == "__main__":
    main()
