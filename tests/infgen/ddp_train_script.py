"""Run by tests/infgen/test_infgen_dist.py: a few InfGen training steps, plainly or under torchrun with 2
gloo ranks. Writes ``<out>.rank<r>.json`` (world size, losses, a checksum of the final weights) and, in the
plain run, the step-0 loss of each half of the global batch (what the two ranks see)."""

import json
import sys

import numpy as np
import torch

from iclr26.core.train import TrainConfig
from iclr26.infgen.model import InfGenConfig, InfGenModel, collate, collate_maps
from iclr26.infgen.tokenizer import MotionTokenizer, SceneTokenizer, long_run_windows
from iclr26.infgen.training import train_infgen
from iclr26.infgen.world import TinyTown

PER_RANK, STEPS = 2, 3


def setup():
    tok = SceneTokenizer(motion=MotionTokenizer(n_bins=5), n_slots=32)
    seqs = [s for _, s in long_run_windows(tok, TinyTown().simulate(40, seed=0), length=7, stride=2)]
    torch.manual_seed(0)
    cfg = InfGenConfig(d_model=16, n_heads=2, n_dec_layers=1, n_actions=25, n_slots=32, max_segments=128)
    return seqs, InfGenModel(cfg)


if __name__ == "__main__":
    torch.set_num_threads(1)
    out, world_batch = sys.argv[1], int(sys.argv[2])  # per-rank batch = world_batch / world
    seqs, model = setup()
    import os

    world = int(os.environ.get("WORLD_SIZE", "1"))
    info = {}
    if world == 1:  # the loss each rank would see at step 0 (same weights, same draw of the global batch)
        idx = np.random.default_rng([0, 0]).choice(len(seqs), size=world_batch, replace=False)
        with torch.no_grad():
            for r in range(2):
                part = [seqs[i] for i in idx[r::2]]
                info[f"half{r}"] = float(model.loss(collate(part), collate_maps([s.map for s in part]))[0])
    tc = TrainConfig(steps=STEPS, lr=1e-3, warmup_steps=1, progress=False)
    res = train_infgen(model, seqs, tc, world_batch // world, seed=0)
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_initialized() else 0
    checksum = float(sum(p.double().sum() for p in model.parameters()))
    with open(f"{out}.rank{rank}.json", "w") as f:
        json.dump({"world": world, "losses": res.losses, "checksum": checksum, **info}, f)
    if dist.is_initialized():
        dist.destroy_process_group()
