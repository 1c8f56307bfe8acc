"""Neural Collapse (NC) and buffer-vs-population geometry.

For features z (n, d), labels y and a set of classes:

* class mean mu_c, unbiased within-class variance sigma^2_c = 1/(n_c-1) sum ||z - mu_c||^2
  (the trace of the class covariance Sigma_c; the official NC1 proxy);
* NC1 (Papyan et al.) = Tr(Sigma_W Sigma_B^+) / C with Sigma_W the mean class covariance and
  Sigma_B the covariance of the class means;
* centred means U~ = U - mean(U): CIL centres globally, TIL/DIL per task;
  beta = mean_c ||mu~_c||^2, rank(U~);
* NC2: Gram of the column-normalised U~; its off-diagonal mean within a task (simplex ETF target
  -1/(K-1)), their variance, and the between-task off-diagonal mean;
* NC3 = mean_c cos(w_c, mu~_c) for head rows w_c;
* SNR(c, c') = ||mu_c - mu_c'||^2 / (sigma^2_c + sigma^2_c'), averaged over pairs;
* numerical rank of Sigma_c: #eigenvalues > rtol * lambda_max (rtol 1e-6);
* active subspace S = col-span(U~), projector P = U~ U~^+, split ||P z|| and ||(I - P) z||.
"""

from __future__ import annotations

import numpy as np


