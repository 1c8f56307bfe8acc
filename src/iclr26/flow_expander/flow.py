"""Flow matching on the OT path, score/velocity conversions and the memoryless SDE.

Conventions (Adjoint Matching notation; t = 0 is noise, t = 1 is data):

    x_t = alpha_t x_1 + beta_t x_0,   OT path: alpha_t = t, beta_t = 1 - t
    k_t     = alpha_dot_t / alpha_t                      = 1 / t
    eta_t   = beta_t (k_t beta_t - beta_dot_t)           = (1 - t) / t
    sigma_t = sqrt(2 eta_t)   (memoryless noise level)   = sqrt(2 (1 - t) / t)

Score from a velocity model:   s_t(x) = (v(x, t) - k_t x) / eta_t = (t v - x) / (1 - t).
Memoryless SDE:  X_{t+h} = X_t + h (2 v(X_t, t) - k_t X_t) + sqrt(h) sigma_t xi,
whose drift ``b = 2 v - k_t x = v + (sigma_t^2 / 2) s_t`` has the same marginals as the ODE
``dX = v dt``. Near t = 0, k_t and sigma_t diverge; like the official code we use
``k_t = 1 / (t + h)`` and ``eta_t = (1 - t) / (t + h)`` on a grid of step h (flag ``t_offset``).

Any user model plugs in as a ``torch.nn.Module`` with ``forward(x, t) -> velocity`` where ``x`` is
``(B, d)`` and ``t`` is ``(B,)``. Models trained with another parametrisation are wrapped with
:class:`AsVelocity` (``output_type`` in ``velocity | score | epsilon | endpoint``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

OUTPUT_TYPES = ("velocity", "score", "epsilon", "endpoint")


# ------------------------------------------------------------------------------------------------
# OT schedule algebra
# ------------------------------------------------------------------------------------------------


def k_t(t: torch.Tensor, offset: float = 0.0) -> torch.Tensor:
    """k_t = alpha_dot / alpha = 1 / (t + offset) on the OT path."""
    return 1.0 / (t + offset)


def eta_t(t: torch.Tensor, offset: float = 0.0) -> torch.Tensor:
    """eta_t = beta (k beta - beta_dot) = (1 - t) / (t + offset) on the OT path."""
    return (1.0 - t) / (t + offset)


def sigma_t(t: torch.Tensor, offset: float = 0.0) -> torch.Tensor:
    """Memoryless noise sigma_t = sqrt(2 eta_t) = sqrt(2 (1 - t) / (t + offset))."""
    return torch.sqrt(2.0 * eta_t(t, offset).clamp_min(0.0))


def _col(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Broadcast a (B,) or scalar time against x of shape (B, ...)."""
    t = torch.as_tensor(t, dtype=x.dtype, device=x.device)
    if t.ndim == 0:
        t = t.expand(x.shape[0])
    return t.reshape(-1, *([1] * (x.ndim - 1)))


