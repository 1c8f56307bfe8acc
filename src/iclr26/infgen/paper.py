"""Paper scale: ScenarioNet scenarios from a local folder, the official model sizes, DDP training via
``core.train.fit`` (``torchrun --nproc_per_node=8 -m iclr26.infgen.paper --set paper.data_dir=... --set
paper.trust_pickles=true --set device=cuda``; rank 0 writes the run folder), then the same 120-second rollout
measurements as the small scale on held-out scenarios. Every setting is a field of
:class:`iclr26.infgen.config.RunConfig`. Each rank puts the model on its own device (``cuda:LOCAL_RANK``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch

from iclr26.core.experiment import ExperimentError, RunContext, RunOutput, distributed_main
from iclr26.core.train import rank_device, setup_distributed
from iclr26.infgen.config import RunConfig, check_config
from iclr26.infgen.evaluate import measure, summarise, tokenized_accels
from iclr26.infgen.generate import Generator, log_replay
from iclr26.infgen.metrics import scene_stats
from iclr26.infgen.model import InfGenModel
from iclr26.infgen.scenarionet import LazyScenes, scenario_files, scenario_to_scene
from iclr26.infgen.tokenizer import MotionTokenizer, SceneTokenizer, TokenSeq
from iclr26.infgen.training import train_infgen
from iclr26.infgen.world import Scene


def _pooled_gt_stats(scenes: list[Scene], motion: MotionTokenizer) -> dict:
    stats = [scene_stats(s, 0, s.T) for s in scenes]
    out = {k: np.concatenate([st[k] for st in stats]) for k in ("speed", "accel", "headway")}
    out["accel_tokenized"] = np.concatenate([tokenized_accels(s, motion) for s in scenes])
    out["count"] = float(np.mean([st["count"] for st in stats]))
    for k in ("collisions", "offroad", "agent_steps"):
        out[k] = int(sum(st[k] for st in stats))
    return out


class LazyTokens(Sequence):
    """Token sequences of :class:`LazyScenes`, tokenized on first access (seeded per scene) and cached, so a
    rank reads and tokenizes only the scenes its batches draw."""

    def __init__(self, scenes: LazyScenes, tok: SceneTokenizer, seed: int, cache_size: int = 256):
        self.scenes, self.tok, self.seed, self.cache_size = scenes, tok, seed, cache_size
        self._cache: OrderedDict[int, TokenSeq] = OrderedDict()

    def __len__(self) -> int:
        return len(self.scenes)

    def __getitem__(self, i: int) -> TokenSeq:
        if i not in self._cache:
            self._cache[i] = self.tok(self.scenes[i], np.random.default_rng([self.seed, i]))[0]
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        self._cache.move_to_end(i)
        return self._cache[i]


def _load(ctx: RunContext, cfg: RunConfig) -> tuple[LazyScenes, LazyScenes]:
    """Training and held-out scenes, read lazily (nothing is unpickled here). Scenarios keep at most
    ``model.max_segments`` segments (nearest the SDC) and ``model.n_slots`` agents (the SDC first)."""
    data_dir = ctx.require_path("paper.data_dir")
    try:
        files = scenario_files(data_dir, cfg.paper.trust_pickles)[: cfg.paper.limit or None]
    except (OSError, ValueError) as exc:
        raise ExperimentError(f"infgen paper scale: {exc}") from exc
    n_hold = max(1, min(cfg.paper.n_eval, len(files) // 10 or 1))
    train, held = (files[:-n_hold] or files), files[-n_hold:]

    def convert(sd: dict, skipped) -> Scene:
        return scenario_to_scene(sd, max_agents=cfg.model.n_slots, max_segments=cfg.model.max_segments, skipped=skipped)

    return LazyScenes(train, convert, cfg.paper.cache), LazyScenes(held, convert, cfg.paper.cache)


def run_paper(ctx: RunContext) -> RunOutput:
    cfg: RunConfig = ctx.cfg
    check_config(cfg)
    train, held = _load(ctx, cfg)
    horizon = cfg.eval.horizon
    try:
        counts = np.concatenate([train[i].counts() for i in range(min(len(train), cfg.paper.count_sample))])
    except ValueError as exc:
        raise ExperimentError(f"infgen paper scale: {exc}") from exc
    per_seed, curves, frame = {}, {}, None
    setup_distributed(ctx.device)  # under torchrun: binds this rank's GPU before any tensor is placed
    device = rank_device(ctx.device)
    for seed in ctx.seeds:
        tok = SceneTokenizer(motion=cfg.motion, n_slots=cfg.model.n_slots, as_targets=cfg.data.as_targets)
        torch.manual_seed(seed)
        model = InfGenModel(cfg.model)
        model.to(device)
        seqs = LazyTokens(train, tok, seed)
        res = train_infgen(
            model,
            seqs,
            replace(cfg.train, progress=ctx.show_progress),
            cfg.batch,
            seed,
            ckpt_dir=ctx.out_dir / f"ckpt_seed{seed}",
            device=device,
        )
        gen = Generator(model, tok, device)
        rng = np.random.default_rng(seed)
        rollouts = {"insertion": [], "no_insertion": [], "log_replay": [], "learned_eos": []}
        for i in range(len(held)):
            s = held[i]
            r = np.random.default_rng([seed, i])
            rollouts["insertion"].append(
                gen.rollout(
                    s,
                    horizon,
                    replace(cfg.rollout, insertion="released"),
                    density_target=int(rng.choice(counts)),
                    rng=r,
                )
            )
            rollouts["no_insertion"].append(gen.rollout(s, horizon, replace(cfg.rollout, insertion="off"), rng=r))
            rollouts["learned_eos"].append(gen.rollout(s, horizon, replace(cfg.rollout, insertion="learned"), rng=r))
            rollouts["log_replay"].append(log_replay(s, horizon))
        out, cur = measure(
            rollouts, _pooled_gt_stats([held[i] for i in range(len(held))], cfg.motion), cfg.eval.eval_from, horizon
        )
        out.update(
            {
                "losses": res.losses,
                "final_loss": float(np.mean(res.losses[-10:])),
                "n_train_scenarios": len(train),
                "scenarios_read": train.reads + held.reads,
                "skipped": dict(train.skipped + held.skipped),
            }
        )
        per_seed[seed] = out
        for k, v in cur.items():
            curves.setdefault(k, []).append(v)
        frame = frame or rollouts["insertion"][0]
    return summarise(ctx, per_seed, curves, frame)


if __name__ == "__main__":
    raise SystemExit(distributed_main("infgen"))
