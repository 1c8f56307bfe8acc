"""Paper-scale entry point for torchrun: train one arm with Hugging Face agents, one device per process.

    torchrun --nproc_per_node=8 -m iclr26.at_grpo.paper_run --arm at_grpo --seed 0 --device cuda \\
        --out runs/at_grpo_paper --set llm.model_path=/models/Qwen3-1.7B [--set llm.lora_rank=16 ...]

It takes the same typed configuration as ``iclr26 run at_grpo --scale paper`` (:func:`config_for`, with
``--set`` overrides) and runs :func:`~iclr26.at_grpo.experiment.train_arm`: each process rolls out its shard
of the environments on ``cuda:LOCAL_RANK`` (NCCL) or the CPU (gloo), gradients are averaged over processes,
the sample budget and held-out success are global. Rank 0 writes ``result.json`` (curve, final success and
a checksum of every policy's trainable weights per rank, which must agree across ranks).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from iclr26.at_grpo.config import RunConfig, config_for
from iclr26.at_grpo.experiment import dist_setup, policy_factory, train_arm
from iclr26.core.config import config_to_dict, override


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", default="at_grpo")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", required=True)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    sets = dict(kv.split("=", 1) for kv in args.set)
    cfg = override(config_for("paper"), sets)
    if not cfg.llm.model_path or not Path(cfg.llm.model_path).exists():
        raise SystemExit(f"--set llm.model_path=PATH: a local model folder is required (got {cfg.llm.model_path!r})")
    rank, world, device = dist_setup(args.device)
    try:
        _train_and_write(args, cfg, rank, world, device)
        if world > 1:  # every rank leaves together, after rank 0 has written result.json
            torch.distributed.barrier()
    finally:  # also on an exception: exiting with a live gloo group can abort a rank at shutdown
        if world > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return 0


def _train_and_write(args: argparse.Namespace, cfg: RunConfig, rank: int, world: int, device: str) -> None:
    """Train the arm on this rank; rank 0 writes result.json with every rank's weight checksums."""
    checks: dict[str, float] = {}

    def make(name: str):
        pol = policy_factory(cfg, "paper", device)(name)
        policies[name] = pol
        return pol

    policies: dict = {}
    out = train_arm(args.arm, args.seed, cfg, make, rank, world)
    for name, pol in policies.items():
        checks[name] = float(sum(p.detach().double().sum().item() for p in pol.parameters() if p.requires_grad))
    gathered = [checks]
    if world > 1:
        gathered = [None] * world
        torch.distributed.all_gather_object(gathered, checks)
    if rank == 0:
        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        result = {
            "arm": args.arm,
            "seed": args.seed,
            "world": world,
            "device": device,
            **out,
            "weight_checksums": gathered,
            "config": config_to_dict(cfg),
        }
        (folder / "result.json").write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    raise SystemExit(main())
