"""MMD, statistics, orbit counts (cross-checked with ORCA when installed), validity, V.U.N."""

import math

import networkx as nx
import numpy as np
import pytest

from iclr26.graph_ldm.data import planar_graphs
from iclr26.graph_ldm.metrics import (
    clustering_hist,
    degree_hist,
    graph_features,
    mmd2,
    mmd_all,
    planar_valid,
    spectral_hist,
    vun,
)
from iclr26.graph_ldm.orbits import graph_orbit_vector, orbit_counts


def test_mmd_of_a_set_with_itself_is_zero_and_positive_between_paths_and_cliques():
    paths = [nx.path_graph(n) for n in (4, 5, 6)]
    cliques = [nx.complete_graph(n) for n in (4, 5, 6)]
    fp, fc = graph_features(paths), graph_features(cliques)
    same = mmd_all(fp, fp)
    assert all(abs(v) < 1e-12 for v in same.values())
    diff = mmd_all(fp, fc)
    assert diff["degree"] > 0.1 and diff["clustering"] > 0.1 and diff["avg"] > 0.1


def test_degree_mmd_hand_computed():
    """P3 (degrees 1, 1, 2) vs K3 (2, 2, 2): TV = ½(2/3 + 2/3) = 2/3; MMD² = 2 - 2 exp(-(2/3)² / 2)."""
    val = mmd2([degree_hist(nx.path_graph(3))], [degree_hist(nx.complete_graph(3))], sigma=1.0)
    assert val == pytest.approx(2 - 2 * math.exp(-((2 / 3) ** 2) / 2), abs=1e-5)


def test_orbit_mmd_uses_raw_vectors():
    x, y = [np.array([3.0, 0.0])], [np.array([0.0, 0.0])]
    assert mmd2(x, y, sigma=1.0, is_hist=False) == pytest.approx(2 - 2 * math.exp(-(1.5**2) / 2))


def test_gaussian_emd_matches_scipy_wasserstein():
    from scipy.stats import wasserstein_distance

    rng = np.random.default_rng(0)
    x, y = rng.random(10), rng.random(10)
    w = wasserstein_distance(np.arange(10) / 4, np.arange(10) / 4, x / x.sum(), y / y.sum())
    got = mmd2([x], [y], sigma=0.5, kernel="gaussian_emd", scaling=4.0)
    assert got == pytest.approx(2 - 2 * math.exp(-(w**2) / (2 * 0.25)), rel=1e-4)


def test_k4_clustering_in_last_bin_and_spectral_pmf():
    h = clustering_hist(nx.complete_graph(4))
    assert h[-1] == 4 and h[:-1].sum() == 0
    s = spectral_hist(nx.complete_graph(4))
    assert s.sum() == pytest.approx(1.0) and s[0] == pytest.approx(0.25)


def test_orbit_counts_k4_and_star():
    k4 = orbit_counts(nx.to_numpy_array(nx.complete_graph(4)))
    expect = np.zeros(15, dtype=int)
    expect[[0, 3, 14]] = [3, 3, 1]
    assert (k4 == expect).all()
    star = orbit_counts(nx.to_numpy_array(nx.star_graph(3)))  # node 0 is the centre
    assert star[0, 0] == 3 and star[0, 2] == 3 and star[0, 7] == 1 and star[0].sum() == 7
    assert (star[1] == np.eye(15, dtype=int)[0] + 2 * np.eye(15, dtype=int)[1] + np.eye(15, dtype=int)[6]).all()


def test_orbit_counts_paw_diamond_cycle_path():
    paw = nx.Graph([(0, 1), (1, 2), (0, 2), (2, 3)])  # triangle 0-1-2 with tail 2-3
    o = orbit_counts(nx.to_numpy_array(paw, nodelist=range(4)))
    assert o[3, 9] == 1 and o[0, 10] == 1 and o[1, 10] == 1 and o[2, 11] == 1
    diamond = nx.Graph([(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)])
    o = orbit_counts(nx.to_numpy_array(diamond, nodelist=range(4)))
    assert o[1, 12] == 1 and o[3, 12] == 1 and o[0, 13] == 1 and o[2, 13] == 1
    assert (orbit_counts(nx.to_numpy_array(nx.cycle_graph(4)))[:, 8] == 1).all()
    p4 = orbit_counts(nx.to_numpy_array(nx.path_graph(4)))
    assert p4[0, 4] == 1 and p4[1, 5] == 1 and p4[:, 6:].sum() == 0
    assert graph_orbit_vector(nx.complete_graph(4))[14] == 1.0


def test_orbit_counts_agree_with_orca():
    """Cross-check with ORCA (PyPI ``orca-graphlets``, ``orca_nodes``) on random graphs."""
    orca = pytest.importorskip("orca")
    for seed in range(4):
        g = nx.gnp_random_graph(11, 0.45, seed=seed)
        ref = orca.orca_nodes(np.array(list(g.edges())), 11)
        assert np.array_equal(orbit_counts(nx.to_numpy_array(g)), ref)


def test_planar_validity():
    assert all(planar_valid(g) for g in planar_graphs(2, 0))
    assert not planar_valid(nx.complete_graph(5))
    assert not planar_valid(nx.disjoint_union(nx.cycle_graph(3), nx.cycle_graph(3)))  # not connected


def test_vun_duplicates_and_training_copies():
    a, b, c = nx.path_graph(4), nx.cycle_graph(4), nx.star_graph(3)
    relabelled = nx.relabel_nodes(nx.path_graph(4), {0: 3, 1: 2, 2: 1, 3: 0})
    out = vun([a, relabelled, b, c], train=[c])
    assert out["unique"] == pytest.approx(3 / 4)  # the relabelled path is a duplicate
    assert out["novel"] == pytest.approx(3 / 4)  # the star is a training copy
    assert out["un"] == pytest.approx(2 / 4) and out["vun"] is None
    out = vun([a, b, nx.complete_graph(5)], train=[], validity=planar_valid)
    assert out["valid"] == pytest.approx(2 / 3) and out["vun"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        vun([], [])