def score_from_velocity(v: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """s_t(x) = (t v - x) / (1 - t)   (OT path; diverges as t -> 1, clip t at 1 - eps)."""
    tc = _col(t, x)
    return (tc * v - x) / (1.0 - tc)


def velocity_from_score(s: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """v = k_t x + eta_t s = (x + (1 - t) s) / t   (inverse of :func:`score_from_velocity`)."""
    tc = _col(t, x)
    return (x + (1.0 - tc) * s) / tc


def velocity_from_epsilon(eps: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """eps-prediction: s = -eps / beta_t, so v = (x - eps) / t on the OT path."""
    tc = _col(t, x)
    return (x - eps) / tc


def velocity_from_endpoint(x1: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """x_1-prediction: v = (x1_hat - x) / (1 - t) on the OT path."""
    tc = _col(t, x)
    return (x1 - x) / (1.0 - tc)


def to_velocity(out: torch.Tensor, x: torch.Tensor, t: torch.Tensor, output_type: str) -> torch.Tensor:
    """Convert a model output of type ``output_type`` at (x, t) to a velocity."""
    if output_type == "velocity":
        return out
    if output_type == "score":
        return velocity_from_score(out, x, t)
    if output_type == "epsilon":
        return velocity_from_epsilon(out, x, t)
    if output_type == "endpoint":
        return velocity_from_endpoint(out, x, t)
    raise ValueError(f"output_type must be one of {OUTPUT_TYPES}, got {output_type!r}")


class AsVelocity(nn.Module):
    """Adapt a user model to FE's interface ``forward(x, t) -> velocity`` with a ``dim`` attribute.

    model: an ``nn.Module`` that either has a ``velocity(x, t)`` method or whose ``forward(x, t)``
        returns an output of type ``output_type`` (velocity | score | epsilon | endpoint).
    dim: data dimension (defaults to ``model.dim``).
    """

    def __init__(self, model: nn.Module, output_type: str = "velocity", dim: int | None = None):
        super().__init__()
        if output_type not in OUTPUT_TYPES:
            raise ValueError(f"output_type must be one of {OUTPUT_TYPES}, got {output_type!r}")
        self.model, self.output_type = model, output_type
        self.dim = dim if dim is not None else getattr(model, "dim", None)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        fn = getattr(self.model, "velocity", None)
        out = fn(x, t) if callable(fn) else self.model(x, t)
        return to_velocity(out, x, t, self.output_type)


class GaussianVelocity(nn.Module):
    """Analytic OT velocity for data N(mu, diag(s^2)) (a test oracle and a toy base model).

    p_t = N(t mu, t^2 s^2 + (1-t)^2) and v(x, t) = mu + (t s^2 - (1 - t)) (x - t mu) / var_t.
    """

    def __init__(self, mu, s):
        super().__init__()
        self.register_buffer("mu", torch.as_tensor(mu, dtype=torch.float32).reshape(1, -1))
        self.register_buffer("s", torch.as_tensor(s, dtype=torch.float32).reshape(1, -1))

    def var_t(self, t: torch.Tensor) -> torch.Tensor:
        t = t.reshape(-1, 1)
        return t**2 * self.s**2 + (1 - t) ** 2

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        tc = t.reshape(-1, 1)
        return self.mu + (tc * self.s**2 - (1 - tc)) * (x - tc * self.mu) / self.var_t(t)

    def score(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Analytic score -(x - t mu) / var_t."""
        return -(x - t.reshape(-1, 1) * self.mu) / self.var_t(t)


# ------------------------------------------------------------------------------------------------
# Velocity network and flow-matching pre-training
# ------------------------------------------------------------------------------------------------


class VelocityMLP(nn.Module):
    """v_theta(x, t): MLP on [x, sinusoidal(t)] with SiLU units and a zero-initialised head."""

    def __init__(self, dim: int, hidden: int = 128, depth: int = 3, t_features: int = 16):
        super().__init__()
        self.dim, self.t_features = dim, t_features
        layers: list[nn.Module] = []
        width = dim + t_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.SiLU()]
            width = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, dim)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        freqs = torch.exp(torch.linspace(0.0, math.log(100.0), t_features // 2))
        self.register_buffer("freqs", freqs)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        t = torch.as_tensor(t, dtype=x.dtype, device=x.device)
        if t.ndim == 0:
            t = t.expand(x.shape[0])
        ang = t.reshape(-1, 1) * self.freqs
        h = torch.cat([x, torch.sin(ang), torch.cos(ang)], dim=-1)
        return self.head(self.body(h))


@dataclass(frozen=True)
class FMConfig:
    """Flow-matching pre-training (OT path, conditional velocity regression).

    steps: Adam steps.
    batch_size: data samples per step.
    lr: Adam learning rate (cosine decay to 0).
    grad_clip: gradient-norm clip.
    """

    steps: int = 3000
    batch_size: int = 512
    lr: float = 1e-3
    grad_clip: float = 1.0


def model_device_dtype(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    """Device and floating dtype of a model's first parameter or buffer (CPU / float32 if it has none)."""
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point():
            return tensor.device, tensor.dtype
    return torch.device("cpu"), torch.get_default_dtype()


def randn(shape, gen: torch.Generator | None, device, dtype) -> torch.Tensor:
    """N(0, I) noise drawn on ``gen``'s device (CPU by default, so a seed gives the same draws on every
    accelerator) and moved to ``device`` / ``dtype``."""
    gdev = gen.device if gen is not None else device
    return torch.randn(shape, generator=gen, device=gdev, dtype=dtype).to(device)


def rand(shape, gen: torch.Generator | None, device, dtype) -> torch.Tensor:
    """U[0, 1) draws, same device handling as :func:`randn`."""
    gdev = gen.device if gen is not None else device
    return torch.rand(shape, generator=gen, device=gdev, dtype=dtype).to(device)


def flow_matching_loss(model: nn.Module, x1: torch.Tensor, gen: torch.Generator | None = None) -> torch.Tensor:
    """L_FM = E || v(x_t, t) - (x_1 - x_0) ||^2 with x_t = t x_1 + (1 - t) x_0, t ~ U[0, 1]."""
    x0 = randn(x1.shape, gen, x1.device, x1.dtype)
    t = rand(x1.shape[0], gen, x1.device, x1.dtype)
    xt = t[:, None] * x1 + (1 - t[:, None]) * x0
    return ((model(xt, t) - (x1 - x0)) ** 2).sum(-1).mean()


def pretrain_flow_matching(
    model: nn.Module, data: torch.Tensor, cfg: FMConfig = FMConfig(), seed: int = 0, progress=None, log=None
) -> list[float]:
    """Fit ``model`` to ``data`` (N, d) with flow matching; returns the loss curve.

    ``data`` is moved to the model's device and dtype. ``log(step, loss=...)`` is called every 50 steps.
    """
    if data.ndim != 2 or data.shape[0] < 2:
        raise ValueError(f"data must be (N, d) with N >= 2, got {tuple(data.shape)}")
    device, dtype = model_device_dtype(model)
    data = data.to(device=device, dtype=dtype)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(cfg.steps, 1))
    losses = []
    steps = range(cfg.steps) if progress is None else progress(range(cfg.steps), desc="FM pre-training")
    for step in steps:
        idx = torch.randint(0, data.shape[0], (cfg.batch_size,), generator=gen, device=gen.device).to(device)
        loss = flow_matching_loss(model, data[idx], gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if log is not None and (step % 50 == 0 or step == cfg.steps - 1):
            log(step, loss=losses[-1])
    if not all(math.isfinite(v) for v in losses):
        raise FloatingPointError("flow matching loss became non-finite")
    return losses


# ------------------------------------------------------------------------------------------------
# Samplers
# ------------------------------------------------------------------------------------------------


@torch.no_grad()
def sample_ode(
    model: nn.Module,
    n: int,
    dim: int,
    steps: int = 50,
    gen: torch.Generator | None = None,
    x0: torch.Tensor | None = None,
) -> torch.Tensor:
    """Euler integration of dX = v(X, t) dt from X_0 ~ N(0, I) to t = 1 (on the model's device / dtype)."""
    device, dtype = model_device_dtype(model)
    x = randn((n, dim), gen, device, dtype) if x0 is None else x0.clone().to(device=device, dtype=dtype)
    h = 1.0 / steps
    for i in range(steps):
        t = torch.full((x.shape[0],), i * h, device=device, dtype=dtype)
        x = x + h * model(x, t)
    return x


def memoryless_drift(model: nn.Module, x: torch.Tensor, t: torch.Tensor, h: float) -> torch.Tensor:
    """b(x, t) = 2 v(x, t) - k_t x with k_t = 1 / (t + h) (offset avoids the t = 0 singularity)."""
    return 2.0 * model(x, t) - k_t(t, h).reshape(-1, 1) * x


@torch.no_grad()
def sample_memoryless(
    model: nn.Module, n: int, dim: int, steps: int = 50, gen: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Euler-Maruyama on the memoryless SDE; returns (trajectory (steps+1, n, dim), times (steps+1,))."""
    device, dtype = model_device_dtype(model)
    h = 1.0 / steps
    x = randn((n, dim), gen, device, dtype)
    traj = [x]
    for i in range(steps):
        t = torch.full((n,), i * h, device=device, dtype=dtype)
        noise = randn(x.shape, gen, device, dtype)
        x = x + h * memoryless_drift(model, x, t, h) + math.sqrt(h) * sigma_t(t, h).reshape(-1, 1) * noise
        traj.append(x)
    return torch.stack(traj), torch.linspace(0.0, 1.0, steps + 1, device=device, dtype=dtype)
