"""Exact tests of the measurement suite: probes, forgetting, Neural Collapse, ranks, projector, LDA."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from iclr26.forgetting import (
    LinearProbe,
    buffer_population_stats,
    forgetting,
    forgetting_matrix,
    lda_counterfactuals,
    lda_fit,
    lda_predict,
    nc_metrics,
    numerical_rank,
    projection_norms,
    subspace_projector,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def simplex_etf(K: int, d: int, rng) -> np.ndarray:
    """K centred simplex-ETF class means in R^d (rows), each of norm 2."""
    q, _ = np.linalg.qr(rng.standard_normal((d, K)))
    m = (np.eye(K) - 1.0 / K) @ q.T  # (K, d), rows sum to zero
    return 2.0 * m / np.linalg.norm(m, axis=1, keepdims=True)


# ---------------------------------------------------------------- probes and forgetting


@pytest.mark.parametrize("backend", ["sklearn", "torch"])
def test_probe_scores_100_on_separable_features(backend):
    rng = np.random.default_rng(0)
    means = 10 * np.eye(5, 8)
    y = np.repeat(np.arange(5), 40)
    z = means[y] + 0.3 * rng.standard_normal((200, 8))
    yt = np.repeat(np.arange(5), 10)
    zt = means[yt] + 0.3 * rng.standard_normal((50, 8))
    probe = LinearProbe(backend=backend, max_iter=100).fit(z, y)
    assert probe.score(zt, yt) == 1.0


def test_probe_torch_matches_sklearn_objective():
    rng = np.random.default_rng(1)
    z = rng.standard_normal((300, 5))
    y = (z[:, 0] + 0.5 * z[:, 1] + 0.8 * rng.standard_normal(300) > 0).astype(int) + 2 * (z[:, 2] > 0.5)
    a = LinearProbe(C=0.1).fit(z, y)
    b = LinearProbe(C=0.1, backend="torch", max_iter=2000).fit(z, y)
    # same convex objective -> same predictions on almost every point
    assert (a.predict(z) == b.predict(z)).mean() > 0.99


def test_forgetting_from_hand_made_matrix():
    nan = np.nan
    acc = np.array([[0.9, nan, nan], [0.5, 0.8, nan], [0.3, 0.6, 0.95]])
    # F = mean(A_00 - A_20, A_11 - A_21) = mean(0.6, 0.2) = 0.4
    assert forgetting(acc) == pytest.approx(0.4)
    # at session 1: A_00 - A_10 = 0.4
    assert forgetting(acc, final=1) == pytest.approx(0.4)
    fm = forgetting_matrix(acc)
    assert fm[2, 0] == pytest.approx(0.6) and fm[2, 1] == pytest.approx(0.2) and np.isnan(fm[0, 2])
    # no forgetting when every later row repeats the diagonal
    flat = np.array([[0.7, nan], [0.7, 0.9]])
    assert forgetting(flat) == 0.0
    with pytest.raises(ValueError):
        forgetting(np.ones((2, 3)))


def test_forgetting_max_reference_is_mammoths_logger():
    """Mammoth's ``utils/metrics.py::forgetting``: max over sessions of A_kj minus the final A_Tj.
    On this matrix task 0 improves after it was learned, so the two references differ."""
    nan = np.nan
    acc = np.array([[0.80, nan, nan], [0.90, 0.70, nan], [0.75, 0.66, 0.95]])
    # diagonal: mean(0.80 - 0.75, 0.70 - 0.66) = 0.045; max: mean(0.90 - 0.75, 0.70 - 0.66) = 0.095
    assert forgetting(acc) == pytest.approx(0.045)
    assert forgetting(acc, reference="max") == pytest.approx(0.095)

    def mammoth(results):  # the logger's computation, on lists of per-task accuracies of each session
        rows = [list(r) + [0.0] * (len(results) - len(r)) for r in results]
        m = np.max(np.array(rows), axis=0)
        return float(np.mean([m[i] - rows[-1][i] for i in range(len(rows) - 1)]))

    assert forgetting(acc, reference="max") == pytest.approx(mammoth([[0.80], [0.90, 0.70], [0.75, 0.66, 0.95]]))
    # a task whose accuracy only falls: both references agree
    mono = np.array([[0.9, nan], [0.6, 0.8]])
    assert forgetting(mono) == forgetting(mono, reference="max") == pytest.approx(0.3)
    with pytest.raises(ValueError, match="reference"):
        forgetting(acc, reference="first")


# ---------------------------------------------------------------- Neural Collapse


def test_nc_on_simplex_etf():
    rng = np.random.default_rng(0)
    K, d = 4, 8
    m = simplex_etf(K, d, rng)
    y = np.repeat(np.arange(K), 5)
    z = m[y]  # fully collapsed
    out = nc_metrics(z, y, range(K), head_weight=m, setting="cil")
    assert out["within_var"] == pytest.approx(0.0, abs=1e-20)
    assert out["nc1"] == pytest.approx(0.0, abs=1e-12)
    assert out["nc2_diag"] == pytest.approx(1.0)
    assert out["nc2_within_offdiag"] == pytest.approx(-1.0 / (K - 1))
    assert out["nc2_within_offdiag_var"] == pytest.approx(0.0, abs=1e-20)
    assert out["rank_means"] == K - 1
    assert out["nc3"] == pytest.approx(1.0)
    assert out["snr"] > 1e20  # infinite up to rounding (exactly inf when the variances are exactly 0)
    assert out["beta"] == pytest.approx(4.0)
    # a head that is not aligned gives NC3 < 1
    assert nc_metrics(z, y, range(K), head_weight=rng.standard_normal((K, d)))["nc3"] < 0.9


def test_nc1_grows_with_isotropic_noise():
    rng = np.random.default_rng(0)
    K, d, sigma = 4, 8, 0.1
    m = simplex_etf(K, d, rng)
    y = np.repeat(np.arange(K), 4000)
    z = m[y] + sigma * rng.standard_normal((len(y), d))
    out = nc_metrics(z, y, range(K))
    assert out["within_var"] == pytest.approx(d * sigma**2, rel=0.03)  # sigma^2_c = tr Sigma_c = d sigma^2
    assert out["nc1"] > 0
    assert np.isfinite(out["snr"]) and out["snr"] > 50


def test_snr_and_unbiased_variance_by_hand():
    # class 0: {(0,0), (2,0)}, class 1: {(4,0), (4,2), (4,4)}
    z = np.array([[0.0, 0.0], [2.0, 0.0], [4.0, 0.0], [4.0, 2.0], [4.0, 4.0]])
    y = np.array([0, 0, 1, 1, 1])
    out = nc_metrics(z, y, [0, 1])
    var0, var1 = 2.0 / 1, 8.0 / 2  # unbiased: sum of squared deviations / (n_c - 1)
    assert out["within_var"] == pytest.approx((var0 + var1) / 2)
    mu0, mu1 = np.array([1.0, 0.0]), np.array([4.0, 2.0])
    assert out["snr"] == pytest.approx(((mu1 - mu0) ** 2).sum() / (var0 + var1))  # 13 / 6
    assert out["mean_norm"] == pytest.approx((1.0 + np.sqrt(20.0)) / 2)


def test_multi_head_rank_is_n_times_k_minus_one():
    rng = np.random.default_rng(0)
    n, K, d = 3, 3, 16
    means = rng.standard_normal((n * K, d))  # generic means
    y = np.repeat(np.arange(n * K), 3)
    z = means[y]
    groups = [list(range(t * K, (t + 1) * K)) for t in range(n)]
    assert nc_metrics(z, y, range(n * K), task_groups=groups, setting="til")["rank_means"] == n * (K - 1)
    assert nc_metrics(z, y, range(n * K), task_groups=groups, setting="cil")["rank_means"] == n * K - 1


def test_numerical_rank_on_constructed_covariances():
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((10, 10)))
    for k in (0, 1, 4, 10):
        lam = np.r_[np.linspace(1, 3, k), np.zeros(10 - k)]
        assert numerical_rank(q @ np.diag(lam) @ q.T) == k
    # an eigenvalue below rtol * max is numerically zero
    assert numerical_rank(np.diag([1.0, 1e-8, 0.5])) == 2
    assert numerical_rank(np.diag([1.0, 1e-8, 0.5]), rtol=1e-10) == 3
    # the tolerance is relative to the largest eigenvalue: a uniformly tiny covariance keeps its rank
    assert numerical_rank(1e-9 * np.diag([1.0, 0.5, 0.2])) == 3
    # n samples -> sample covariance rank <= n - 1
    stats = buffer_population_stats(
        rng.standard_normal((500, 10)), np.zeros(500, int), rng.standard_normal((4, 10)), np.zeros(4, int), [0]
    )
    assert stats["rank_buf"][0] == 3 and stats["rank_pop"][0] == 10


def test_buffer_population_stats_values():
    zp = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 2.0]])
    zb = np.array([[2.0, 2.0]])
    s = buffer_population_stats(zp, np.zeros(4, int), zb, np.zeros(1, int), [0])
    assert s["norm_pop"][0] == pytest.approx(math.sqrt(2))
    assert s["norm_buf"][0] == pytest.approx(math.sqrt(8))
    assert s["shift"][0] == pytest.approx(math.sqrt(2))
    assert s["var_buf"][0] == 0.0 and s["rank_buf"][0] == 0
    assert s["var_pop"][0] == pytest.approx(2 * 4 / 3)  # each coordinate: var of {0,2,0,2} (unbiased) = 4/3


def test_projector_is_idempotent_symmetric_and_splits_norms():
    rng = np.random.default_rng(0)
    K, d = 4, 10
    m = simplex_etf(K, d, rng)
    p = subspace_projector(m)
    assert np.allclose(p @ p, p) and np.allclose(p, p.T)
    assert round(np.trace(p)) == K - 1
    # features = ETF mean + noise orthogonal to the span -> exact split
    q, _ = np.linalg.qr(np.c_[m.T, rng.standard_normal((d, d - K + 1))])
    perp = q[:, K - 1 :]  # orthonormal complement of span(m)
    y = np.repeat(np.arange(K), 3)
    noise = rng.standard_normal((len(y), perp.shape[1])) @ perp.T
    z = m[y] + noise
    inside, outside = projection_norms(z, p)
    assert inside == pytest.approx(np.linalg.norm(m[y], axis=1).mean())
    assert outside == pytest.approx(np.linalg.norm(noise, axis=1).mean())


# ---------------------------------------------------------------- LDA


def test_lda_with_true_statistics_reaches_bayes_accuracy():
    rng = np.random.default_rng(0)
    cov = np.array([[2.0, 0.9], [0.9, 1.0]])
    mu = np.array([[0.0, 0.0], [1.5, -0.5]])
    n = 40000
    y = rng.integers(0, 2, n)
    z = mu[y] + rng.multivariate_normal(np.zeros(2), cov, n)
    delta = math.sqrt((mu[1] - mu[0]) @ np.linalg.solve(cov, mu[1] - mu[0]))
    w, b = lda_fit(mu, cov, ridge=0.0)
    acc = (lda_predict(w, b, z, [0, 1]) == y).mean()
    assert acc == pytest.approx(norm.cdf(delta / 2), abs=0.01)


def test_lda_identity_covariance_hurts_on_anisotropic_problem():
    rng = np.random.default_rng(0)
    cov = np.diag([25.0, 0.04])
    mu = np.array([[0.0, 0.0], [3.0, 0.4]])
    y = rng.integers(0, 2, 5000)
    z = mu[y] + rng.multivariate_normal(np.zeros(2), cov, 5000)
    full = lda_counterfactuals(z, y, z, y, z, y, [0, 1], ridge=0.0)
    assert full["pop_mu+pop_cov"] > full["pop_mu+identity"] + 0.2
    # buffer == population -> every plug-in combination is identical
    assert full["buf_mu+buf_cov"] == full["pop_mu+pop_cov"] == full["buf_mu+pop_cov"]
