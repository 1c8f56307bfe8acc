"""Entropy estimators (within 0.05 nats at n = 5000), Vendi, coverage (spec 8.11)."""

import math

import numpy as np
import pytest

from iclr26.flow_expander.metrics import grid_coverage, histogram_entropy, kl_entropy, rbf_kernel_median, vendi_score


def _ellipse(n, rng):
    u = rng.uniform([-3, -1.5], [3, 1.5], size=(4 * n, 2))
    return u[(u[:, 0] / 3) ** 2 + (u[:, 1] / 1.5) ** 2 <= 1][:n]


@pytest.mark.parametrize("estimator", [kl_entropy, histogram_entropy])
def test_entropy_estimators_gaussian_and_uniform_ellipse(estimator):
    rng = np.random.default_rng(0)
    g = rng.normal(size=(5000, 2)) * [0.7, 1.3]
    assert abs(estimator(g) - math.log(2 * math.pi * math.e * 0.7 * 1.3)) < 0.05
    u = _ellipse(5000, rng)
    assert abs(estimator(u) - math.log(4.5 * math.pi)) < 0.05


def test_entropy_estimators_scale_covariance():
    """H(a X) = H(X) + d log a: both estimators shift by 2 log 2 when the samples are doubled."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3000, 2))
    assert abs(kl_entropy(2 * x) - kl_entropy(x) - 2 * math.log(2)) < 1e-9
    assert (
        abs(histogram_entropy(2 * x, bin_width=0.25) - histogram_entropy(x, bin_width=0.125) - 2 * math.log(2)) < 1e-9
    )


def test_entropy_bad_input():
    with pytest.raises(ValueError):
        kl_entropy(np.array([[0.0, np.nan]] * 10))
    with pytest.raises(ValueError):
        kl_entropy(np.zeros((2, 2)))
    with pytest.raises(ValueError):
        histogram_entropy(np.zeros((10, 2)), bin_width=0)
    with pytest.raises(ValueError):
        histogram_entropy(np.zeros((10, 2)), correction="nope")


def test_vendi_identities():
    assert abs(vendi_score(np.ones((7, 7))) - 1.0) < 1e-6
    assert abs(vendi_score(np.eye(7)) - 7.0) < 1e-6
    rng = np.random.default_rng(0)
    f = rng.normal(size=(30, 4))
    k = rbf_kernel_median(f)
    perm = rng.permutation(30)
    assert abs(vendi_score(k) - vendi_score(rbf_kernel_median(f[perm]))) < 1e-8
    assert 1.0 < vendi_score(k) < 30.0


def test_grid_coverage():
    def inside(z):
        return np.abs(z).max(1) <= 1.0

    pts = np.array([[0.1, 0.1], [0.6, -0.6]])
    cov = grid_coverage(pts, inside, cell=0.5, box=(-1.0, 1.0))
    assert cov == pytest.approx(2 / 16)


def test_rbf_kernel_median_values_and_memory():
    """K_ij = exp(-d_ij^2 / (2 b^2)), b = median pairwise distance; peak memory O(n^2), not O(n^2 d)."""
    import tracemalloc

    rng = np.random.default_rng(2)
    f = rng.normal(size=(9, 5))
    d = np.sqrt(((f[:, None] - f[None]) ** 2).sum(-1))
    b = np.median(d[np.triu_indices(9, 1)])
    assert np.allclose(rbf_kernel_median(f), np.exp(-(d**2) / (2 * b * b)))
    big = rng.normal(size=(600, 100))
    tracemalloc.start()
    k = rbf_kernel_median(big)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert k.shape == (600, 600) and np.allclose(np.diag(k), 1.0)
    assert peak < 40e6  # an (n, n, d) difference array alone would be 288 MB
    with pytest.raises(ValueError):
        rbf_kernel_median(np.zeros(5))
