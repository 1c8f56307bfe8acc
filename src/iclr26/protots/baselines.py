"""Baselines on the same windows as ProtoTS: seasonal naive, direct multi-horizon ridge and
HistGradientBoosting (scikit-learn), and TiDE-lite (a small TiDE, Das et al. 2023: dense encoder-decoder
with a per-step covariate projection, a temporal decoder and a linear skip from the history)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from iclr26.protots.data import Windows


def seasonal_naive(w: Windows, period: int = 24) -> torch.Tensor:
    """Y^_{L+h} = y_{L+h-period*ceil(h/period)}: the last ``period`` steps repeated (yesterday, same hour)."""
    L, H = w.y_hist.shape[1], w.y.shape[1]
    if period > L:
        raise ValueError(f"period {period} exceeds the lookback {L}")
    last = w.y_hist[:, L - period :]
    reps = -(-H // period)
    return last.repeat(1, reps)[:, :H]


def _onehot(x_dis: torch.Tensor, cards: Sequence[int]) -> np.ndarray:
    cols = [np.eye(c + 1, dtype=np.float32)[x_dis[..., j].numpy()] for j, c in enumerate(cards)]
    return np.concatenate(cols, axis=-1) if cols else np.zeros((*x_dis.shape[:-1], 0), np.float32)


def ridge_features(w: Windows, cards: Sequence[int]) -> np.ndarray:
    """[history (L), future continuous covariates (H x C_con), one-hot future discrete covariates]."""
    L = w.y_hist.shape[1]
    fut_con = w.x_con[:, L:].reshape(len(w), -1).numpy()
    fut_dis = _onehot(w.x_dis[:, L:], cards).reshape(len(w), -1)
    return np.concatenate([w.y_hist.numpy(), fut_con, fut_dis], axis=1)


class RidgeDirect:
    """One multi-output ridge regression Y = X B (direct multi-horizon)."""

    def __init__(self, cards: Sequence[int], alpha: float = 1.0):
        from sklearn.linear_model import Ridge

        self.cards, self.model = list(cards), Ridge(alpha=alpha)

    def fit(self, w: Windows) -> RidgeDirect:
        self.model.fit(ridge_features(w, self.cards), w.y.numpy())
        return self

    def predict(self, w: Windows) -> torch.Tensor:
        return torch.tensor(self.model.predict(ridge_features(w, self.cards)), dtype=torch.float32)


class HGBDirect:
    """One HistGradientBoostingRegressor per horizon step h, on [last 24 h of history, history mean,
    continuous and (categorical) discrete covariates at step L+h]."""

    def __init__(self, n_dis: int, max_iter: int = 100, seed: int = 0):
        self.n_dis, self.max_iter, self.seed = n_dis, max_iter, seed
        self.models: list = []

    def _features(self, w: Windows, h: int) -> np.ndarray:
        L = w.y_hist.shape[1]
        hist = w.y_hist[:, -min(24, L) :].numpy()
        return np.concatenate(
            [
                w.x_dis[:, L + h].numpy().astype(np.float64),
                hist,
                w.y_hist.mean(1, keepdim=True).numpy(),
                w.x_con[:, L + h].numpy(),
            ],
            axis=1,
        )

    def fit(self, w: Windows) -> HGBDirect:
        from sklearn.ensemble import HistGradientBoostingRegressor

        cat = np.arange(self.n_dis)
        self.models = []
        for h in range(w.y.shape[1]):
            m = HistGradientBoostingRegressor(
                max_iter=self.max_iter, categorical_features=cat if len(cat) else None, random_state=self.seed
            )
            self.models.append(m.fit(self._features(w, h), w.y[:, h].numpy()))
        return self

    def predict(self, w: Windows) -> torch.Tensor:
        cols = [m.predict(self._features(w, h)) for h, m in enumerate(self.models)]
        return torch.tensor(np.stack(cols, 1), dtype=torch.float32)


class ResBlock(nn.Module):
    """TiDE's residual block: [LayerNorm](Linear(ReLU(Linear(x))) + Linear_skip(x)).

    LayerNorm is optional as in TiDE; it must be off for a width-1 output (the temporal decoder), where
    it would map every input to its bias and cut the covariates off the forecast.
    """

    def __init__(self, d_in: int, d_hidden: int, d_out: int, dropout: float = 0.1, layer_norm: bool = True):
        super().__init__()
        if layer_norm and d_out < 2:
            raise ValueError("LayerNorm over a width-1 output is a constant; use layer_norm=False")
        self.net = nn.Sequential(nn.Linear(d_in, d_hidden), nn.ReLU(), nn.Linear(d_hidden, d_out), nn.Dropout(dropout))
        self.skip = nn.Linear(d_in, d_out)
        self.norm = nn.LayerNorm(d_out) if layer_norm else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.net(x) + self.skip(x))


class TiDELite(nn.Module):
    """TiDE with small widths: covariates x_t -> projection r_t (per step); encoder on [history, r_{1:L+H}];
    decoder to H vectors of width ``dec``; temporal decoder on [decoded_t, r_t]; plus a linear skip L -> H."""

    def __init__(
        self,
        n_dis_cards: Sequence[int],
        n_con: int,
        L: int,
        H: int,
        hidden: int = 128,
        proj: int = 4,
        dec: int = 8,
        dis_dim: int = 4,
    ):
        super().__init__()
        self.L, self.H, self.dec = L, H, dec
        self.dis_emb = nn.ModuleList(nn.Embedding(c + 1, dis_dim) for c in n_dis_cards)
        cov = n_con + dis_dim * len(n_dis_cards)
        self.proj = ResBlock(max(cov, 1), 32, proj)
        self.encoder = nn.Sequential(ResBlock(L + (L + H) * proj, hidden, hidden), ResBlock(hidden, hidden, hidden))
        self.decoder = ResBlock(hidden, hidden, H * dec)
        self.temporal = ResBlock(dec + proj, 32, 1, layer_norm=False)  # per-step output, width 1
        self.skip = nn.Linear(L, H)

    def forward(self, y_hist: torch.Tensor, x_dis: torch.Tensor, x_con: torch.Tensor) -> torch.Tensor:
        parts = [x_con] + [e(x_dis[..., j]) for j, e in enumerate(self.dis_emb)]
        cov = torch.cat(parts, -1) if parts[0].shape[-1] or len(parts) > 1 else torch.zeros_like(x_con[..., :1])
        r = self.proj(cov)  # (B, T, proj)
        e = self.encoder(torch.cat([y_hist, r.flatten(1)], 1))
        g = self.decoder(e).view(-1, self.H, self.dec)
        out = self.temporal(torch.cat([g, r[:, self.L :]], -1)).squeeze(-1)
        return out + self.skip(y_hist)

    @torch.no_grad()
    def predict(self, y_hist: torch.Tensor, x_dis: torch.Tensor, x_con: torch.Tensor, batch_size: int = 1024):
        was = self.training
        self.eval()
        out = torch.cat(
            [
                self(y_hist[i : i + batch_size], x_dis[i : i + batch_size], x_con[i : i + batch_size])
                for i in range(0, len(y_hist), batch_size)
            ]
        )
        self.train(was)
        return out
