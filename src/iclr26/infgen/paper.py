"""Paper scale: ScenarioNet scenarios from a local folder, the official model sizes, DDP training via
``core.train.fit`` (``torchrun --nproc_per_node=8 -m iclr26.cli run infgen --scale paper --set data_dir=...``),
then the same 120-second rollout measurements as the small scale on held-out scenarios.

``--set`` keys: ``data_dir`` (required: a ScenarioNet database folder of scenario pickles), ``size``
(small / large / xl, default large), ``steps`` (optimiser steps, default 100000), ``batch`` (per rank, 4),
``limit`` (max scenarios to read), ``n_eval`` (held-out scenarios rolled out, 8), ``horizon`` (steps at 2 Hz,
240 = 120 s), ``device`` (cpu / cuda).
"""

from __future__ import annotations

import numpy as np
import torch

from iclr26.core.experiment import ExperimentError, RunContext, RunOutput
from iclr26.infgen.generate import Generator, RolloutConfig, log_replay
from iclr26.infgen.metrics import scene_stats
from iclr26.infgen.model import InfGenConfig, InfGenModel
from iclr26.infgen.scenarionet import load_scenarios, scenario_to_scene
from iclr26.infgen.tokenizer import SceneTokenizer
from iclr26.infgen.training import paper_train_config, train_infgen
from iclr26.infgen.world import Scene


def _pooled_gt_stats(scenes: list[Scene]) -> dict:
    stats = [scene_stats(s, 0, s.T) for s in scenes]
    out = {k: np.concatenate([st[k] for st in stats]) for k in ("speed", "accel", "headway")}
    out["count"] = float(np.mean([st["count"] for st in stats]))
    for k in ("collisions", "offroad", "agent_steps"):
        out[k] = int(sum(st[k] for st in stats))
    return out


def run_paper(ctx: RunContext) -> RunOutput:
    from iclr26.infgen.experiment import measure, summarise

    data_dir = ctx.local_path("data_dir")
    size = ctx.option("size", "large")
    steps = int(ctx.option("steps", "100000"))
    batch = int(ctx.option("batch", "4"))
    limit = ctx.option("limit")
    n_eval = int(ctx.option("n_eval", "8"))
    horizon = int(ctx.option("horizon", "240"))
    try:
        trust = str(ctx.option("trust_pickles", "0")).lower() in ("1", "true", "yes")
        raw = load_scenarios(data_dir, int(limit) if limit else None, trust_pickles=trust)
        scenes = [scenario_to_scene(sd) for sd in raw]
    except (OSError, ValueError) as exc:
        raise ExperimentError(f"infgen paper scale: {exc}") from exc
    n_hold = max(1, min(n_eval, len(scenes) // 10 or 1))
    train, held = (scenes[:-n_hold] or scenes), scenes[-n_hold:]
    per_seed, curves, frame = {}, {}, None
    for seed in ctx.seeds:
        tok = SceneTokenizer(n_slots=128)
        torch.manual_seed(seed)
        model = InfGenModel(InfGenConfig.paper(size, max_segments=max(3000, max(s.map.num_segments for s in scenes))))
        model.to(ctx.device)
        seqs = [tok(s, np.random.default_rng([seed, i]))[0] for i, s in enumerate(train)]
        res = train_infgen(
            model,
            seqs,
            paper_train_config(steps, progress=ctx.show_progress),
            batch,
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
                    RolloutConfig(insertion="released", max_agents=120),
                    density_target=int(rng.choice(counts)),
                    rng=r,
                )
            )
            rollouts["no_insertion"].append(gen.rollout(s, horizon, RolloutConfig(insertion="off"), rng=r))
            rollouts["learned_eos"].append(
                gen.rollout(s, horizon, RolloutConfig(insertion="learned", max_agents=120), rng=r)
            )
            rollouts["log_replay"].append(log_replay(s, horizon))
        out, cur = measure(rollouts, _pooled_gt_stats(held), horizon // 2, horizon)
        out.update(
            {"losses": res.losses, "final_loss": float(np.mean(res.losses[-10:])), "n_train_scenarios": len(train)}
        )
        per_seed[seed] = out
        for k, v in cur.items():
            curves.setdefault(k, []).append(v)
        frame = frame or rollouts["insertion"][0]
    sc = {
        "horizon": horizon,
        "eval_from": horizon // 2,
        "n_scenes": len(held),
        "n_learned": len(held),
        "steps": steps,
        "batch": batch,
        "size": size,
    }
    return summarise(ctx, per_seed, curves, frame, sc)
