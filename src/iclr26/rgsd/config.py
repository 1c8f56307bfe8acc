"""Typed configuration of the RGSD reproduction (one frozen dataclass tree per scale).

Values the paper's text we could read does not give (latent dim k, training κ, p, β, ε, the reward
offset C, network sizes, PPO settings) are marked "unknown → our default" in the docstrings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from .ppo import PPOConfig
from .puppet import PuppetConfig

__all__ = ["EvalConfig", "METRAConfig", "MethodConfig", "PretrainConfig", "RunConfig", "config_for"]


@dataclass(frozen=True)
class MethodConfig:
    """RGSD's settings (Sec. 3; every value is unknown in the paper → our default).

    k: latent dimension of the skill sphere S^{k−1} (unknown → 16 for the toy body).
    kappa (κ): vMF concentration in training; InfoNCE temperature T = 1/κ (unknown → 10).
    p: probability that an episode is an imitation episode (unknown → 0.5).
    beta (β): weight of the KL anchor KL(q' ‖ q) of the discovery encoder (unknown → 1).
    reward_offset (C): reward offset; None gives C = κ, so rewards are >= 0 under early exit (unknown).
    reward_scale: PPO reward = scale · (C + κ μᵀz); None gives 1/(2κ), i.e. rewards in [0, 1].
    early_exit_eps (ε): exit once the mean Cartesian keypoint error to the aligned reference frame exceeds this (m).
    kl_states: states the KL anchor is applied to (unknown → visited and reference states).
    encoder_hidden: widths of the encoder MLP.
    disc_lr: Adam learning rate of the discovery encoder q' (and of the DIAYN / METRA networks).
    disc_minibatches: discriminator minibatches per PPO iteration (one pass over the rollout).
    """

    k: int = 16
    kappa: float = 10.0
    p: float = 0.5
    beta: float = 1.0
    reward_offset: float | None = None
    reward_scale: float | None = None
    early_exit_eps: float = 0.5
    kl_states: Literal["visited+reference", "visited", "reference"] = "visited+reference"
    encoder_hidden: tuple[int, ...] = (128, 128)
    disc_lr: float = 3e-4
    disc_minibatches: int = 4


@dataclass(frozen=True)
class PretrainConfig:
    """Phase-1 contrastive pretraining (Sec. 3.2; batch layout unknown → P motions × Q pairs).

    steps: maximum InfoNCE steps.
    lr: Adam learning rate.
    motions_per_batch (P): distinct motions per batch.
    pairs_per_motion (Q): (anchor, positive) frame pairs per motion.
    target_intra_cos: stop once the mean intra-motion cosine exceeds this.
    check_every: steps between alignment checks.
    mask_same_motion: remove same-motion entries from InfoNCE's negatives (SupCon-style).
    """

    steps: int = 1500
    lr: float = 1e-3
    motions_per_batch: int = 8
    pairs_per_motion: int = 32
    target_intra_cos: float = 0.95
    check_every: int = 50
    mask_same_motion: bool = True


@dataclass(frozen=True)
class METRAConfig:
    """METRA baseline (Park et al., 2024 defaults where they exist).

    eps (ε): slack of the temporal-distance constraint.
    lam_init (λ₀): initial dual variable.
    """

    eps: float = 1e-3
    lam_init: float = 30.0


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation protocol (Sec. 5 in miniature).

    best_of: skills sampled per reference for DIAYN / METRA (best ERR kept).
    n_vmf: skills z ~ vMF(z_m, κ) per reference and κ for the discovery evaluation.
    kappas: test-time concentrations κ_test (paper: 1000, 100, 20).
    horizon: rollout steps from the reference's first frame.
    metra_cycle_skills: random skills for METRA's reward summed over one reference cycle.
    """

    best_of: int = 64
    n_vmf: int = 32
    kappas: tuple[float, ...] = (1000.0, 100.0, 20.0)
    horizon: int = 79
    metra_cycle_skills: int = 16


@dataclass(frozen=True)
class RunConfig:
    """Everything that changes a result of one run.

    puppet: the PuppetWorld body and its reference clips.
    pretrain: phase-1 contrastive pretraining.
    method: RGSD's settings.
    ppo: PPO shared by every arm (same budget).
    metra: METRA baseline.
    eval: evaluation protocol.
    arms: trained arms (rgsd, imitation = RGSD with p = 1, diayn, metra).
    workers: processes that train (seed, arm) jobs in parallel (1 = in this process).
    refs_path: paper scale: local .npz of reference clips, one [frames, obs_dim] array per clip.
    env_id: paper scale: gymnasium environment id (e.g. Humanoid-v5, needs mujoco) or "puppet".
    """

    puppet: PuppetConfig = PuppetConfig()
    pretrain: PretrainConfig = PretrainConfig()
    method: MethodConfig = MethodConfig()
    ppo: PPOConfig = PPOConfig()
    metra: METRAConfig = METRAConfig()
    eval: EvalConfig = EvalConfig()
    arms: tuple[str, ...] = ("rgsd", "imitation", "diayn", "metra")
    workers: int = 2
    refs_path: str = ""
    env_id: str = "puppet"


def config_for(scale: str) -> RunConfig:
    """smoke / small / paper differ only in sizes and budgets."""
    base = RunConfig()
    if scale == "smoke":
        return replace(
            base,
            puppet=replace(base.puppet, references=("walk_slow", "run", "sidestep_left", "punch")),
            pretrain=replace(base.pretrain, steps=200),
            ppo=replace(base.ppo, n_envs=32, n_steps=32, iterations=5, hidden=(64, 64)),
            method=replace(base.method, encoder_hidden=(64, 64)),
            eval=replace(base.eval, best_of=4, n_vmf=4, horizon=20, metra_cycle_skills=2),
            workers=1,
        )
    if scale == "small":
        return base
    if scale == "paper":
        return replace(
            base,
            ppo=replace(base.ppo, n_envs=4096, n_steps=32, iterations=5000, hidden=(1024, 512)),
            method=replace(base.method, k=32, encoder_hidden=(1024, 512)),
            workers=1,
        )
    raise ValueError(f"unknown scale '{scale}'")
