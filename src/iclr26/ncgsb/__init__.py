"""NCGSB / CWG: non-conservative Schrödinger bridges as contact Wasserstein geodesics.

Andrea Testa, Søren Hauberg, Tamim Asfour, Leonel Rozo. "Contact Wasserstein Geodesics for Non-Conservative
Schrödinger Bridges", ICLR 2026, arXiv 2511.06856. No official code was available; the paper's full text was
not either (abstract, introduction and detailed third-party summaries were): items marked "ours" in the
docstrings are this library's reading.

Implemented:

* :mod:`.bridge` - :class:`CWGBridge` (K residual blocks; Sinkhorn marginal terms; the e^{γt}-weighted
  geodesic term in ``action`` and ``jacobi`` modes; potential and Fisher terms; two-stage λ_geo ramp; guided
  fine-tuning), the Herglotz recursion and its discounted-sum form, the discrete Euler-Lagrange solve.
* :mod:`.ot` - log-domain debiased Sinkhorn divergence, induced-coupling step cost, exact W2.
* :mod:`.baselines` - piecewise OT / entropic SB interpolation, sampler-side guidance, a small IMF solver.
* :mod:`.tasks` - the synthetic tasks A (damped process), B (waypoint), C (obstacles).
* :mod:`.paper` / :mod:`.paper_run` - real snapshot files (``.npz``, TorchCFM embryoid-body layout), a LiDAR
  k-NN tangent-plane potential, image latents through a local AutoencoderKL.
"""

from iclr26.ncgsb.baselines import IMFBridge, ot_interpolate, sampler_push, sb_interpolate, sb_paths
from iclr26.ncgsb.bridge import (
    CWGBridge,
    conservative_geodesic_loss,
    discount_weights,
    discounted_action,
    discrete_geodesic,
    displacement_fraction,
    fisher_term,
    geodesic_loss,
    herglotz_euler,
    herglotz_exact,
    kde_score,
    kinetic_per_block,
    phi_gamma,
    state_costs,
    step_costs,
)
from iclr26.ncgsb.config import CWGConfig, FitConfig, RunConfig, config_for
from iclr26.ncgsb.ot import entropic_ot, exact_w2, induced_step_cost, sinkhorn_divergence
from iclr26.ncgsb.paper import LidarPotential, SnapshotError, encode_latents, load_autoencoder_kl, load_snapshots
from iclr26.ncgsb.tasks import ObstaclePotential, simulate_damped, task_a_snapshots

__all__ = [
    "IMFBridge",
    "ot_interpolate",
    "sampler_push",
    "sb_interpolate",
    "sb_paths",
    "CWGBridge",
    "conservative_geodesic_loss",
    "discount_weights",
    "discounted_action",
    "discrete_geodesic",
    "displacement_fraction",
    "fisher_term",
    "geodesic_loss",
    "herglotz_euler",
    "herglotz_exact",
    "kde_score",
    "kinetic_per_block",
    "phi_gamma",
    "state_costs",
    "step_costs",
    "CWGConfig",
    "FitConfig",
    "RunConfig",
    "config_for",
    "entropic_ot",
    "exact_w2",
    "induced_step_cost",
    "sinkhorn_divergence",
    "LidarPotential",
    "SnapshotError",
    "encode_latents",
    "load_autoencoder_kl",
    "load_snapshots",
    "ObstaclePotential",
    "simulate_damped",
    "task_a_snapshots",
]
