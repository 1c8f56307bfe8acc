"""Evaluation of a trained arm: imitation error (C2), vMF-perturbed discovery (C3), METRA's cycle reward (Sec. 6)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .config import RunConfig
from .encoder import RGSDEncoder
from .metrics import cartesian_error, frechet_distance, metra_cycle_ratio, pairwise_diversity, skill_realisation
from .trainer import RefBank, TrainedArm, rollout_from_first_frame
from .vmf import uniform_sphere, vmf_sample

__all__ = ["evaluate_arm", "hold_pose_errors", "imitation_errors"]

FIGURE_REFS = ("walk_slow", "sidestep_left", "backward")


def _ref_kp(bank: RefBank, ids: torch.Tensor, horizon: int) -> torch.Tensor:
    return bank.kp_world[ids, : horizon + 1]


def hold_pose_errors(cfg: RunConfig, bank: RefBank) -> list[float]:
    """ERR per reference of keeping the PD target at the first frame's pose (the competence gate's reference)."""
    h = min(cfg.eval.horizon, bank.T - 1)
    ids = torch.arange(len(bank.refs))
    out = rollout_from_first_frame(None, cfg, bank, ids, None, h, hold_pose=True)
    return cartesian_error(out["kp"], _ref_kp(bank, ids, h)).tolist()


@torch.no_grad()
def imitation_errors(trained: TrainedArm, cfg: RunConfig, bank: RefBank, seed: int) -> list[float]:
    """ERR per reference: z = z_m for RGSD / imitation-only; best of ``best_of`` uniform skills for DIAYN / METRA."""
    h = min(cfg.eval.horizon, bank.T - 1)
    K = len(bank.refs)
    if trained.z_refs is not None:
        ids = torch.arange(K)
        out = rollout_from_first_frame(trained.policy, cfg, bank, ids, trained.z_refs, h)
        return cartesian_error(out["kp"], _ref_kp(bank, ids, h)).tolist()
    n = cfg.eval.best_of
    gen = torch.Generator().manual_seed(seed + 5000)
    z = uniform_sphere(n, cfg.method.k, gen)
    ids = torch.arange(K).repeat_interleave(n)
    out = rollout_from_first_frame(trained.policy, cfg, bank, ids, z.repeat(K, 1), h)
    err = cartesian_error(out["kp"], _ref_kp(bank, ids, h)).reshape(K, n)
    return err.min(1).values.tolist()


@torch.no_grad()
def _discovery(trained: TrainedArm, cfg: RunConfig, bank: RefBank, enc: RGSDEncoder, seed: int) -> dict[str, Any]:
    """Per κ (and uniform z): diversity, frozen-encoder realisation of z, Fréchet distance to the reference."""
    h = min(cfg.eval.horizon, bank.T - 1)
    K, n = len(bank.refs), cfg.eval.n_vmf
    ids = torch.arange(K).repeat_interleave(n)
    out: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    settings = [(str(int(k)), float(k)) for k in cfg.eval.kappas] + [("uniform", None)]
    for i, (name, kappa) in enumerate(settings):
        if kappa is None:
            z = uniform_sphere(K * n, cfg.method.k, torch.Generator().manual_seed(seed + 7000))
        else:
            z = vmf_sample(trained.z_refs.repeat_interleave(n, 0), kappa, seed=seed + 6000 + i)
        roll = rollout_from_first_frame(trained.policy, cfg, bank, ids, z, h)
        kp = roll["kp"].reshape(K, n, *roll["kp"].shape[1:])
        obs = roll["obs"].reshape(K, n, *roll["obs"].shape[1:])
        div = float(np.mean([pairwise_diversity(kp[m]) for m in range(K)]))
        real = float(skill_realisation(enc, roll["obs"], z).mean())
        fd = float(
            np.mean(
                [frechet_distance(obs[m].reshape(-1, obs.shape[-1]).numpy(), bank.obs[m].numpy()) for m in range(K)]
            )
        )
        out[name] = {"diversity": div, "realisation": real, "frechet": fd}
        if kappa is not None:
            root = roll["root"].reshape(K, n, h + 1, 3)
            paths[name] = {
                r.name: {"rollouts": root[m, :8, :, :2].tolist(), "reference": bank.root[m, : h + 1, :2].tolist()}
                for m, r in enumerate(bank.refs)
                if r.name in FIGURE_REFS
            }
    return {"vmf": out, "root_paths": paths}


def evaluate_arm(
    trained: TrainedArm, cfg: RunConfig, bank: RefBank, enc: RGSDEncoder | None, seed: int
) -> dict[str, Any]:
    """Everything the report needs from one trained arm."""
    res: dict[str, Any] = {"err_per_ref": imitation_errors(trained, cfg, bank, seed)}
    if trained.arm in ("rgsd", "imitation") and enc is not None:
        res.update(_discovery(trained, cfg, bank, enc, seed))
    if trained.arm == "metra":
        z = uniform_sphere(cfg.eval.metra_cycle_skills, cfg.method.k, torch.Generator().manual_seed(seed + 8000))
        res["metra_cycle_ratio"] = float(
            np.mean([metra_cycle_ratio(trained.module, r.obs, r.period, z) for r in bank.refs])
        )
    return res
