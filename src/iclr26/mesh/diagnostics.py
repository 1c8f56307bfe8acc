"""The paper's three loop diagnostics (Section 2 / 4.1), on hidden-state matrices ``h in R^{T x D}``.

* Relative update magnitude of a block f (skewed computation)::

      u(f, h) = 2 ||f(h) - h||_F / (||f(h)||_F + ||h||_F)        in [0, 2]

* CKA between loop states (representational stagnation), RBF kernel (Kornblith et al. 2019)::

      K_ij = exp(-||x_i - x_j||^2 / (2 sigma^2)),  sigma = frac * median_{i != j} ||x_i - x_j||
      CKA(K, L) = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)),  HSIC(K, L) = tr(K H L H),  H = I - 11^T / n

  and linear CKA ``||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)`` on centred X, Y.

* Spectrum (loop representational collapse): normalized singular values ``sigma_i / sigma_0`` and the
  effective rank ``exp(H(p))``, ``p_i = sigma_i / sum_j sigma_j`` (Roy & Vetterli 2007).

Every function takes one matrix (T, D) or a batch (N, T, D) and averages over the N samples.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def _batched(x: Tensor) -> Tensor:
    if x.dim() == 2:
        return x.unsqueeze(0)
    if x.dim() != 3:
        raise ValueError(f"expected (T, D) or (N, T, D), got shape {tuple(x.shape)}")
    return x


def relative_update(h_in: Tensor, h_out: Tensor) -> float:
    """``2 ||f(h) - h||_F / (||f(h)||_F + ||h||_F)``, mean over samples. 0 for identity, 2 for f(h) = -h."""
    a, b = _batched(h_in).double(), _batched(h_out).double()
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch {tuple(a.shape)} vs {tuple(b.shape)}")
    num = 2 * torch.linalg.matrix_norm(b - a)
    den = torch.linalg.matrix_norm(b) + torch.linalg.matrix_norm(a)
    return float((num / den.clamp_min(1e-30)).mean())


def _center_gram(k: Tensor) -> Tensor:
    n = k.shape[-1]
    h = torch.eye(n, dtype=k.dtype, device=k.device) - 1.0 / n
    return h @ k @ h


def _rbf_gram(x: Tensor, sigma_frac: float) -> Tensor:
    d2 = torch.cdist(x, x).pow(2)
    n = x.shape[0]
    off = d2[~torch.eye(n, dtype=torch.bool, device=x.device)]
    med = off.sqrt().median() if off.numel() else torch.tensor(1.0, dtype=x.dtype)
    sigma = sigma_frac * med.clamp_min(1e-12)
    return torch.exp(-d2 / (2 * sigma**2))


def _cka_from_grams(k: Tensor, l: Tensor) -> float:
    kc, lc = _center_gram(k), _center_gram(l)
    hsic_kl = (kc * lc).sum()
    denom = torch.sqrt((kc * kc).sum() * (lc * lc).sum()).clamp_min(1e-30)
    return float(hsic_kl / denom)


def cka_rbf(x: Tensor, y: Tensor, sigma_frac: float = 1.0) -> float:
    """RBF-kernel CKA between (T, D) state matrices (rows = tokens), mean over samples."""
    xs, ys = _batched(x).double(), _batched(y).double()
    vals = [_cka_from_grams(_rbf_gram(a, sigma_frac), _rbf_gram(b, sigma_frac)) for a, b in zip(xs, ys)]
    return float(sum(vals) / len(vals))


def cka_linear(x: Tensor, y: Tensor) -> float:
    """Linear CKA between (T, D) matrices, mean over samples; invariant to orthogonal maps and scaling."""
    xs, ys = _batched(x).double(), _batched(y).double()
    vals = []
    for a, b in zip(xs, ys):
        a, b = a - a.mean(0), b - b.mean(0)
        num = torch.linalg.matrix_norm(b.T @ a) ** 2
        den = torch.linalg.matrix_norm(a.T @ a) * torch.linalg.matrix_norm(b.T @ b)
        vals.append(float(num / den.clamp_min(1e-30)))
    return float(sum(vals) / len(vals))


def normalized_singular_values(x: Tensor, k: int = 50) -> Tensor:
    """Top-k ``sigma_i / sigma_0`` of each (T, D) matrix, mean over samples; starts at 1, non-increasing."""
    s = torch.linalg.svdvals(_batched(x).double())
    s = s / s[:, :1].clamp_min(1e-30)
    return s[:, :k].mean(0).float()


def effective_rank(x: Tensor) -> float:
    """``exp(-sum p_i log p_i)`` with ``p = sigma / sum(sigma)`` per (T, D) matrix, mean over samples."""
    s = torch.linalg.svdvals(_batched(x).double())
    p = s / s.sum(-1, keepdim=True).clamp_min(1e-30)
    ent = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
    return float(torch.exp(ent).mean())


@torch.no_grad()
def loop_diagnostics(
    model: torch.nn.Module, tokens: Tensor, sigma_frac: float = 1.0, top_k: int = 50
) -> dict[str, Any]:
    """All diagnostics of a recursive model on a batch of token ids (N, T).

    Returns ``update_prelude``, ``update_loops`` (per core application, ``u(f_core, h^(t))``),
    ``update_coda``, ``update_balance`` (max/min of ``update_loops``; 1 = perfectly balanced),
    ``state_update_loops`` (``u`` of the whole step ``h^(t) -> h^(t+1)``), ``cka_consecutive``
    (RBF CKA(h^(t), h^(t+1)), t = 0..K-1), ``cka_consecutive_mean``, ``cka_linear_consecutive``,
    ``effective_rank`` per state [h_emb, h^(0..K), h_coda], ``singular_values`` (same states, top_k each),
    and for mesh the mean router weights per step and slot (``router_write``, ``router_read``).
    """
    was_training = model.training
    model.eval()
    _, tr = model(tokens, return_trace=True)
    if was_training:
        model.train()
    states, core_out = tr.get("states"), tr.get("core_out")
    if not states:
        raise ValueError("loop diagnostics need a recursive layout (P+CRK+S)")
    ups = [relative_update(h, hm) for h, hm in zip(states[:-1], core_out)]
    named = [("h_emb", tr["h_emb"])] + [(f"h{t}", s) for t, s in enumerate(states)] + [("h_coda", tr["h_coda"])]
    out: dict[str, Any] = {
        "update_prelude": relative_update(tr["h_emb"], tr["h_pre"]) if model.layout.prelude else 0.0,
        "update_loops": ups,
        "update_coda": relative_update(states[-1], tr["h_coda"]) if model.layout.coda else 0.0,
        "update_balance": max(ups) / max(min(ups), 1e-12),
        "state_update_loops": [relative_update(a, b) for a, b in zip(states[:-1], states[1:])],
        "cka_consecutive": [cka_rbf(a, b, sigma_frac) for a, b in zip(states[:-1], states[1:])],
        "cka_linear_consecutive": [cka_linear(a, b) for a, b in zip(states[:-1], states[1:])],
        "state_names": [n for n, _ in named],
        "effective_rank": [effective_rank(s) for _, s in named],
        "singular_values": [normalized_singular_values(s, top_k).tolist() for _, s in named],
    }
    out["cka_consecutive_mean"] = sum(out["cka_consecutive"]) / len(out["cka_consecutive"])
    if "w_write" in tr:
        out["router_write"] = [w.mean(dim=(0, 1)).tolist() for w in tr["w_write"]]
        out["router_read"] = [w.mean(dim=(0, 1)).tolist() for w in tr["w_read"]]
    return out
