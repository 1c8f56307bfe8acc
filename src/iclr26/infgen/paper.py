"""Paper scale: ScenarioNet scenarios from a local folder, the official model sizes, DDP training via
``core.train.fit`` (``torchrun --nproc_per_node=8 -m iclr26.cli run infgen --scale paper --set
paper.data_dir=... --set paper.trust_pickles=true``), then the same 120-second rollout measurements as the
small scale on held-out scenarios. Every setting is a field of :class:`iclr26.infgen.config.RunConfig`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from iclr26.core.experiment import ExperimentError, RunContext, RunOutput
from iclr26.infgen.config import RunConfig, check_config
from iclr26.infgen.evaluate import measure, summarise
from iclr26.infgen.generate import Generator, log_replay
from iclr26.infgen.metrics import scene_stats
from iclr26.infgen.model import InfGenModel
from iclr26.infgen.scenarionet import load_scenarios, scenario_to_scene
from iclr26.infgen.tokenizer import SceneTokenizer
from iclr26.infgen.training import train_infgen
from iclr26.infgen.world import Scene


def _pooled_gt_stats(scenes: list[Scene]) -> dict:
    stats = [scene_stats(s, 0, s.T) for s in scenes]
    out = {k: np.concatenate([st[k] for st in stats]) for k in ("speed", "accel", "headway")}
    out["count"] = float(np.mean([st["count"] for st in stats]))
    for k in ("collisions", "offroad", "agent_steps"):
        out[k] = int(sum(st[k] for st in stats))
    return out


def _load(ctx: RunContext, cfg: RunConfig) -> list[Scene]:
    data_dir = ctx.require_path("paper.data_dir")
    try:
        raw = load_scenarios(data_dir, cfg.paper.limit or None, trust_pickles=cfg.paper.trust_pickles)
        scenes = [scenario_to_scene(sd) for sd in raw]
    except (OSError, ValueError) as exc:
        raise ExperimentError(f"infgen paper scale: {exc}") from exc
    need = max(s.map.num_segments for s in scenes)
    if need > cfg.model.max_segments:
        raise ExperimentError(f"a scenario has {need} map segments: --set model.max_segments={need} (or more)")
    return scenes


def run_paper(ctx: RunContext) -> RunOutput:
    cfg: RunConfig = ctx.cfg
    check_config(cfg)
    scenes = _load(ctx, cfg)
    horizon, n_eval = cfg.eval.horizon, cfg.paper.n_eval
    n_hold = max(1, min(n_eval, len(scenes) // 10 or 1))
    train, held = (scenes[:-n_hold] or scenes), scenes[-n_hold:]
    per_seed, curves, frame = {}, {}, None
    for seed in ctx.seeds:
        tok = SceneTokenizer(motion=cfg.motion, n_slots=cfg.model.n_slots)
        torch.manual_seed(seed)
        model = InfGenModel(cfg.model)
        model.to(ctx.device)
        seqs = [tok(s, np.random.default_rng([seed, i]))[0] for i, s in enumerate(train)]
        res = train_infgen(
            model,
            seqs,
            replace(cfg.train, progress=ctx.show_progress),
            cfg.batch,
            seed,
            ckpt_dir=ctx.out_dir / f"ckpt_seed{seed}",
            device=ctx.device,
        )
        gen = Generator(model, tok, ctx.device)
        counts = np.concatenate([s.counts() for s in train])
        rng = np.random.default_rng(seed)
        rollouts = {"insertion": [], "no_insertion": [], "log_replay": [], "learned_eos": []}
        for i, s in enumerate(held):
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
        out, cur = measure(rollouts, _pooled_gt_stats(held), cfg.eval.eval_from, horizon)
        out.update(
            {"losses": res.losses, "final_loss": float(np.mean(res.losses[-10:])), "n_train_scenarios": len(train)}
        )
        per_seed[seed] = out
        for k, v in cur.items():
            curves.setdefault(k, []).append(v)
        frame = frame or rollouts["insertion"][0]
    return summarise(ctx, per_seed, curves, frame)
