"""The LDA counterfactual (paper Fig. 6).

A Gaussian classifier with shared covariance on the network's features,

    w_c = Sigma^{-1} mu_c,   b_c = -1/2 mu_c^T Sigma^{-1} mu_c   (uniform class prior),

built from different plug-in statistics, to show which statistics the head is missing. The
"buffer" statistics are those of the data the head actually saw during the last task: the replay
buffer for the old classes and the full training set for the current task's classes.
The "population" statistics use the full training set of every class.

Sigma is the class-balanced pooled covariance (mean of the per-class unbiased covariances), so the
old classes' (rank-deficient) buffer covariances weigh as much as the current classes'. It is
inverted with a ridge, Sigma + eps * tr(Sigma)/d * I (eps = 1e-2 by default), or with a pseudo-inverse.
"""

from __future__ import annotations

import numpy as np

from .neural_collapse import class_covariance


def lda_fit(
    means: np.ndarray, cov: np.ndarray | None, ridge: float = 1e-2, inverse: str = "ridge"
) -> tuple[np.ndarray, np.ndarray]:
    """(W (C, d), b (C,)) of the LDA rule; ``inverse`` in {"ridge", "pinv"}; ``cov=None`` means Sigma = I."""
    means = np.asarray(means, dtype=np.float64)
    d = means.shape[1]
    if cov is None:
        prec = np.eye(d)
    else:
        cov = np.asarray(cov, dtype=np.float64)
        if inverse == "ridge":
            scale = max(float(np.trace(cov)) / d, 1e-12)
            prec = np.linalg.inv(cov + ridge * scale * np.eye(d))
        elif inverse == "pinv":
            prec = np.linalg.pinv(cov, hermitian=True)
        else:
            raise ValueError(f"unknown inverse '{inverse}'; valid: ridge, pinv")
    w = means @ prec
    b = -0.5 * (w * means).sum(1)
    return w, b


def lda_predict(w: np.ndarray, b: np.ndarray, z: np.ndarray, classes) -> np.ndarray:
    return np.asarray(list(classes))[(np.asarray(z, dtype=np.float64) @ w.T + b).argmax(1)]


def gaussian_stats(z: np.ndarray, y: np.ndarray, classes) -> tuple[np.ndarray, np.ndarray]:
    """(means (C, d), class-balanced pooled covariance (d, d))."""
    z, y = np.asarray(z, dtype=np.float64), np.asarray(y)
    means = np.stack([z[y == c].mean(0) for c in classes])
    cov = np.mean([class_covariance(z[y == c]) for c in classes], axis=0)
    return means, cov


def lda_counterfactuals(
    z_pop: np.ndarray,
    y_pop: np.ndarray,
    z_seen: np.ndarray,
    y_seen: np.ndarray,
    z_test: np.ndarray,
    y_test: np.ndarray,
    classes,
    ridge: float = 1e-2,
    inverse: str = "ridge",
) -> dict[str, float]:
    """Test accuracy of LDA with each combination of plug-in statistics.

    z_pop, y_pop: population (full training set) features of all ``classes``.
    z_seen, y_seen: what the head saw (buffer for old classes, full data for the current task).
    z_test, y_test: where accuracy is measured (e.g. the old tasks' test sets).
    Keys: pop_mu+pop_cov, pop_mu+identity, buf_mu+pop_cov, pop_mu+buf_cov, buf_mu+buf_cov.
    """
    classes = list(classes)
    mu_p, cov_p = gaussian_stats(z_pop, y_pop, classes)
    mu_b, cov_b = gaussian_stats(z_seen, y_seen, classes)
    combos = {
        "pop_mu+pop_cov": (mu_p, cov_p),
        "pop_mu+identity": (mu_p, None),
        "buf_mu+pop_cov": (mu_b, cov_p),
        "pop_mu+buf_cov": (mu_p, cov_b),
        "buf_mu+buf_cov": (mu_b, cov_b),
    }
    out = {}
    for name, (mu, cov) in combos.items():
        w, b = lda_fit(mu, cov, ridge, inverse)
        out[name] = float((lda_predict(w, b, z_test, classes) == np.asarray(y_test)).mean())
    return out
