"""Verifiers v: X -> {0, 1} and their smoothed versions v_s: X -> (0, 1].

A *strong* verifier has Omega_v = Omega (v = 1 iff valid); a *weak* verifier only filters:
Omega_v ⊇ Omega (v(x) = 0 implies x invalid). Weak verifiers can be intersected (pointwise AND).

The project step of FE uses the terminal reward eta * log v_s(x); only its gradient is needed:
``grad_log_soft``. Any object with ``hard(x) -> (B,) bool`` and ``soft(x) -> (B,) in (0, 1]`` (torch,
differentiable) plugs in; :class:`CallableVerifier` wraps two plain callables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F


class Verifier:
    """Base class: override ``hard`` and ``log_soft`` (or ``soft``)."""

    def hard(self, x: torch.Tensor) -> torch.Tensor:  # (B, d) -> (B,) bool
        raise NotImplementedError

    def soft(self, x: torch.Tensor) -> torch.Tensor:  # (B, d) -> (B,) in (0, 1]
        return self.log_soft(x).exp()

    def log_soft(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(self.soft(x).clamp_min(1e-30))

    def grad_log_soft(self, x: torch.Tensor) -> torch.Tensor:
        """grad_x log v_s(x), row-wise (the project step's terminal-reward gradient, up to eta)."""
        with torch.enable_grad():
            xr = x.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(self.log_soft(xr).sum(), xr)
        return g

    def grad_soft(self, x: torch.Tensor) -> torch.Tensor:
        """grad_x v_s(x) (the official code's project gradient, flag ``projection_grad='soft'``)."""
        with torch.enable_grad():
            xr = x.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(self.soft(xr).sum(), xr)
        return g


class EllipseVerifier(Verifier):
    """Strong verifier of the ellipse Omega = {q(x) = ((x - c)_1 / a)^2 + ((x - c)_2 / b)^2 <= 1}.

    hard v = 1[q <= 1];  soft v_s = sigmoid(kappa (1 - q)).
    """

    def __init__(self, a: float = 3.0, b: float = 1.5, center=(0.0, 0.0), kappa: float = 15.0):
        if a <= 0 or b <= 0 or kappa <= 0:
            raise ValueError("ellipse axes and kappa must be > 0")
        self.a, self.b, self.kappa = float(a), float(b), float(kappa)
        self.center = tuple(float(c) for c in center)

    def q(self, x: torch.Tensor) -> torch.Tensor:
        z = x - torch.as_tensor(self.center, device=x.device, dtype=x.dtype)
        return (z[:, 0] / self.a) ** 2 + (z[:, 1] / self.b) ** 2

    def hard(self, x):
        return self.q(x) <= 1.0

    def log_soft(self, x):
        return F.logsigmoid(self.kappa * (1.0 - self.q(x)))


class DiscRejectionVerifier(Verifier):
    """Weak verifier that rejects the open disc ||x - c|| < r (only the first two coordinates).

    hard v = 1[||x - c|| >= r];  soft v_s = sigmoid(kappa (||x - c|| - r)).
    """

    def __init__(self, center=(-2.0, 0.0), radius: float = 0.8, kappa: float = 10.0):
        if radius <= 0 or kappa <= 0:
            raise ValueError("radius and kappa must be > 0")
        self.center = tuple(float(c) for c in center)
        self.radius, self.kappa = float(radius), float(kappa)

    def dist(self, x):
        c = torch.as_tensor(self.center, device=x.device, dtype=x.dtype)
        return torch.sqrt(((x[:, :2] - c) ** 2).sum(-1) + 1e-12)

    def hard(self, x):
        return self.dist(x) >= self.radius

    def log_soft(self, x):
        return F.logsigmoid(self.kappa * (self.dist(x) - self.radius))


class HalfPlaneVerifier(Verifier):
    """v = 1[x_j > c] (used as the *true* validity of task T2: Omega = {x_1 > -1.2})."""

    def __init__(self, threshold: float = -1.2, coord: int = 0, kappa: float = 10.0):
        self.threshold, self.coord, self.kappa = float(threshold), int(coord), float(kappa)

    def hard(self, x):
        return x[:, self.coord] > self.threshold

    def log_soft(self, x):
        return F.logsigmoid(self.kappa * (x[:, self.coord] - self.threshold))


class ConstantVerifier(Verifier):
    """v = 1 everywhere (grad log v_s = 0): makes FE's projection a no-op."""

    def hard(self, x):
        return torch.ones(x.shape[0], dtype=torch.bool, device=x.device)

    def log_soft(self, x):
        return 0.0 * x.sum(-1)


class IntersectionVerifier(Verifier):
    """Intersection of weak verifiers: hard = pointwise AND, soft = product (log-soft = sum)."""

    def __init__(self, verifiers: Sequence[Verifier]):
        if not verifiers:
            raise ValueError("need at least one verifier")
        self.verifiers = list(verifiers)

    def hard(self, x):
        out = self.verifiers[0].hard(x).bool()
        for v in self.verifiers[1:]:
            out = out & v.hard(x).bool()
        return out

    def log_soft(self, x):
        return sum(v.log_soft(x) for v in self.verifiers)


class CallableVerifier(Verifier):
    """Wrap plain callables: ``hard_fn(x) -> (B,)`` and optional differentiable ``soft_fn(x) -> (B,)``."""

    def __init__(
        self,
        hard_fn: Callable[[torch.Tensor], torch.Tensor],
        soft_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ):
        self.hard_fn, self.soft_fn = hard_fn, soft_fn

    def hard(self, x):
        out = torch.as_tensor(self.hard_fn(x), device=x.device)
        if out.shape != (x.shape[0],):
            raise ValueError(f"hard verifier must return shape ({x.shape[0]},), got {tuple(out.shape)}")
        return out.bool()

    def soft(self, x):
        if self.soft_fn is None:
            raise ValueError("this verifier has no differentiable soft version; FE's AM projection needs one")
        return self.soft_fn(x)


class MinDistanceVerifier(Verifier):
    """Weak conformer verifier: reject if any interatomic distance is below ``threshold`` (Angstrom).

    x is (B, 3 N) flattened coordinates. soft (paper Eq. 55): v_s = mean_{i<j} sigmoid(slope (d_ij - thr)).
    """

    def __init__(self, n_atoms: int, threshold: float = 0.9, slope: float = 1.0):
        if n_atoms < 2:
            raise ValueError("need at least 2 atoms")
        self.n_atoms, self.threshold, self.slope = int(n_atoms), float(threshold), float(slope)

    def distances(self, x: torch.Tensor) -> torch.Tensor:
        pos = x.reshape(x.shape[0], self.n_atoms, 3)
        iu = torch.triu_indices(self.n_atoms, self.n_atoms, 1, device=x.device)
        diff = pos[:, iu[0]] - pos[:, iu[1]]
        return torch.sqrt((diff**2).sum(-1) + 1e-12)

    def hard(self, x):
        return self.distances(x).min(-1).values >= self.threshold

    def soft(self, x):
        return torch.sigmoid(self.slope * (self.distances(x) - self.threshold)).mean(-1)
