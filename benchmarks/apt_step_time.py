"""APT's efficiency claim as ratios: a B0 + APT training step against a B0 step, and the parameters APT adds.

The paper (efficiency table) reports < 0.5 M added parameters and 7.8-25% *less* time per epoch. The time
saving comes from APT replacing some of a large model's own semantic layers, which a relation head alone
cannot show, so here the ratio measures only the plug-in's own cost (> 1 means APT is slower).

Two shapes, each on the same random batches for both models, interleaved repeats, medians, one torch thread:

* ``shapes_sg``: the ``small`` scale's relation head (384-d MiniLM tables, 64-d features, batch 256);
* ``vg_like``: VG150's sizes (150 object / 50 predicate classes, 300-d GloVe-like tables, 512-d ROI and union
  features), same head widths.

Added parameters come from :func:`iclr26.apt.apt.added_parameters` (tested against ``sum(p.numel())``) at the
official code's sizes, the paper's per-class sizes and a shared-prompt configuration that meets "< 0.5 M".

Run alone: ``python benchmarks/apt_step_time.py [--repeats 5 --steps 8]`` (also part of run_all.py).
Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from iclr26.apt.apt import added_parameters
from iclr26.apt.config import APTConfig, HeadConfig
from iclr26.apt.models import RelationModel
from iclr26.apt.names import load_table

SHAPES = {
    # name: (object classes, predicate classes, table dim, feature dim); None = the shipped MiniLM tables
    "shapes_sg": None,
    "vg_like": (150, 50, 300, 512),
}


def _tables(shape) -> tuple[torch.Tensor, torch.Tensor, int]:
    if shape is None:
        obj, pred = load_table()
        return torch.from_numpy(obj), torch.from_numpy(pred), 64
    n_obj, n_pred, dim, feat = shape
    g = torch.Generator().manual_seed(0)
    return torch.randn(n_obj, dim, generator=g), torch.randn(n_pred, dim, generator=g), feat


def _batches(n_obj: int, n_pred: int, feat: int, batch: int, steps: int, seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        out.append(
            {
                "cls_s": torch.randint(0, n_obj, (batch,), generator=g),
                "cls_o": torch.randint(0, n_obj, (batch,), generator=g),
                "vis_s": torch.randn(batch, feat, generator=g),
                "vis_o": torch.randn(batch, feat, generator=g),
                "union": torch.randn(batch, feat, generator=g),
                "geo": torch.randn(batch, 9, generator=g),
                "label": torch.randint(0, n_pred + 1, (batch,), generator=g),
            }
        )
    return out


def _time(model: RelationModel, opt, batches: list[dict]) -> float:
    t0 = time.perf_counter()
    for b in batches:
        loss, _ = model.loss(b)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - t0) / len(batches)


def bench_apt(shape=None, repeats: int = 5, steps: int = 8, batch: int = 256) -> tuple[float, float, float, int]:
    """(s per B0 step, s per B0 + APT step, APT / B0, APT's added parameters) for one shape."""
    obj, pred, feat = _tables(shape)
    torch.manual_seed(0)
    models = [RelationModel(obj, pred, v, APTConfig(), HeadConfig(), feat) for v in ("b0", "apt")]
    opts = [torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3) for m in models]
    tb, ta = [], []
    for r in range(repeats + 1):  # the first round warms up
        batches = _batches(len(obj), len(pred), feat, batch, steps, seed=r)
        b0, apt = _time(models[0], opts[0], batches), _time(models[1], opts[1], batches)
        if r:
            tb.append(b0)
            ta.append(apt)
    b, a = statistics.median(tb), statistics.median(ta)
    return b, a, a / b, models[1].added_parameters()


def parameter_budget() -> dict[str, int]:
    """APT's added parameters at the sizes the paper and the official code imply (D = 300, 2048-d ROI)."""
    return {
        "official code (shared prompts, L 5, visual 2048, hidden 512)": added_parameters(1, 300, 2048, 512, 5, False),
        "paper (per-class prompts for 150 + 50 classes, L 6)": added_parameters((150, 50), 300, 2048, 512, 6, True),
        "shared prompts, visual 512, hidden 256": added_parameters(1, 300, 512, 256, 6, False),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(1)
    for name, shape in SHAPES.items():
        b, a, r, n = bench_apt(shape, args.repeats, args.steps)
        print(f"apt step / b0 step ({name}): {r:.3f}  ({a * 1e3:.1f} ms vs {b * 1e3:.1f} ms; {n:,} added parameters)")
    for name, n in parameter_budget().items():
        print(f"apt added parameters, {name}: {n:,} ({'<' if n < 500_000 else '>='} 0.5 M)")


if __name__ == "__main__":
    main()
