r"""Mechanism test without training noise: gradient alignment of AT grouping vs trajectory grouping.

A chain MDP with ``N`` agents and ``T`` turns: at node ``(t, i)`` agent ``i`` picks one of ``A`` actions
from a tabular softmax :math:`\pi_{t,i} = \mathrm{softmax}(\theta_{t,i})` and gets the local reward
:math:`r_{t,i} = w_{t,i}\,\mathbb{1}[a = a^*_{t,i}]`; the chain then moves to the next node whatever the
action. The objective and its exact gradient are

.. math::

    J(\theta) = \sum_{t,i} w_{t,i}\,\pi_{t,i}(a^*_{t,i}), \qquad
    \nabla_{\theta_{t,i}} J = w_{t,i}\,\pi_{t,i}(a^*)\,(e_{a^*} - \pi_{t,i}).

Two GRPO estimates from the **same number of samples** ``N*T*K``, each
:math:`\hat g = \frac{1}{NTK}\sum_{\text{samples}} A\,\nabla_\theta \log\pi(a)` with
:math:`\nabla_{\theta_{t,i}}\log\pi_{t,i}(a) = e_a - \pi_{t,i}`:

* **AT-grouped** (tree sampling): ``K`` actions at every node, group ``(t, i)``, advantage from that node's
  own rewards, :math:`A^{(k)} = (r^{(k)}_{t,i} - \bar r_{t,i}) / (\mathrm{std} + \varepsilon)`;
* **trajectory-grouped** (standard GRPO): ``K`` independent trajectories, return
  :math:`R_k = \sum_{t,i} r^{(k)}_{t,i}`, every action of trajectory ``k`` gets
  :math:`A_k = (R_k - \bar R) / (\mathrm{std}(R) + \varepsilon)`.

We report the mean cosine similarity of each estimate to :math:`\nabla J` over trials.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from iclr26.core.grpo import group_advantages


@dataclass(frozen=True)
class ChainMDPConfig:
    """The chain MDP of the mechanism test (a gradient-alignment check of the grouping, not in the paper)."""

    n_agents: int = 2
    """N agents acting in turn order at every turn."""
    n_turns: int = 4
    """T turns."""
    n_actions: int = 4
    """A actions per node; one of them (a*) is rewarded."""
    K: int = 4
    """Samples per node (AT) = trajectories (trajectory grouping): equal sample counts."""
    trials: int = 100
    """Independent draws of (theta, w, a*, samples)."""
    init_scale: float = 1.0
    """theta ~ N(0, init_scale^2)."""


def exact_gradient(theta: np.ndarray, w: np.ndarray, a_star: np.ndarray) -> np.ndarray:
    """nabla J for theta [T, N, A], weights w [T, N], optimal actions a_star [T, N]."""
    pi = _softmax(theta)
    onehot = np.eye(theta.shape[-1])[a_star]
    p_star = np.take_along_axis(pi, a_star[..., None], -1)[..., 0]
    return (w * p_star)[..., None] * (onehot - pi)


def _softmax(theta: np.ndarray) -> np.ndarray:
    z = np.exp(theta - theta.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def _score(pi: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """nabla log pi(a) = e_a - pi for actions [K, T, N] -> [K, T, N, A]."""
    return np.eye(pi.shape[-1])[actions] - pi[None]


def at_estimate(theta, w, a_star, K, rng, eps: float = 1e-6) -> np.ndarray:
    """AT-grouped GRPO gradient estimate from K samples per (turn, agent) node."""
    T, N, A = theta.shape
    pi = _softmax(theta)
    u = rng.random((K, T, N, 1))
    actions = (u > np.cumsum(pi, -1)[None]).sum(-1).clip(max=A - 1)  # [K, T, N]
    r = w[None] * (actions == a_star[None])
    keys = [(t, i) for _k in range(K) for t in range(T) for i in range(N)]
    adv = group_advantages(torch.as_tensor(r.reshape(-1), dtype=torch.float64), keys, "mean_std", eps).numpy()
    adv = adv.reshape(K, T, N)
    return (adv[..., None] * _score(pi, actions)).sum(0) / (K * T * N)


def trajectory_estimate(theta, w, a_star, K, rng, eps: float = 1e-6) -> np.ndarray:
    """Trajectory-grouped GRPO gradient estimate from K independent trajectories (N*T*K samples)."""
    T, N, A = theta.shape
    pi = _softmax(theta)
    u = rng.random((K, T, N, 1))
    actions = (u > np.cumsum(pi, -1)[None]).sum(-1).clip(max=A - 1)
    R = (w[None] * (actions == a_star[None])).sum((1, 2))  # [K]
    adv = group_advantages(torch.as_tensor(R, dtype=torch.float64), [0] * K, "mean_std", eps).numpy()
    return (adv[:, None, None, None] * _score(pi, actions)).sum(0) / (K * T * N)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return 0.0 if na == 0 or nb == 0 else float((a * b).sum() / (na * nb))


def gradient_alignment(cfg: ChainMDPConfig = ChainMDPConfig(), seed: int = 0) -> dict[str, float]:
    """Mean (and std) cosine to the exact gradient of the AT- and trajectory-grouped estimates over trials,
    plus the mean squared error of the unit-normalised estimates (a variance proxy)."""
    rng = np.random.default_rng(seed)
    cos_at, cos_tr, mse_at, mse_tr = [], [], [], []
    T, N, A = cfg.n_turns, cfg.n_agents, cfg.n_actions
    for _ in range(cfg.trials):
        theta = rng.normal(0.0, cfg.init_scale, (T, N, A))
        w = rng.uniform(0.5, 1.5, (T, N))
        a_star = rng.integers(0, A, (T, N))
        g = exact_gradient(theta, w, a_star)
        ga = at_estimate(theta, w, a_star, cfg.K, rng)
        gt = trajectory_estimate(theta, w, a_star, cfg.K, rng)
        cos_at.append(cosine(ga, g))
        cos_tr.append(cosine(gt, g))
        gu = g / np.linalg.norm(g)
        for est, out in ((ga, mse_at), (gt, mse_tr)):
            n = np.linalg.norm(est)
            unit = est / n if n > 0 else est
            out.append(float(((unit - gu) ** 2).sum()))
    return {
        "cos_at": float(np.mean(cos_at)),
        "cos_traj": float(np.mean(cos_tr)),
        "cos_at_std": float(np.std(cos_at)),
        "cos_traj_std": float(np.std(cos_tr)),
        "err_at": float(np.mean(mse_at)),
        "err_traj": float(np.mean(mse_tr)),
        "trials": cfg.trials,
    }
