"""CWG: non-conservative generalized Schrödinger bridges as contact Wasserstein geodesics.

**NCGSB (Sec. 2-3).** The GSB in its deterministic (current-velocity) form minimises the action of the
Lagrangian ``L(ρ, v) = ½‖v‖²_ρ + F(ρ) + B(ρ)`` with ``F(ρ) = ∫Uρ`` (state cost) and
``B(ρ) = σ⁴/8 ∫|∇log ρ|²ρ`` (Fisher / Bohm term). NCGSB adds one scalar ``z`` with Herglotz dynamics

    ∂_t z^t = L(ρ^t, v^t) − γ z^t,        minimise z^1,

the variational form of contact Hamiltonian mechanics: γ > 0 dissipates energy, γ < 0 injects it, γ = 0
is the conservative GSB. With z⁰ = 0 the linear ODE integrates to

    z^1 = ∫_0^1 e^{−γ(1−t)} L(ρ^t, v^t) dt = e^{−γ} ∫_0^1 e^{γt} L dt,                         (discount)

so NCGSB is the GSB with the Lagrangian reweighted by e^{γt} (our derivation; the library's reading).

**CWG (Sec. 3).** Particles X⁰ ~ ρ_a pass through K residual blocks ``X^k = X^{k−1} + f_{θ^k}(X^{k−1})``;
the cloud after block k is the marginal at ``t_k = k/K``, so one forward pass gives the discrete geodesic.
Loss (paper, "training loss"):

    ℓ = W2²(ρ^{t_K}, ρ_b) + Σ_m W2²(ρ^{t_{k_m}}, ρ_m) + Σ_k Φ^{t_k} W2²(ρ^{t_k}, ρ^{t_{k−1}}).

Two readings of the geodesic term are kept (``mode``):

* ``"action"`` (default): the exact discretisation of (discount),
  ``ℓ_geo = Σ_k e^{γt_k} [W_k/(2h) + h(F̂_k + B̂_k)]``, h = 1/K, ``W_k = W2²(ρ^{t_k}, ρ^{t_{k−1}})``.
  Its discrete Euler-Lagrange equation (U = 0) is ``ΔX_{k+1} = e^{−γh} ΔX_k``: damped particles.
* ``"jacobi"`` (printed form): ``ℓ_geo = Σ_k Φ^{t_k} W_k`` with ``Φ^{t_k} = e^{γt_k}(E₀ + F̂_k + B̂_k)``,
  E₀ an energy level. With U = B = 0 it equals ``2hE₀`` times the action form (same minimiser).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from iclr26.ncgsb.config import CWGConfig, FitConfig
from iclr26.ncgsb.ot import induced_step_cost, sinkhorn_divergence

Potential = Callable[[torch.Tensor], torch.Tensor]
Sampler = Callable[[int, torch.Generator], torch.Tensor]


# --------------------------------------------------------------------------------------------------
# Herglotz / contact action on a time grid
# --------------------------------------------------------------------------------------------------


def block_times(n_blocks: int) -> torch.Tensor:
    """``t_k = k/K`` for k = 0..K."""
    return torch.arange(n_blocks + 1, dtype=torch.float64) / n_blocks


def discount_weights(gamma: float, n_blocks: int) -> torch.Tensor:
    """``e^{γ t_k}`` for the steps k = 1..K (each step weighted at its end time)."""
    return torch.exp(gamma * block_times(n_blocks)[1:])


def herglotz_exact(lagrangians: torch.Tensor, gamma: float, h: float) -> torch.Tensor:
    """z^K of ``ż = L − γz`` (z⁰ = 0) with L constant on each step, exact exponential integrator:

    ``z_k = e^{−γh} z_{k−1} + (1 − e^{−γh})/γ · L_k``   ((1 − e^{−γh})/γ → h at γ = 0).
    """
    decay = math.exp(-gamma * h)
    gain = (1.0 - decay) / gamma if gamma != 0 else h
    z = torch.zeros((), dtype=lagrangians.dtype)
    for lag in lagrangians:
        z = decay * z + gain * lag
    return z


def herglotz_euler(lagrangians: torch.Tensor, gamma: float, h: float) -> torch.Tensor:
    """z^K of ``ż = L − γz`` by explicit Euler, ``z_k = z_{k−1} + h(L_k − γ z_{k−1})`` (O(h) accurate)."""
    z = torch.zeros((), dtype=lagrangians.dtype)
    for lag in lagrangians:
        z = z + h * (lag - gamma * z)
    return z


def discounted_action(lagrangians: torch.Tensor, gamma: float, h: float) -> torch.Tensor:
    """``h Σ_k e^{γ t_k} L_k`` (t_k = k h): the action that ``mode="action"`` minimises.

    Equals ``herglotz_exact(L)`` up to the constant ``γh e^{γ}/(1 − e^{−γh})`` (→ e^{γ}·... → 1 at γ = 0),
    so both have the same minimiser.
    """
    t = torch.arange(1, len(lagrangians) + 1, dtype=lagrangians.dtype) * h
    return h * (torch.exp(gamma * t) * lagrangians).sum()


# --------------------------------------------------------------------------------------------------
# State costs F̂ and B̂, step costs W_k
# --------------------------------------------------------------------------------------------------


def kde_score(x: torch.Tensor, bandwidth: float | None = None) -> torch.Tensor:
    """Gaussian-KDE score ``ŝ(x_i) = Σ_j w_ij (x_j − x_i)/bw²`` with ``w_ij = softmax_j(−|x_i − x_j|²/(2bw²))``.

    Bandwidth: Silverman's rule ``bw = std·(4/((D+2)N))^{1/(D+4)}`` when not given.
    """
    n, d = x.shape
    if bandwidth is None:
        bandwidth = float(x.detach().std(0).mean()) * (4.0 / ((d + 2) * n)) ** (1.0 / (d + 4)) + 1e-6
    logits = -((x[:, None, :] - x[None, :, :]) ** 2).sum(-1) / (2 * bandwidth**2)
    w = torch.softmax(logits, dim=1)
    return (w @ x - x) / bandwidth**2


def fisher_term(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """``B̂(ρ) = σ⁴/8 · mean_i |ŝ(x_i)|²`` (the Fisher/Bohm term of the current-velocity GSB)."""
    if sigma == 0:
        return torch.zeros((), dtype=x.dtype, device=x.device)
    return sigma**4 / 8.0 * (kde_score(x) ** 2).sum(-1).mean()


def check_potential(potential: Potential | None, dim: int) -> None:
    """Refuse a potential whose output is not one finite value per particle, before any training."""
    if potential is None:
        return
    probe = torch.zeros(3, dim)
    try:
        out = potential(probe)
    except Exception as exc:
        raise ValueError(f"potential: calling it on a (3, {dim}) batch failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (3,):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"potential: must map (N, {dim}) particles to (N,) costs, got {shape} for N = 3")


def state_costs(path: list[torch.Tensor], potential: Potential | None, fisher_sigma: float) -> torch.Tensor:
    """``F̂_k + B̂_k`` for k = 1..K: ``F̂ = mean_i U(X_i^k)``, ``B̂`` from :func:`fisher_term`."""
    out = []
    for x in path[1:]:
        c = fisher_term(x, fisher_sigma)
        if potential is not None:
            c = c + potential(x).mean()
        out.append(c)
    return torch.stack(out)


def step_costs(
    path: list[torch.Tensor], kind: str = "induced", blur: float = 0.05, scaling: float = 0.5
) -> torch.Tensor:
    """``W_k ≈ W2²(ρ^{t_k}, ρ^{t_{k−1}})`` for k = 1..K (induced coupling, or Sinkhorn divergence)."""
    if kind == "induced":
        return torch.stack([induced_step_cost(a, b) for a, b in zip(path[:-1], path[1:])])
    if kind == "sinkhorn":
        return torch.stack([sinkhorn_divergence(b, a, blur, scaling) for a, b in zip(path[:-1], path[1:])])
    raise ValueError(f"step_cost must be 'induced' or 'sinkhorn', got {kind!r}")


def geodesic_loss(
    steps: torch.Tensor, states: torch.Tensor, gamma: float, mode: str = "action", energy_level: float = 1.0
) -> torch.Tensor:
    """The energy-weighted discrete geodesic term from step costs ``W_k`` and state costs ``F̂_k + B̂_k``.

    action:  ``Σ_k e^{γt_k} [W_k/(2h) + h (F̂_k + B̂_k)]``
    jacobi:  ``Σ_k e^{γt_k} (E₀ + F̂_k + B̂_k) W_k``
    """
    n_blocks = steps.shape[0]
    h = 1.0 / n_blocks
    w = discount_weights(gamma, n_blocks).to(steps.dtype).to(steps.device)
    if mode == "action":
        return (w * (steps / (2 * h) + h * states)).sum()
    if mode == "jacobi":
        return (w * (energy_level + states) * steps).sum()
    raise ValueError(f"mode must be 'action' or 'jacobi', got {mode!r}")


def conservative_geodesic_loss(
    steps: torch.Tensor, states: torch.Tensor, mode: str = "action", energy_level: float = 1.0
) -> torch.Tensor:
    """The conservative GSB's geodesic term (no contact weights): the γ = 0 reference."""
    h = 1.0 / steps.shape[0]
    if mode == "action":
        return (steps / (2 * h) + h * states).sum()
    return ((energy_level + states) * steps).sum()


