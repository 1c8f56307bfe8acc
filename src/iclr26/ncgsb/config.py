"""Typed configuration of NCGSB / CWG: one frozen dataclass tree per scale (``config_for``).

The paper gives the loss and the architecture (Sec. 3: a stack of residual blocks, Sinkhorn/W2 marginal
terms, an energy-weighted discrete geodesic term) but, in the sources we could read, no loss weights,
block sizes or optimiser settings. Fields marked *[ours]* are this library's choices, set from the
analysis in the docstrings, never from claim results.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal


@dataclass(frozen=True)
class CWGConfig:
    """The CWG bridge (Sec. 3; [ours] where the paper's value is unknown).

    n_blocks (K): residual blocks; block k outputs the marginal at t_k = k/K.
    hidden: width of each block's MLP D -> hidden -> hidden -> D [ours].
    gamma (γ): contact damping; > 0 energy decreases, < 0 increases, 0 is the conservative GSB.
    mode: geodesic term: "action" (discounted Herglotz action, default) or "jacobi" (printed Φ·W2² form).
    energy_level (E₀): Jacobi-mode energy level H in Φ = e^{γt}(E₀ + F + B); a free parameter.
    lambda_geo (λ_geo): weight of the geodesic term [ours]; shrinks a learned translation by ≈λ/2 (0.02: 1%).
    step_cost: estimator of W2²(ρ^{t_k}, ρ^{t_{k-1}}): "induced" coupling bound or "sinkhorn".
    fisher_sigma (σ): noise level of the Fisher (Bohm) term B = σ⁴/8·E|∇log ρ|²; 0 drops it.
    blur: Sinkhorn blur (ε = blur²) of the marginal terms, in data units.
    scaling: ε-scaling factor of the Sinkhorn solver.
    """

    n_blocks: int = 10
    hidden: int = 64
    gamma: float = 0.0
    mode: Literal["action", "jacobi"] = "action"
    energy_level: float = 1.0
    lambda_geo: float = 0.02
    step_cost: Literal["induced", "sinkhorn"] = "induced"
    fisher_sigma: float = 0.0
    blur: float = 0.05
    scaling: float = 0.5


@dataclass(frozen=True)
class FitConfig:
    """Optimisation of one bridge [ours].

    steps: Adam steps.
    lr: peak learning rate (cosine decay to 0).
    n_particles (N): fresh source particles (and data batch size) per step.
    ramp_frac: first stage of the two-stage schedule: λ_geo ramps over this share of the steps.
    ramp_start: λ_geo multiplier at step 0 of the ramp (reaches 1 at the end of the ramp).
    grad_clip: gradient-norm clip.
    guide_steps: Adam steps of the guided fine-tuning stage.
    guide_lr: learning rate of the guided fine-tuning stage.
    """

    steps: int = 500
    lr: float = 1e-3
    n_particles: int = 128
    ramp_frac: float = 0.3
    ramp_start: float = 0.1
    grad_clip: float = 1.0
    guide_steps: int = 200
    guide_lr: float = 5e-4


@dataclass(frozen=True)
class TaskAConfig:
    """Task A: a damped (friction) particle process seen as unpaired snapshots.

    gamma_true (γ*): friction of the ground truth Ẍ = −γ*Ẋ − ω²y e_y.
    omega (ω): weak y-confinement frequency.
    v0: mean initial velocity (x, y).
    v_std: initial velocity spread.
    x_std: spread of each of the two source clusters at (−4, ±1).
    noise: Brownian noise scale on positions.
    n_sim_steps: Euler steps of the simulation over [0, 1].
    n_per_snapshot: fresh particles per observed snapshot.
    train_times: snapshot times used for fitting (0 and 1 are the bridge ends).
    heldout_times: held-out times; each chooses γ while the other is scored.
    gammas: the γ grid (W2-vs-γ curve and the selection grid).
    control: also fit the undamped control process (γ* = 0).
    """

    gamma_true: float = 4.0
    omega: float = 2.0
    v0: tuple[float, float] = (10.0, 0.0)
    v_std: float = 0.5
    x_std: float = 0.3
    noise: float = 0.05
    n_sim_steps: int = 200
    n_per_snapshot: int = 1000
    train_times: tuple[float, ...] = (0.0, 0.6, 0.8, 1.0)
    heldout_times: tuple[float, ...] = (0.2, 0.4)
    gammas: tuple[float, ...] = (-2.0, 0.0, 2.0, 4.0, 6.0)
    control: bool = True


@dataclass(frozen=True)
class TaskBConfig:
    """Task B: guided CWG through a waypoint (metric modulation, Sec. 3 "Guided CWG").

    source_mean: mean of ρ_a = N(source_mean, std²I).
    target_mean: mean of ρ_b = N(target_mean, std²I).
    std: spread of both ends.
    waypoint (y): guidance target at t_s (f = identity).
    t_s: guidance time.
    lambdas (λ_G): guidance weights tried; the one with the lower guidance error is reported.
    n_eval: particles for evaluation.
    """

    source_mean: tuple[float, float] = (-3.0, 0.0)
    target_mean: tuple[float, float] = (3.0, 0.0)
    std: float = 0.3
    waypoint: tuple[float, float] = (0.0, 2.5)
    t_s: float = 0.5
    lambdas: tuple[float, ...] = (1.0, 5.0)
    n_eval: int = 1000


@dataclass(frozen=True)
class TaskCConfig:
    """Task C: GSB with two circular obstacles forming a neck (a navigation proxy for LiDAR).

    source_mean: mean of ρ_a.
    target_mean: mean of ρ_b.
    std: spread of both ends.
    obstacles: circle centres (x1, y1, x2, y2).
    radius: obstacle radius.
    cost (c): obstacle cost U(x) = c·Σ_i sigmoid((r − |x − o_i|)/τ).
    tau (τ): obstacle edge softness.
    gammas: damping values of the CWG fits with the obstacle potential.
    n_eval: particles for evaluation.
    """

    source_mean: tuple[float, float] = (-3.0, 0.0)
    target_mean: tuple[float, float] = (3.0, 0.0)
    std: float = 0.3
    obstacles: tuple[float, float, float, float] = (0.0, 0.9, 0.0, -0.9)
    radius: float = 0.7
    cost: float = 50.0
    tau: float = 0.05
    gammas: tuple[float, ...] = (0.0, 1.0)
    n_eval: int = 1000


@dataclass(frozen=True)
class PaperConfig:
    """Paper scale: real local files (nothing downloads).

    snapshots: .npz: one array per time key ("0.25"), or TorchCFM's eb_velocity_v5 layout (pcs, sample_labels).
    n_dims: leading dimensions kept from the snapshot arrays (e.g. 5 PCA components); 0 keeps all.
    lidar: .npy point cloud (P, 3) of a LiDAR scan for the k-NN tangent-plane potential.
    knn: neighbours of the tangent-plane fit.
    lidar_cost: weight of the squared distance to the tangent plane.
    """

    snapshots: str = ""
    n_dims: int = 5
    lidar: str = ""
    knn: int = 20
    lidar_cost: float = 100.0


@dataclass(frozen=True)
class RunConfig:
    """Everything that changes a result of one NCGSB run.

    method: the CWG bridge (γ is set per fit from the task grids).
    fit: optimisation of each bridge.
    task_a: damped-process snapshots (headline claim C2).
    task_b: guided CWG (C3).
    task_c: obstacles (reported).
    closed_form_gammas: γ values of the closed-form check C1 (U = 0, Gaussian to shifted Gaussian).
    closed_form_shift: displacement of the closed-form check.
    sb_sigma: noise σ of the piecewise entropic SB baseline (Brownian bridge; Sinkhorn ε = σ²).
    n_eval: particles pushed through a trained bridge for evaluation.
    workers: worker processes for the fits (0 runs in this process).
    paper: paper-scale inputs.
    """

    method: CWGConfig = CWGConfig()
    fit: FitConfig = FitConfig()
    task_a: TaskAConfig = TaskAConfig()
    task_b: TaskBConfig = TaskBConfig()
    task_c: TaskCConfig = TaskCConfig()
    closed_form_gammas: tuple[float, ...] = (-2.0, 0.0, 2.0)
    closed_form_shift: tuple[float, float] = (4.0, 0.0)
    sb_sigma: float = 0.3
    n_eval: int = 1000
    workers: int = 2
    paper: PaperConfig = PaperConfig()


def config_for(scale: str) -> RunConfig:
    """smoke / small / paper differ only in sizes and step counts."""
    base = RunConfig()
    if scale == "smoke":
        return replace(
            base,
            method=replace(base.method, n_blocks=5, hidden=16),
            fit=replace(base.fit, steps=40, n_particles=64, guide_steps=20),
            task_a=replace(base.task_a, gammas=(0.0, 4.0), n_per_snapshot=200, n_sim_steps=50, control=False),
            task_b=replace(base.task_b, lambdas=(5.0,), n_eval=200),
            task_c=replace(base.task_c, gammas=(0.0,), n_eval=200),
            closed_form_gammas=(2.0,),
            n_eval=200,
            workers=0,
        )
    if scale == "small":
        return base
    if scale == "paper":
        return replace(base, fit=replace(base.fit, steps=3000, n_particles=1024))
    raise ValueError(f"unknown scale {scale!r}")
