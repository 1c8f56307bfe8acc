"""Graph-constrained R@K / mR@K / F@K on hand-built graphs, and the representation diagnostics."""

import numpy as np
import pytest

from iclr26.apt.names import load_table
from iclr26.apt.sgg_metrics import (
    ImageGraph,
    discrete_mi,
    f_at_k,
    linear_cka,
    mean_recall_at_k,
    mi_proxy,
    pca_dims,
    per_predicate_recall,
    recall_at_k,
    silhouette,
)


def _img1():
    # 3 ordered pairs, predicates 1..3 (column 0 = background)
    pairs = np.array([[0, 1], [1, 0], [0, 2]])
    scores = np.array(
        [
            [0.1, 0.6, 0.3, 0.0],  # (0,1): best predicate 1 (0.6), second 2 (0.3)
            [0.5, 0.0, 0.1, 0.4],  # (1,0): background largest; best non-bg predicate 3 (0.4)
            [0.9, 0.05, 0.05, 0.0],  # (0,2): best non-bg 1 or 2 tie at 0.05 -> argmax picks 1
        ]
    )
    gt = np.array([[0, 1, 2], [1, 0, 3], [0, 2, 1]])
    return ImageGraph(pairs, scores, gt)


def _img2():
    pairs = np.array([[0, 1], [1, 0]])
    scores = np.array([[0.0, 0.2, 0.8, 0.0], [0.0, 0.7, 0.3, 0.0]])
    gt = np.array([[0, 1, 2]])
    return ImageGraph(pairs, scores, gt)


def test_graph_constrained_recall_hand_values():
    img = _img1()
    # ranking by best non-bg score: (0,1,p1) 0.6 > (1,0,p3) 0.4 > (0,2,p1) 0.05
    assert recall_at_k([img], 1) == pytest.approx(0.0)  # (0,1,1) is not GT (GT says 2)
    assert recall_at_k([img], 2) == pytest.approx(100 / 3)  # (1,0,3) hit; background never outranks it
    assert recall_at_k([img], 3) == pytest.approx(200 / 3)  # (0,2,1) hit
    # one predicate per pair: (0,1,2) can never be recalled under the graph constraint
    assert recall_at_k([img], 50) == pytest.approx(200 / 3)
    assert recall_at_k([img], 50, graph_constraint=False) == pytest.approx(100.0)
    # without the constraint, (0,1,2) at 0.3 ranks 3rd: top-2 = (0,1,1) 0.6, (1,0,3) 0.4
    assert recall_at_k([img], 3, graph_constraint=False) == pytest.approx(200 / 3)


def test_recall_averages_over_images():
    assert recall_at_k([_img1(), _img2()], 1) == pytest.approx((0.0 + 100.0) / 2)


def test_mean_recall_averages_per_class_over_images_containing_it():
    imgs = [_img1(), _img2()]
    per = per_predicate_recall(imgs, 3)
    # predicate 1: only img1 (hit) -> 100; predicate 2: img1 miss (0), img2 hit (100) -> 50; predicate 3: 100
    assert per == {1: pytest.approx(100.0), 2: pytest.approx(50.0), 3: pytest.approx(100.0)}
    assert mean_recall_at_k(imgs, 3) == pytest.approx(250 / 3)
    assert mean_recall_at_k(imgs, 3, classes=[2, 3]) == pytest.approx(75.0)


def test_f_is_the_true_harmonic_mean():
    assert f_at_k(60.0, 20.0) == pytest.approx(30.0)
    assert f_at_k(36.5, 18.2) == pytest.approx(24.29, abs=0.01)  # the HQSG+APT SGDet row recomputed
    assert f_at_k(0.0, 0.0) == 0.0


def test_bad_graphs_raise():
    with pytest.raises(ValueError, match=r"\(P, 2\)"):
        ImageGraph(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((0, 3)))
    with pytest.raises(ValueError, match="1 \\+ R"):
        ImageGraph(np.zeros((2, 2)), np.zeros((3, 3)), np.zeros((0, 3)))
    with pytest.raises(ValueError, match="predicates"):
        ImageGraph(np.zeros((1, 2)), np.zeros((1, 3)), np.array([[0, 1, 0]]))


def test_discrete_mi_hand_cases():
    a = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    assert discrete_mi(a, a) == pytest.approx(2.0)
    assert discrete_mi(a, a // 2) == pytest.approx(1.0)  # a determines one bit
    assert discrete_mi(a, np.array([0, 1] * 4)) == pytest.approx(0.0)  # independent of a
    assert discrete_mi(np.zeros(8), a) == pytest.approx(0.0)


def test_mi_proxy_separable_clusters():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2, 3], 25)
    x = np.eye(4)[y] * 10 + rng.normal(0, 0.1, (100, 4))
    assert mi_proxy(x, y, 4) == pytest.approx(2.0, abs=1e-6)
    assert mi_proxy(np.ones((100, 4)), y, 4) == pytest.approx(0.0, abs=1e-9)  # one point: no information


def test_pca_cka_silhouette():
    rng = np.random.default_rng(0)
    x = np.zeros((200, 5))
    x[:, 0], x[:, 1] = rng.normal(0, 3, 200), rng.normal(0, 1, 200)
    assert pca_dims(x, 0.8) == 1 and pca_dims(x, 0.95) == 2
    y = rng.normal(size=(50, 4))
    q, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    assert linear_cka(y, y) == pytest.approx(1.0)
    assert linear_cka(y, 3.0 * y @ q) == pytest.approx(1.0)  # invariant to rotation and scale
    assert linear_cka(y, rng.normal(size=(50, 4))) < 0.5
    lab = np.repeat([0, 1], 20)
    sep = np.concatenate([rng.normal(0, 0.1, (20, 2)), rng.normal(5, 0.1, (20, 2))])
    assert silhouette(sep, lab) > 0.9
    same = np.tile(load_table()[0][:1], (60, 1))  # frozen "person" rows: one point (sklearn alone gives noise)
    assert silhouette(same, rng.integers(0, 4, 60)) == 0.0
    with pytest.raises(ValueError, match="two"):
        silhouette(sep, np.zeros(40))
