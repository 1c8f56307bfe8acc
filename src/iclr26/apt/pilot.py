"""World-design pilot: B0's competence-gate values on one seed for candidate ShapesSG settings.

Trains only B0 (closed set, plus B0's zero-shot open-vocabulary run, reported only) on the `small` world with
``data.<field>`` set to each candidate value, and prints one JSON line per value:

    python -m iclr26.apt.pilot --seed 100 --field text_align --values 1.6,0.8,0.4

The rule that picks a value from these lines is written in the README before the pilot is run; pilot seeds
must be neither the default claim seeds (0, 1, 2) nor the held-out ones (7, 8, 9).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import fields, replace

from iclr26.apt.config import RunConfig, config_for
from iclr26.apt.names import PREDICATES
from iclr26.apt.runner import _fit_eval
from iclr26.apt.shapes_sg import generate

__all__ = ["CLAIM_SEEDS", "gate_values", "main"]

CLAIM_SEEDS = (0, 1, 2, 7, 8, 9)


def gate_values(cfg: RunConfig, seed: int) -> dict:
    """B0's R@20, head / tail R@20 and head − tail on ``seed``; B0 zero-shot novel mR@20 (reported only)."""
    data = generate(cfg.data, seed)
    b0 = _fit_eval(cfg, data, "b0", seed)[1]
    novel_ids = tuple(PREDICATES.index(n) + 1 for n in cfg.novel)
    ov = _fit_eval(cfg, data, "b0", seed, novel_ids)[1]
    return {
        "R@20": b0["R@20"],
        "mR@20": b0["mR@20"],
        "head_R@20": b0["head_R@20"],
        "tail_R@20": b0["tail_R@20"],
        "head_minus_tail": b0["head_R@20"] - b0["tail_R@20"],
        "per_predicate_R@20": b0["per_predicate_R@20"],
        "b0_zero_shot_novel_mR@20": ov["novel_mR@20"],
    }


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(prog="python -m iclr26.apt.pilot", description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--field", required=True, help="a DataConfig field, e.g. text_align")
    ap.add_argument("--values", required=True, help="comma-separated numbers")
    ap.add_argument("--scale", default="small", choices=("smoke", "small"))
    args = ap.parse_args(argv)
    if args.seed in CLAIM_SEEDS:
        ap.error(f"seed {args.seed} is a claim seed {CLAIM_SEEDS}; pilot on another one")
    cfg = config_for(args.scale)
    if args.field not in {f.name for f in fields(cfg.data)}:
        ap.error(f"unknown data field {args.field!r}")
    try:
        values = [float(v) for v in args.values.split(",")]
    except ValueError:
        ap.error(f"--values must be comma-separated numbers, got {args.values!r}")
    rows = []
    for v in values:
        t0 = time.perf_counter()
        v = type(getattr(cfg.data, args.field))(v)
        run_cfg = replace(cfg, data=replace(cfg.data, **{args.field: v}))
        row = {"seed": args.seed, args.field: v, **gate_values(run_cfg, args.seed)}
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