def discrete_geodesic(
    gamma: float, n_blocks: int, x0: torch.Tensor, x1: torch.Tensor, mode: str = "action", energy_level: float = 1.0
) -> torch.Tensor:
    """Exact minimiser (one Newton step on the quadratic ℓ_geo, U = 0) of a single particle's path with
    fixed ends; returns (K+1, D) positions. Its steps satisfy ``ΔX_{k+1} = e^{−γh} ΔX_k``."""
    d = x0.shape[-1]
    x0, x1 = x0.to(torch.float64), x1.to(torch.float64)

    def loss(interior: torch.Tensor) -> torch.Tensor:
        pts = [x0[None]] + list(interior.view(n_blocks - 1, 1, d)) + [x1[None]]
        steps = step_costs(pts, "induced")
        return geodesic_loss(steps, torch.zeros_like(steps), gamma, mode, energy_level)

    z = torch.zeros((n_blocks - 1) * d, dtype=torch.float64)
    grad = torch.autograd.functional.jacobian(loss, z)
    hess = torch.autograd.functional.hessian(loss, z)
    z = z - torch.linalg.solve(hess, grad)
    return torch.cat([x0[None], z.view(n_blocks - 1, d), x1[None]])


# --------------------------------------------------------------------------------------------------
# The bridge
# --------------------------------------------------------------------------------------------------


