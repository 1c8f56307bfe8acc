"""Exact finite-state Flow Expander (terminal-only, exact MD steps): a numpy reference for tests.

On a finite space with densities p (vectors summing to 1), one FE iteration with reparametrised
step gamma~ and anchor weight beta is (Prop. 1 with exact steps, terminal-only):

    expand:   p~ ∝ p_{k-1}^{1 - gamma~} * p_pre^{gamma~ beta}      (MD step on H - alpha KL(.||p_pre))
    project:  p_k ∝ p~ * v^eta                                      (hard v: restrict and renormalise)

G-FE (beta = 0) converges to U(Omega_v); L-FE to p_pre^beta restricted to Omega_v; with a soft v the
fixed point is p ∝ p_pre^beta v^(eta / gamma~).
"""

from __future__ import annotations

import numpy as np


def _normalise(logp: np.ndarray) -> np.ndarray:
    finite = np.isfinite(logp)
    if not finite.any():
        raise ValueError("all states have zero mass (the verifier rejects the whole support)")
    out = np.zeros_like(logp, dtype=float)
    z = logp[finite] - logp[finite].max()
    out[finite] = np.exp(z) / np.exp(z).sum()
    return out


def discrete_expand(p: np.ndarray, p_pre: np.ndarray, gamma: float, beta: float) -> np.ndarray:
    """p~ ∝ p^{1-gamma} p_pre^{gamma beta} (on the support of p)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = (1 - gamma) * np.log(p) + gamma * beta * np.log(p_pre)
    logp[p <= 0] = -np.inf
    return _normalise(logp)


def discrete_project(p: np.ndarray, v: np.ndarray, eta: float | None) -> np.ndarray:
    """p ∝ p~ v^eta; ``eta=None`` means a hard verifier: restrict to {v > 0} and renormalise."""
    with np.errstate(divide="ignore"):
        logp = np.log(p)
        logv = np.log(np.asarray(v, dtype=float))
    if eta is None:
        logp = np.where(logv > -np.inf, logp, -np.inf)
    else:
        logp = logp + eta * logv
    return _normalise(logp)


def discrete_flow_expansion(
    p_pre: np.ndarray, v: np.ndarray, gamma: float, beta: float, eta: float | None, K: int
) -> list[np.ndarray]:
    """All iterates [p_0 = p_pre, p_1, ..., p_K] of exact FE (``eta=0`` gives NSE, ``gamma=0`` CONSTR)."""
    p_pre = np.asarray(p_pre, dtype=float)
    if p_pre.ndim != 1 or (p_pre < 0).any() or not np.isclose(p_pre.sum(), 1.0):
        raise ValueError("p_pre must be a probability vector")
    ps = [p_pre]
    p = p_pre
    for _ in range(K):
        p = discrete_expand(p, p_pre, gamma, beta)
        if eta is None or eta > 0:
            p = discrete_project(p, v, eta)
        ps.append(p)
    return ps


def entropy(p: np.ndarray) -> float:
    q = p[p > 0]
    return float(-(q * np.log(q)).sum())
