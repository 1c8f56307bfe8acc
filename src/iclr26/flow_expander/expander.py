"""Flow Expander: mirror descent on the entropy of p_1 with ExpandThenProject steps (paper Alg. 1-2).

Objective (process lift, Eq. 8) with G_t = H (global, G-FE) or G_t = H - alpha_t KL(. || p_t^pre)
(local, L-FE). First variations (Eq. 14/18): grad delta H(p_t) = -s_t, and

    grad delta [H - alpha KL] = -(1 + alpha) (s_t^pi - beta s_t^pre),   beta = alpha / (1 + alpha).

Reparametrisation (App. H, used by the code): gamma~ = (1 + alpha) gamma, beta in [0, 1], so the
running-reward gradient of iteration k is

    grad f_t(x) = -gamma~_k lambda_t (s_t^{pi_{k-1}}(x) - beta s_t^{pre}(x)),   t clipped at 1 - eps,
    grad r(x)   = grad f_{1 - eps}(x)                                      (terminal reward).

Each iteration k (Prop. 1):
  EXPAND  (Eq. 15): Adjoint Matching of pi against the anchor pi_{k-1} with (grad r, grad f)
                    (grad f only when ``traj=True``; S-MEME and FDC are terminal-only);
  PROJECT (Eq. 16): Adjoint Matching of pi against the post-expansion snapshot Q~_k with terminal
                    reward eta_k log v_s (skipped when eta = 0). The official code anchors this step
                    on pi_{k-1} instead: flag ``projection_anchor="previous"``;
  then pi_{k-1} <- copy(pi) (mirror-descent anchor update).

Methods as presets of :class:`FEConfig` (:func:`method_config`):
  G-FE  beta = 0, traj, project;     L-FE  beta > 0, traj, project;   NSE  eta = 0 (no projection);
  S-MEME beta = 0, terminal only, no projection;   FDC  beta > 0, terminal only, no projection;
  CONSTR gamma = 0 (projection only).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace
from typing import Literal

import torch
from torch import nn

from .adjoint_matching import AMConfig, adjoint_matching
from .flow import score_from_velocity, sigma_t
from .verifiers import Verifier

LAMBDA_SCHEDULES = ("const", "sigma", "sigma2")
GAMMA_SCHEDULES = ("const", "inv", "geometric")


@dataclass(frozen=True)
class FEConfig:
    """Flow Expander settings (defaults: the paper's 2-D G-FE toy, App. G).

    K: mirror-descent iterations (paper toy: 10).
    gamma (γ̃_1): reparametrised step size (1 + alpha) gamma of the first iteration.
    gamma_schedule: const | inv (gamma / k) | geometric (gamma * decay^(k-1)); the paper's toy schedules are garbled.
    gamma_decay: decay factor of the geometric schedule.
    beta (β): alpha / (1 + alpha), weight of the pre-trained score (0 = global expansion, App. H).
    eta (η): projection strength (0 = no projection: NSE / S-MEME / FDC).
    traj: whole-process running rewards; False = terminal-only (S-MEME / FDC style).
    lambda_schedule: lambda_t shape: const | sigma (sigma_t) | sigma2 (sigma_t^2) (App. G is ambiguous).
    lambda_scale: multiplies the lambda_t schedule (paper G-FE toy: 1.2).
    lambda_cutoff: lambda_t = 0 for t > cutoff (paper G-FE toy: 0.95).
    lambda_tmin: sigma / sigma2 schedules are evaluated at max(t, tmin) (finite at t = 0).
    eps (ε): score clip: scores are evaluated at min(t, 1 - eps).
    projection_anchor: project-step KL anchor: expanded (paper Eq. 16, Q~_k) | previous (official code, pi_{k-1}).
    projection_grad: project reward gradient: log (paper, eta grad log v_s) | soft (official code, eta grad v_s).
    expand_am: Adjoint Matching oracle of the expand step.
    project_am: Adjoint Matching oracle of the project step.
    """

    K: int = 10
    gamma: float = 0.5
    gamma_schedule: Literal["const", "inv", "geometric"] = "geometric"
    gamma_decay: float = 0.85
    beta: float = 0.0
    eta: float = 2.0
    traj: bool = True
    lambda_schedule: Literal["const", "sigma", "sigma2"] = "const"
    lambda_scale: float = 1.2
    lambda_cutoff: float = 0.95
    lambda_tmin: float = 0.05
    eps: float = 0.02
    projection_anchor: Literal["expanded", "previous"] = "expanded"
    projection_grad: Literal["log", "soft"] = "log"
    expand_am: AMConfig = field(default_factory=AMConfig)
    project_am: AMConfig = field(default_factory=AMConfig)

    def __post_init__(self):
        if self.K < 0:
            raise ValueError("K must be >= 0")
        if self.gamma < 0 or self.eta < 0:
            raise ValueError("gamma and eta must be >= 0")
        if not 0.0 <= self.beta <= 1.0:
            raise ValueError("beta must be in [0, 1]")
        if not 0.0 < self.eps < 1.0:
            raise ValueError("eps must be in (0, 1)")
        if self.lambda_schedule not in LAMBDA_SCHEDULES:
            raise ValueError(f"lambda_schedule must be one of {LAMBDA_SCHEDULES}")
        if self.gamma_schedule not in GAMMA_SCHEDULES:
            raise ValueError(f"gamma_schedule must be one of {GAMMA_SCHEDULES}")
        if self.projection_anchor not in ("expanded", "previous"):
            raise ValueError("projection_anchor must be 'expanded' (paper) or 'previous' (official code)")
        if self.projection_grad not in ("log", "soft"):
            raise ValueError("projection_grad must be 'log' (paper) or 'soft' (official code)")

    def gamma_k(self, k: int) -> float:
        """gamma~_k for k = 1..K."""
        if self.gamma_schedule == "const":
            return self.gamma
        if self.gamma_schedule == "inv":
            return self.gamma / k
        return self.gamma * self.gamma_decay ** (k - 1)

    def lam(self, t: torch.Tensor) -> torch.Tensor:
        """lambda_t: scale * {1, sigma_t, sigma_t^2}(max(t, tmin)) * 1[t <= cutoff]."""
        tt = t.clamp_min(self.lambda_tmin)
        if self.lambda_schedule == "const":
            base = torch.ones_like(t)
        elif self.lambda_schedule == "sigma":
            base = sigma_t(tt)
        else:
            base = sigma_t(tt) ** 2
        return self.lambda_scale * base * (t <= self.lambda_cutoff + 1e-9).to(t.dtype)


def method_config(name: str, **overrides) -> FEConfig:
    """Preset of :class:`FEConfig` for a method name: G-FE, L-FE, NSE, S-MEME, FDC, CONSTR."""
    base = FEConfig()
    presets = {
        "G-FE": dict(beta=0.0, traj=True),
        "L-FE": dict(traj=True),
        "NSE": dict(eta=0.0, traj=True),
        "S-MEME": dict(beta=0.0, eta=0.0, traj=False, lambda_schedule="const", lambda_scale=1.0, lambda_cutoff=1.0),
        "FDC": dict(eta=0.0, traj=False, lambda_schedule="const", lambda_scale=1.0, lambda_cutoff=1.0),
        "CONSTR": dict(gamma=0.0),
    }
    if name not in presets:
        raise ValueError(f"unknown method {name!r}; choose from {sorted(presets)}")
    cfg = replace(base, **{**presets[name], **overrides})
    if name == "CONSTR" and cfg.gamma != 0:
        raise ValueError("CONSTR is the projection step alone: gamma must be 0")
    if name in ("NSE", "S-MEME", "FDC") and cfg.eta != 0:
        raise ValueError(f"{name} has no projection step: eta must be 0")
    return cfg


def frozen_copy(model: nn.Module) -> nn.Module:
    """A deep copy with requires_grad=False (an anchor: pi_pre, pi_{k-1} or Q~_k)."""
    m = copy.deepcopy(model)
    for p in m.parameters():
        p.requires_grad_(False)
    return m.eval()


def model_score(model: nn.Module, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """s_t(x) from a velocity model (OT path)."""
    with torch.no_grad():
        return score_from_velocity(model(x, t), x, t)


def entropy_reward_grads(cfg: FEConfig, gamma_k: float, prev: nn.Module, pre: nn.Module):
    """(grad r, grad f) of the expand step: grad f_t = -gamma_k lambda_t (s^prev - beta s^pre)(x, min(t, 1-eps))."""

    def grad_f(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        tc = t.clamp_max(1.0 - cfg.eps)
        lam = cfg.lam(t)
        if gamma_k == 0 or bool((lam == 0).all()):
            return torch.zeros_like(x)
        s = model_score(prev, x, tc)
        if cfg.beta > 0:
            s = s - cfg.beta * model_score(pre, x, tc)
        return -gamma_k * lam.reshape(-1, 1) * s

    def grad_r(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return grad_f(x, torch.full((x.shape[0],), 1.0 - cfg.eps, device=x.device, dtype=x.dtype))

    return grad_r, (grad_f if cfg.traj else None)


@dataclass
class FEResult:
    """Output of :func:`flow_expansion`: the fine-tuned model and per-iteration logs."""

    model: nn.Module
    history: list[dict] = field(default_factory=list)


def flow_expansion(
    model: nn.Module, verifier: Verifier | None, cfg: FEConfig, seed: int = 0, progress=None, callback=None, log=None
) -> FEResult:
    """Run FE (or a baseline preset) from a pre-trained velocity model; ``model`` itself is untouched.

    model: any ``nn.Module`` with ``forward(x, t) -> velocity`` and a ``dim`` attribute; FE runs on its
        device and dtype (the seeded generator stays on the CPU, so a seed draws the same noise everywhere).
    verifier: needed when eta > 0 (its differentiable ``grad_log_soft`` drives the projection).
    callback: optional ``callback(k, pi)`` after every iteration (evaluation curves).
    log: optional ``log(step, **scalars)`` per Adam step of either oracle (``expand_loss`` /
        ``project_loss``, ``grad_norm``, ``adjoint_rms``, ``k``); ``step`` counts all oracle steps.
    """
    if cfg.eta > 0 and verifier is None:
        raise ValueError("eta > 0 needs a verifier for the projection step")
    gen = torch.Generator().manual_seed(seed)
    pre = frozen_copy(model)  # pi_pre: never changes
    prev = frozen_copy(model)  # pi_{k-1}: mirror-descent anchor
    pi = copy.deepcopy(model).train()
    for p in pi.parameters():
        p.requires_grad_(True)
    history: list[dict] = []
    n_logged = [0]

    def oracle_log(phase: str, k: int):
        if log is None:
            return None

        def fn(step, loss, **scalars):
            log(n_logged[0], **{f"{phase}_loss": loss, "k": k}, **scalars)
            n_logged[0] += 1

        return fn

    it = range(1, cfg.K + 1)
    if progress is not None:
        it = progress(it, desc="FE iterations")
    for k in it:
        g_k = cfg.gamma_k(k)
        rec = {"k": k, "gamma": g_k}
        # ---- EXPAND (Eq. 15): reward fine-tuning of pi against pi_{k-1} ----
        if g_k > 0:
            grad_r, grad_f = entropy_reward_grads(cfg, g_k, prev, pre)
            losses = adjoint_matching(pi, prev, grad_r, grad_f, cfg.expand_am, gen, log=oracle_log("expand", k))
            rec["expand_loss"] = float(sum(losses) / max(len(losses), 1))
        # ---- PROJECT (Eq. 16): terminal reward eta log v_s, anchored on Q~_k (paper) ----
        if cfg.eta > 0:
            anchor = frozen_copy(pi) if cfg.projection_anchor == "expanded" else prev
            eta = cfg.eta
            if cfg.projection_grad == "log":

                def grad_v(x, t, eta=eta):
                    return eta * verifier.grad_log_soft(x)
            else:

                def grad_v(x, t, eta=eta):
                    return eta * verifier.grad_soft(x)

            losses = adjoint_matching(pi, anchor, grad_v, None, cfg.project_am, gen, log=oracle_log("project", k))
            rec["project_loss"] = float(sum(losses) / max(len(losses), 1))
        # ---- anchor update pi_{k-1} <- pi ----
        prev = frozen_copy(pi)
        for key in ("expand_loss", "project_loss"):
            if key in rec and not math.isfinite(rec[key]):
                raise FloatingPointError(f"FE iteration {k}: {key} is not finite")
        history.append(rec)
        if callback is not None:
            callback(k, pi)
    return FEResult(model=pi.eval(), history=history)