def as_sampler(data, name: str = "data") -> Sampler:
    """A sampler ``(n, generator) -> (n, D)`` from a callable, or from a fixed (M, D) array (rows drawn
    with replacement when n > M, without otherwise)."""
    if callable(data):
        return data
    arr = torch.as_tensor(np.asarray(data), dtype=torch.float32)
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ValueError(f"{name}: expected an (M, D) array, got shape {tuple(arr.shape)}")
    if not torch.isfinite(arr).all():
        raise ValueError(f"{name}: contains NaN or inf")

    def sample(n: int, gen: torch.Generator) -> torch.Tensor:
        if n <= arr.shape[0]:
            return arr[torch.randperm(arr.shape[0], generator=gen)[:n]]
        return arr[torch.randint(arr.shape[0], (n,), generator=gen)]

    sample.data = arr  # type: ignore[attr-defined]
    return sample


@dataclass
class FitHistory:
    """Per-step training log of one fit."""

    loss: list[float] = field(default_factory=list)
    marginal: list[float] = field(default_factory=list)
    geodesic: list[float] = field(default_factory=list)


def _block(dim: int, hidden: int) -> nn.Sequential:
    """``f_θ: D → hidden → hidden → D`` (SiLU) with a zero-initialised head, so the block starts at the identity."""
    net = nn.Sequential(nn.Linear(dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, dim))
    nn.init.zeros_(net[-1].weight)
    nn.init.zeros_(net[-1].bias)
    return net


