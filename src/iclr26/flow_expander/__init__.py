"""Flow Expander (FE): Verifier-Constrained Flow Expansion for Discovery Beyond the Data.

De Santi, Protopapas, Hsieh, Krause. ICLR 2026, arXiv 2602.15984.

Implemented:
  * flow matching on the OT path (:func:`pretrain_flow_matching`, :class:`VelocityMLP`), score /
    velocity / epsilon / endpoint conversions, ODE and memoryless-SDE samplers (``flow``);
  * the Adjoint Matching oracle with the published AM signs (``adjoint_matching``);
  * FE's mirror descent with ExpandThenProject steps: G-FE (global, strong verifier) and L-FE
    (local, weak verifier), and the baselines S-MEME, FDC, NSE, CONSTR as presets (``expander``);
    the official code's projection anchor (pi_{k-1}) and gradient (grad v_s) as flags;
  * verifiers: hard/soft ellipse, disc-rejection weak verifier, half-plane, intersection,
    min-distance (Eq. 55), and an RDKit conformer verifier behind the ``chem`` extra (``verifiers``,
    ``conformer``);
  * metrics: Kozachenko-Leonenko and histogram entropy, coverage, Vendi (``metrics``);
  * an exact finite-state FE reference (``discrete``) used by the tests;
  * the experiment: tasks T1/T2 (claims C1/C2) and the conformer task T3 (claim C3) / paper-scale path,
    configured by one frozen dataclass tree per scale (``config``).

Not implemented: the DDPO/PPO projection for non-differentiable verifiers, FlowMol / GEOM
checkpoints (no local copy), the augmented-Lagrangian variant of the initial official commit.
"""

from .adjoint_matching import AMConfig, adjoint_matching, adjoint_matching_loss, lean_adjoint
from .config import ConformerConfig, MethodSettings, RunConfig, T1Methods, T2Methods, ToyConfig, config_for
from .discrete import discrete_expand, discrete_flow_expansion, discrete_project
from .expander import FEConfig, FEResult, entropy_reward_grads, flow_expansion, frozen_copy, method_config
from .flow import (
    AsVelocity,
    FMConfig,
    GaussianVelocity,
    VelocityMLP,
    flow_matching_loss,
    memoryless_drift,
    pretrain_flow_matching,
    sample_memoryless,
    sample_ode,
    score_from_velocity,
    sigma_t,
    to_velocity,
    velocity_from_score,
)
from .metrics import grid_coverage, histogram_entropy, kl_entropy, rbf_kernel_median, validity_rate, vendi_score
from .tasks import Task, make_t1, make_t2
from .verifiers import (
    CallableVerifier,
    ConstantVerifier,
    DiscRejectionVerifier,
    EllipseVerifier,
    HalfPlaneVerifier,
    IntersectionVerifier,
    MinDistanceVerifier,
    Verifier,
)

__all__ = [
    "ConformerConfig",
    "MethodSettings",
    "RunConfig",
    "T1Methods",
    "T2Methods",
    "ToyConfig",
    "config_for",
    "AMConfig",
    "adjoint_matching",
    "adjoint_matching_loss",
    "lean_adjoint",
    "discrete_expand",
    "discrete_flow_expansion",
    "discrete_project",
    "FEConfig",
    "FEResult",
    "entropy_reward_grads",
    "flow_expansion",
    "frozen_copy",
    "method_config",
    "AsVelocity",
    "FMConfig",
    "GaussianVelocity",
    "VelocityMLP",
    "flow_matching_loss",
    "memoryless_drift",
    "pretrain_flow_matching",
    "sample_memoryless",
    "sample_ode",
    "score_from_velocity",
    "sigma_t",
    "to_velocity",
    "velocity_from_score",
    "grid_coverage",
    "histogram_entropy",
    "kl_entropy",
    "rbf_kernel_median",
    "validity_rate",
    "vendi_score",
    "Task",
    "make_t1",
    "make_t2",
    "CallableVerifier",
    "ConstantVerifier",
    "DiscRejectionVerifier",
    "EllipseVerifier",
    "HalfPlaneVerifier",
    "IntersectionVerifier",
    "MinDistanceVerifier",
    "Verifier",
]