def class_means_vars(z: np.ndarray, y: np.ndarray, classes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(means (C, d), unbiased variances sigma^2_c (C,), counts (C,)); a class with 1 sample has variance 0."""
    z, y = np.asarray(z, dtype=np.float64), np.asarray(y)
    classes = list(classes)
    means = np.zeros((len(classes), z.shape[1]))
    var = np.zeros(len(classes))
    counts = np.zeros(len(classes), dtype=int)
    for k, c in enumerate(classes):
        zc = z[y == c]
        if len(zc) == 0:
            raise ValueError(f"class {c} has no samples")
        counts[k] = len(zc)
        means[k] = zc.mean(0)
        var[k] = ((zc - means[k]) ** 2).sum() / (len(zc) - 1) if len(zc) > 1 else 0.0
    return means, var, counts


def class_covariance(zc: np.ndarray) -> np.ndarray:
    """Unbiased covariance of one class's features (zeros for a single sample)."""
    zc = np.asarray(zc, dtype=np.float64)
    if len(zc) < 2:
        return np.zeros((zc.shape[1], zc.shape[1]))
    d = zc - zc.mean(0)
    return d.T @ d / (len(zc) - 1)


def numerical_rank(cov: np.ndarray, rtol: float = 1e-6) -> int:
    """Number of eigenvalues of a symmetric PSD matrix above ``rtol * ||cov||_2`` (0 for the zero matrix)."""
    cov = np.asarray(cov, dtype=np.float64)
    top = float(np.linalg.norm(cov, 2)) if cov.size else 0.0
    if top <= 0:
        return 0
    return int(np.linalg.matrix_rank(cov, tol=rtol * top, hermitian=True))


def centre_means(means: np.ndarray, groups: list[list[int]] | None) -> np.ndarray:
    """U~: subtract the global mean of the class means (groups None) or each group's (task's) mean."""
    means = np.asarray(means, dtype=np.float64)
    if groups is None:
        return means - means.mean(0, keepdims=True)
    out = np.empty_like(means)
    for g in groups:
        out[g] = means[g] - means[g].mean(0, keepdims=True)
    return out


def nc_metrics(
    z: np.ndarray,
    y: np.ndarray,
    classes,
    head_weight: np.ndarray | None = None,
    task_groups: list[list[int]] | None = None,
    setting: str = "cil",
    rtol: float = 1e-6,
) -> dict:
    """NC1-NC3, beta, rank(U~), SNR and mean class-mean norm for the given classes.

    classes: the class labels to use (rows of the returned statistics follow this order).
    head_weight: (n_out, d) head rows indexed by class label (for NC3); optional.
    task_groups: positions (into ``classes``) of each task's classes, for per-task centring (TIL/DIL)
        and the within/between-task NC2 entries; None = one group.
    setting: "cil" centres globally, "til"/"dil" per task.
    """
    classes = list(classes)
    means, var, counts = class_means_vars(z, y, classes)
    groups = task_groups if task_groups is not None else [list(range(len(classes)))]
    u = centre_means(means, groups if setting in ("til", "dil") else None)
    norms = np.linalg.norm(u, axis=1)
    un = u / np.where(norms > 0, norms, 1.0)[:, None]
    gram = un @ un.T
    same = np.zeros_like(gram, dtype=bool)
    for g in groups:
        same[np.ix_(g, g)] = True
    off = ~np.eye(len(classes), dtype=bool)
    within, between = gram[same & off], gram[~same]
    # NC1 = Tr(Sigma_W Sigma_B^+)/C
    z64, y = np.asarray(z, dtype=np.float64), np.asarray(y)
    sw = np.mean([class_covariance(z64[y == c]) for c in classes], axis=0)
    centred_global = means - means.mean(0, keepdims=True)
    sb = centred_global.T @ centred_global / len(classes)
    nc1 = float(np.trace(sw @ np.linalg.pinv(sb)) / len(classes))
    snr = []
    for a in range(len(classes)):
        for b in range(a + 1, len(classes)):
            num, den = float(((means[a] - means[b]) ** 2).sum()), float(var[a] + var[b])
            snr.append(np.inf if den == 0 else num / den)
    out = {
        "nc1": nc1,
        "within_var": float(var.mean()),
        "nc2_diag": float(np.diag(gram).mean()),
        "nc2_within_offdiag": float(within.mean()) if within.size else float("nan"),
        "nc2_within_offdiag_var": float(within.var()) if within.size else float("nan"),
        "nc2_between_offdiag": float(between.mean()) if between.size else float("nan"),
        "beta": float((norms**2).mean()),
        "rank_means": int(np.linalg.matrix_rank(u, tol=rtol * max(np.linalg.norm(u, 2), 1e-300))) if norms.any() else 0,
        "snr": float(np.mean(snr)) if snr else float("nan"),
        "mean_norm": float(np.linalg.norm(means, axis=1).mean()),
    }
    if head_weight is not None:
        w = np.asarray(head_weight, dtype=np.float64)[classes]
        wn = np.linalg.norm(w, axis=1)
        cos = (w * u).sum(1) / np.maximum(wn * norms, 1e-300)
        out["nc3"] = float(cos.mean())
    return out


def subspace_projector(centred_means: np.ndarray, rtol: float = 1e-6) -> np.ndarray:
    """P = U~ U~^+ (d x d) onto the span of the centred class means (rows of ``centred_means``)."""
    u = np.asarray(centred_means, dtype=np.float64).T  # (d, C)
    return u @ np.linalg.pinv(u, rcond=rtol)


def projection_norms(z: np.ndarray, projector: np.ndarray) -> tuple[float, float]:
    """(mean ||P z||, mean ||(I - P) z||)."""
    z = np.asarray(z, dtype=np.float64)
    pz = z @ projector.T
    return float(np.linalg.norm(pz, axis=1).mean()), float(np.linalg.norm(z - pz, axis=1).mean())


def buffer_population_stats(
    z_pop: np.ndarray,
    y_pop: np.ndarray,
    z_buf: np.ndarray,
    y_buf: np.ndarray,
    classes,
    rtol: float = 1e-6,
    rng: np.random.Generator | None = None,
) -> dict[str, np.ndarray]:
    """Per class (in ``classes`` order): buffer vs population sigma^2_c, rank Sigma_c, ||mu_c||, mean shift.

    ``null_norm``: ||mean|| of a uniformly random population subset of the buffer's size (given ``rng``),
    the norm inflation expected from sampling alone (E||mu^_c|| >= ||mu_c|| by Jensen).
    """
    z_pop, z_buf = np.asarray(z_pop, dtype=np.float64), np.asarray(z_buf, dtype=np.float64)
    out: dict[str, list] = {
        k: []
        for k in (
            "n_buf",
            "n_pop",
            "var_pop",
            "var_buf",
            "rank_pop",
            "rank_buf",
            "norm_pop",
            "norm_buf",
            "shift",
            "null_norm",
        )
    }
    for c in classes:
        zp, zb = z_pop[np.asarray(y_pop) == c], z_buf[np.asarray(y_buf) == c]
        if len(zp) == 0 or len(zb) == 0:
            raise ValueError(f"class {c}: {len(zp)} population and {len(zb)} buffer samples; need both")
        mp, mb = zp.mean(0), zb.mean(0)
        out["n_buf"].append(len(zb))
        out["n_pop"].append(len(zp))
        out["var_pop"].append(float(np.trace(class_covariance(zp))))
        out["var_buf"].append(float(np.trace(class_covariance(zb))))
        out["rank_pop"].append(numerical_rank(class_covariance(zp), rtol))
        out["rank_buf"].append(numerical_rank(class_covariance(zb), rtol))
        out["norm_pop"].append(float(np.linalg.norm(mp)))
        out["norm_buf"].append(float(np.linalg.norm(mb)))
        out["shift"].append(float(np.linalg.norm(mb - mp)))
        if rng is not None:
            sub = zp[rng.choice(len(zp), size=min(len(zb), len(zp)), replace=False)]
            out["null_norm"].append(float(np.linalg.norm(sub.mean(0))))
        else:
            out["null_norm"].append(float("nan"))
    return {k: np.asarray(v) for k, v in out.items()}
