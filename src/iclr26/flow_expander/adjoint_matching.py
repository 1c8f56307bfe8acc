"""Adjoint Matching (Domingo-Enrich et al., arXiv 2409.08861): the fine-tuning oracle of FE.

Given a base velocity v_base, a terminal reward r(x) and an optional running reward f_t(x)
(only their x-gradients are needed), Adjoint Matching fits v_fine so that the fine-tuned
process solves

    max_Q  E_Q[ r(X_1) + int_0^1 f_t(X_t) dt ] - KL(Q || Q_base),

i.e. for a terminal-only reward p_1^fine(x) ∝ p_1^base(x) exp(r(x)).

One *dataset* of the oracle (paper Alg. 4, with the signs of the published AM paper):

1. sample m trajectories of v_fine with the memoryless SDE (no gradients);
2. lean adjoint, backwards with the base drift b = 2 v_base - k_t x:
       a_1 = -grad r(X_1)
       a_{t-h} = a_t + h [d b(X_t, t) / dx]^T a_t - h grad f_t(X_t)      (VJP of <a, b>)
3. regress  L = mean_{batch, t} || (2 / sigma_t) (v_fine(X_t, t) - v_base(X_t, t)) + sigma_t a_t ||^2,
   whose optimum is v_fine = v_base - (sigma_t^2 / 2) a_t  (reward *ascent*).

The official code writes the loss with ``- sigma * adj``; as read this is reward descent. We follow
the AM paper; the Gaussian-tilt tests in ``tests/flow_expander`` pin the direction and magnitude.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from .flow import memoryless_drift, model_device_dtype, sample_memoryless, sigma_t

RUNNING_TIMES = ("t", "t+h")
GradFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x, t) -> grad_x of a reward


@dataclass(frozen=True)
class AMConfig:
    """Adjoint Matching oracle settings (paper Alg. 4).

    n_traj (m): trajectories of the memoryless SDE per dataset.
    steps (T): Euler-Maruyama steps on [0, 1] (paper: 40, official code: 50).
    n_datasets (N): fresh datasets (sample + lean adjoint) per oracle call.
    grad_steps: Adam steps per dataset.
    batch_size: (trajectory, time) pairs per Adam step.
    lr: Adam learning rate of v_fine.
    grad_clip: gradient-norm clip.
    adjoint_clip: clamp of |a_t| (numerical safety; inactive in normal runs).
    running_time: time of grad f in the adjoint step t -> t - h: t (exact Euler adjoint) | t+h (official code).
    """

    n_traj: int = 256
    steps: int = 50
    n_datasets: int = 2
    grad_steps: int = 15
    batch_size: int = 1024
    lr: float = 1e-3
    grad_clip: float = 1.0
    adjoint_clip: float = 1e3
    running_time: Literal["t", "t+h"] = "t"

    def __post_init__(self):
        if self.running_time not in RUNNING_TIMES:
            raise ValueError(f"running_time must be one of {RUNNING_TIMES}, got {self.running_time!r}")


def lean_adjoint(
    base: nn.Module,
    traj: torch.Tensor,
    times: torch.Tensor,
    grad_r: GradFn | None,
    grad_f: GradFn | None = None,
    adjoint_clip: float = math.inf,
    running_time: str = "t",
) -> torch.Tensor:
    """Backward lean adjoint a_t along stored states ``traj`` (T+1, B, d); returns (T+1, B, d).

    a_1 = -grad r(X_1);  a_{t_i} = a_{t_{i+1}} + h J_b(X_{t_i}, t_i)^T a_{t_{i+1}} - h grad f(X_{t_i}, s_i),
    with b = 2 v_base - k_t x. ``running_time="t"``: s_i = t_i (the exact adjoint of the Euler scheme,
    default); ``"t+h"``: s_i = t_i + h (official code, ``LeanAdjointSolverFlow``). All tensors follow
    ``traj``'s device and dtype.
    """
    if running_time not in RUNNING_TIMES:
        raise ValueError(f"running_time must be one of {RUNNING_TIMES}, got {running_time!r}")
    n_steps = traj.shape[0] - 1
    h = float(times[1] - times[0])
    x1 = traj[-1]
    ones = torch.ones(x1.shape[0], device=x1.device, dtype=x1.dtype)
    a = -grad_r(x1, ones) if grad_r is not None else torch.zeros_like(x1)
    adj = [None] * (n_steps + 1)
    adj[-1] = a.detach()
    shift = h if running_time == "t+h" else 0.0
    for i in range(n_steps - 1, -1, -1):
        x = traj[i].detach().requires_grad_(True)
        t = ones * float(times[i])
        with torch.enable_grad():
            b = memoryless_drift(base, x, t, h)
            (vjp,) = torch.autograd.grad(b, x, grad_outputs=a)
        a = a + h * vjp
        if grad_f is not None:
            a = a - h * grad_f(traj[i], t + shift)
        a = a.detach().clamp(-adjoint_clip, adjoint_clip)
        adj[i] = a
    return torch.stack(adj)


def adjoint_matching_loss(
    fine: nn.Module, base_v: torch.Tensor, x: torch.Tensor, t: torch.Tensor, adj: torch.Tensor
) -> torch.Tensor:
    """|| (2 / sigma_t) (v_fine - v_base) + sigma_t a_t ||^2, summed over dims, mean over pairs.

    sigma_t is the exact memoryless level sqrt(2 (1 - t) / t) (t > 0). With the offset k_t = 1/(t + h)
    in the sampler, the discrete adjoint's linear part telescopes to exactly t (prod_s s / (s + h)),
    so (sigma_t^2 / 2) a_t matches the continuous target (1 - t) / t * J_t.
    """
    sig = sigma_t(t).reshape(-1, 1)
    res = (2.0 / sig) * (fine(x, t) - base_v) + sig * adj
    return (res**2).sum(-1).mean()


def adjoint_matching(
    fine: nn.Module,
    base: nn.Module,
    grad_r: GradFn | None,
    grad_f: GradFn | None = None,
    cfg: AMConfig = AMConfig(),
    gen: torch.Generator | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    log=None,
) -> list[float]:
    """Fine-tune ``fine`` in place towards the reward-tilted ``base``; returns the loss per Adam step.

    ``base`` is frozen (no gradients reach it). ``grad_r(x, t)`` is the terminal-reward gradient at
    X_1 (t = 1 is passed), ``grad_f(x, t)`` the running-reward gradient; either may be None.
    Everything runs on ``fine``'s device and dtype (``gen`` may stay a CPU generator).
    ``log(step, loss=..., grad_norm=..., adjoint_rms=...)`` is called after every Adam step.
    """
    if cfg.n_traj < 1 or cfg.steps < 2 or cfg.grad_steps < 0 or cfg.batch_size < 1:
        raise ValueError(f"invalid AMConfig {cfg}")
    dim = _infer_dim(fine)
    device, _ = model_device_dtype(fine)
    for p in base.parameters():
        p.requires_grad_(False)
    opt = optimizer or torch.optim.Adam([p for p in fine.parameters() if p.requires_grad], lr=cfg.lr)
    losses: list[float] = []
    for _ in range(cfg.n_datasets):
        traj, times = sample_memoryless(fine, cfg.n_traj, dim, cfg.steps, gen)
        adj = lean_adjoint(base, traj, times, grad_r, grad_f, cfg.adjoint_clip, cfg.running_time)
        # dataset of (X_t, t, a_t, v_base(X_t, t)) for grid times h, ..., 1 - h (t = 0 has sigma = inf)
        xs = traj[1:-1].reshape(-1, dim)
        ts = times[1:-1].repeat_interleave(cfg.n_traj)
        adjs = adj[1:-1].reshape(-1, dim)
        adj_rms = float(adjs.pow(2).sum(-1).mean().sqrt()) if log is not None else 0.0
        with torch.no_grad():
            vb = base(xs, ts)
        for _ in range(cfg.grad_steps):
            idx = torch.randint(
                0,
                xs.shape[0],
                (min(cfg.batch_size, xs.shape[0]),),
                generator=gen,
                device=gen.device if gen is not None else device,
            ).to(device)
            loss = adjoint_matching_loss(fine, vb[idx], xs[idx], ts[idx], adjs[idx])
            if not torch.isfinite(loss):
                raise FloatingPointError("adjoint matching loss is not finite")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = nn.utils.clip_grad_norm_(fine.parameters(), cfg.grad_clip)
            opt.step()
            losses.append(float(loss.detach()))
            if log is not None:
                log(len(losses) - 1, loss=losses[-1], grad_norm=float(gnorm), adjoint_rms=adj_rms)
    return losses


def _infer_dim(model: nn.Module) -> int:
    dim = getattr(model, "dim", None)
    if dim is None:
        inner = getattr(model, "model", None)
        dim = getattr(inner, "dim", None)
    if dim is None:
        raise ValueError("the velocity model needs a `dim` attribute (data dimension)")
    return int(dim)