class CWGBridge(nn.Module):
    """K residual blocks ``X^k = X^{k−1} + f_{θ^k}(X^{k−1})``; the clouds X⁰..X^K are the discrete bridge.

    ``potential`` U maps (N, D) particles to (N,) state costs; ``cfg`` holds γ, the geodesic mode and the
    Sinkhorn settings (see :class:`~iclr26.ncgsb.config.CWGConfig`).
    """

    def __init__(self, dim: int, cfg: CWGConfig | None = None, potential: Potential | None = None):
        super().__init__()
        cfg = cfg or CWGConfig()
        if dim < 1 or cfg.n_blocks < 1:
            raise ValueError(f"dim and n_blocks must be >= 1, got {dim}, {cfg.n_blocks}")
        check_potential(potential, dim)
        self.dim, self.cfg, self.potential = dim, cfg, potential
        self.blocks = nn.ModuleList(_block(dim, cfg.hidden) for _ in range(cfg.n_blocks))

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    def forward(self, x0: torch.Tensor) -> list[torch.Tensor]:
        """[X⁰, X¹, ..., X^K] for source particles X⁰ (N, D)."""
        path = [x0]
        for block in self.blocks:
            path.append(path[-1] + block(path[-1]))
        return path

    @torch.no_grad()
    def path(self, x0: torch.Tensor) -> torch.Tensor:
        """The discrete bridge as one (K+1, N, D) tensor (no gradient)."""
        return torch.stack(self(x0))

    def block_index(self, t: float) -> int:
        """``k_m = round(t·K)`` for a snapshot time t ∈ [0, 1]."""
        if not 0.0 <= float(t) <= 1.0:
            raise ValueError(f"snapshot time {t} is outside [0, 1]")
        return int(round(float(t) * self.n_blocks))

    def geodesic(self, path: list[torch.Tensor]) -> torch.Tensor:
        """``ℓ_geo`` of a path under this bridge's γ, mode, potential and Fisher term."""
        c = self.cfg
        steps = step_costs(path, c.step_cost, c.blur, c.scaling)
        states = state_costs(path, self.potential, c.fisher_sigma)
        return geodesic_loss(steps, states, c.gamma, c.mode, c.energy_level)

    def guidance(
        self,
        path: list[torch.Tensor],
        f: Callable[[torch.Tensor], torch.Tensor],
        y: torch.Tensor,
        block: int,
        lam: float,
    ) -> torch.Tensor:
        """Guided CWG: the metric factor at block s gains ``λ_G‖y − f(x^{t_s})‖²`` (Sec. 3, "Guided CWG");
        as a loss term ``λ_G·mean_i‖y − f(X_i^s)‖²`` times h (action) or the step cost W_s (jacobi)."""
        if not 1 <= block <= self.n_blocks:
            raise ValueError(f"guidance block must be in 1..{self.n_blocks}, got {block}")
        err = ((y.to(path[block]) - f(path[block])) ** 2).sum(-1).mean()
        if self.cfg.mode == "action":
            return lam * err / self.n_blocks
        return lam * err * induced_step_cost(path[block - 1], path[block])

    def loss(
        self, x0: torch.Tensor, targets: Mapping[int, torch.Tensor], lam_mult: float = 1.0, guide: tuple | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``ℓ = Σ_{k ∈ targets} S_ε(ρ^{t_k}, ρ_k) + λ_geo·mult·ℓ_geo (+ guidance)``; the terminal ρ_b is
        ``targets[K]``. The target self-term of S_ε is a constant and is dropped in training."""
        path = self(x0)
        c = self.cfg
        marg = sum(sinkhorn_divergence(path[k], y, c.blur, c.scaling, target_term=False) for k, y in targets.items())
        geo = self.geodesic(path)
        total = marg + c.lambda_geo * lam_mult * geo
        if guide is not None:
            total = total + self.guidance(path, *guide)
        return total, {"marginal": float(marg.detach()), "geodesic": float(geo.detach())}

    def fit(
        self,
        source,
        target,
        snapshots: Mapping[float, object] | None = None,
        fit: FitConfig | None = None,
        seed: int = 0,
        log: Callable[..., None] | None = None,
        guide: tuple | None = None,
        steps: int | None = None,
        lr: float | None = None,
        device: str | None = None,
    ) -> FitHistory:
        """Train all blocks: fresh N source particles and data batches each step, Adam + cosine decay,
        gradient clipping, and the two-stage λ_geo ramp (``ramp_start → 1`` over ``ramp_frac`` of the steps).
        Samplers draw on the CPU; batches move to ``device`` (default: where the blocks are)."""
        fit = fit or FitConfig()
        targets = self._target_samplers(target, snapshots)
        src = as_sampler(source, "source")
        steps = fit.steps if steps is None else steps
        gen = torch.Generator().manual_seed(seed)
        opt = torch.optim.Adam(self.parameters(), lr=fit.lr if lr is None else lr)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / max(1, steps))))
        ramp = max(1, int(fit.ramp_frac * steps)) if guide is None else 1
        hist = FitHistory()
        device = device or next(self.parameters()).device
        for step in range(steps):
            mult = geo_ramp(step, ramp, fit.ramp_start) if guide is None else 1.0
            x0 = src(fit.n_particles, gen).to(device)
            batch = {k: s(fit.n_particles, gen).to(device) for k, s in targets.items()}
            loss, parts = self.loss(x0, batch, mult, guide)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"CWG loss became {float(loss)} at step {step}")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(self.parameters(), fit.grad_clip)
            opt.step()
            sched.step()
            hist.loss.append(float(loss.detach()))
            hist.marginal.append(parts["marginal"])
            hist.geodesic.append(parts["geodesic"])
            if log is not None and (step % 20 == 0 or step == steps - 1):
                log(step, loss=float(loss.detach()), **parts)
        return hist

    def finetune_guided(
        self,
        f: Callable[[torch.Tensor], torch.Tensor],
        y,
        t_s: float,
        lam: float,
        source,
        target,
        snapshots: Mapping[float, object] | None = None,
        fit: FitConfig | None = None,
        seed: int = 0,
        log: Callable[..., None] | None = None,
    ) -> FitHistory:
        """Second stage of guided CWG: fine-tune all blocks on the full loss plus the guidance term at
        block ``s = round(t_s K)`` (the bridge is first trained unguided with :meth:`fit`)."""
        fit = fit or FitConfig()
        block = self.block_index(t_s)
        y = torch.as_tensor(np.asarray(y), dtype=torch.float32)
        return self.fit(
            source,
            target,
            snapshots,
            fit,
            seed=seed,
            log=log,
            guide=(f, y, block, lam),
            steps=fit.guide_steps,
            lr=fit.guide_lr,
        )

    def _target_samplers(self, target, snapshots: Mapping[float, object] | None) -> dict[int, Sampler]:
        targets: dict[int, Sampler] = {self.n_blocks: as_sampler(target, "target")}
        for t, data in (snapshots or {}).items():
            k = self.block_index(t)
            if k == 0:
                raise ValueError(f"snapshot at t = {t} falls on block 0 (the source); drop it or use more blocks")
            if k in targets:
                raise ValueError(f"snapshot at t = {t} falls on block {k}, which already has a target")
            targets[k] = as_sampler(data, f"snapshot t={t}")
        return targets


def geo_ramp(step: int, ramp_steps: int, start: float) -> float:
    """Two-stage schedule: the λ_geo multiplier rises linearly from ``start`` to 1 over ``ramp_steps``, then stays 1."""
    return start + (1.0 - start) * min(1.0, step / max(1, ramp_steps))


def kinetic_per_block(path: torch.Tensor) -> np.ndarray:
    """Per-step kinetic energy ``mean_i |ΔX_i^k|²/h²`` for k = 1..K from a (K+1, N, D) path."""
    n_blocks = path.shape[0] - 1
    d = path[1:] - path[:-1]
    return ((d**2).sum(-1).mean(-1) * n_blocks**2).cpu().numpy()


def displacement_fraction(path: torch.Tensor) -> np.ndarray:
    """Mean displacement at each block as a share of the total: ``⟨X^k − X⁰⟩·⟨X^K − X⁰⟩ / |⟨X^K − X⁰⟩|²``."""
    mean = path.mean(1)
    disp = mean - mean[0]
    total = disp[-1]
    return (disp @ total / (total @ total)).cpu().numpy()


def phi_gamma(gamma: float, t) -> np.ndarray:
    """Closed-form share of the displacement at time t (U = B = 0): ``(1 − e^{−γt})/(1 − e^{−γ})``, t at γ = 0."""
    t = np.asarray(t, dtype=np.float64)
    if gamma == 0:
        return t
    return (1 - np.exp(-gamma * t)) / (1 - np.exp(-gamma))
