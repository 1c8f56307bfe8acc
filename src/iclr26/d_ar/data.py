"""Digits data, the scikit-learn MLP evaluator and the Fréchet distance of the CPU reproduction.

FD between feature sets with means mu_a, mu_b and covariances S_a, S_b (as FID, on the evaluator's
hidden layer instead of Inception's pool layer)::

    FD = ||mu_a - mu_b||^2 + tr(S_a + S_b - 2 (S_a S_b)^{1/2})
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


@dataclass
class Digits:
    """Images [n, 1, 8, 8] in [-1, 1] and labels, split into train / test."""

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor


def load_digits_split(n_train: int = 1500, split_seed: int = 0) -> Digits:
    """scikit-learn's 1,797 8x8 digits (shipped with the package), 0..16 -> [-1, 1], stratified split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images.astype(np.float32) / 8.0 - 1.0)[:, None]
    if not 0 < n_train < len(x):
        raise ValueError(f"n_train must be in 1..{len(x) - 1}, got {n_train}")
    xtr, xte, ytr, yte = train_test_split(x, d.target, train_size=n_train, stratify=d.target, random_state=split_seed)
    return Digits(
        torch.from_numpy(xtr), torch.from_numpy(ytr).long(), torch.from_numpy(xte), torch.from_numpy(yte).long()
    )


def random_shift(x: Tensor, max_shift: int, generator: torch.Generator, fill: float = -1.0) -> Tensor:
    """Translate each image by (dy, dx) uniform in [-m, m]^2 pixels, filling with the background."""
    if max_shift == 0:
        return x
    B, C, H, W = x.shape
    m = max_shift
    pad = torch.full((B, C, H + 2 * m, W + 2 * m), fill, dtype=x.dtype)
    pad[:, :, m : m + H, m : m + W] = x
    d = torch.randint(0, 2 * m + 1, (B, 2), generator=generator)
    bi = torch.arange(B)[:, None, None]
    rows = d[:, 0, None, None] + torch.arange(H)[None, :, None]
    cols = d[:, 1, None, None] + torch.arange(W)[None, None, :]
    return pad.permute(0, 2, 3, 1)[bi, rows, cols].permute(0, 3, 1, 2).contiguous()


class Evaluator:
    """scikit-learn MLPClassifier (one ReLU hidden layer) on flattened [-1, 1] pixels; its hidden
    activations are the FD features."""

    def __init__(self, hidden: int = 32, max_iter: int = 300, seed: int = 0):
        from sklearn.neural_network import MLPClassifier

        self.clf = MLPClassifier(hidden_layer_sizes=(hidden,), max_iter=max_iter, random_state=seed, alpha=1e-3)

    def fit(self, x: Tensor, y: Tensor) -> Evaluator:
        import warnings

        from sklearn.exceptions import ConvergenceWarning

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.clf.fit(_flat(x), y.numpy())
        return self

    def accuracy(self, x: Tensor, y: Tensor) -> float:
        return float((self.clf.predict(_flat(x)) == y.numpy()).mean())

    def predict(self, x: Tensor) -> np.ndarray:
        return self.clf.predict(_flat(x))

    def features(self, x: Tensor) -> np.ndarray:
        """ReLU(x W_1 + b_1), the hidden layer."""
        return np.maximum(_flat(x) @ self.clf.coefs_[0] + self.clf.intercepts_[0], 0.0)


def _flat(x: Tensor) -> np.ndarray:
    return x.detach().cpu().reshape(x.shape[0], -1).clamp(-1, 1).numpy().astype(np.float64)


def frechet_distance(feats_a: np.ndarray, feats_b: np.ndarray) -> float:
    """||mu_a - mu_b||^2 + tr(S_a + S_b - 2 sqrtm(S_a S_b)) (real part; needs >= 2 rows each)."""
    if len(feats_a) < 2 or len(feats_b) < 2:
        raise ValueError("Fréchet distance needs at least 2 samples per set")
    mu_a, mu_b = feats_a.mean(0), feats_b.mean(0)
    s_a, s_b = np.cov(feats_a, rowvar=False), np.cov(feats_b, rowvar=False)
    return frechet_from_stats(mu_a, s_a, mu_b, s_b)


def frechet_from_stats(mu_a, s_a, mu_b, s_b) -> float:
    from scipy import linalg

    covmean = linalg.sqrtm(np.atleast_2d(s_a) @ np.atleast_2d(s_b))
    if not np.isfinite(covmean).all():  # near-singular product: regularise as the ADM/FID code does
        eps = 1e-6 * np.eye(len(mu_a))
        covmean = linalg.sqrtm((s_a + eps) @ (s_b + eps))
    covmean = np.real(covmean)
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(s_a) + np.trace(s_b) - 2 * np.trace(covmean))
