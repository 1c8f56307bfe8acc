"""TinyTown and the metrics."""

import numpy as np
import pytest

from iclr26.infgen.metrics import collisions_per_step, headways, offroad_per_step, wasserstein1
from iclr26.infgen.world import TinyTown, TinyTownConfig, align_to_even_steps, cut_windows


@pytest.fixture(scope="module")
def run():
    town = TinyTown()
    return town, town.simulate(900, seed=11)


def test_no_collisions_no_offroad(run):
    _, scene = run
    assert scene.valid.sum() > 5000
    assert not collisions_per_step(scene.states, scene.valid, scene.size).any()
    assert not offroad_per_step(scene).any()


def test_entry_rate_matches_lambda(run):
    town, scene = run
    rate = len(town.entry_times) / (900 * 4)
    assert abs(rate - town.cfg.lambda_entry) / town.cfg.lambda_entry < 0.10


def test_deterministic_from_seed():
    town = TinyTown()
    a, b = town.simulate(40, seed=3), town.simulate(40, seed=3)
    assert np.array_equal(a.states, b.states) and np.array_equal(a.tl, b.tl)
    c = town.simulate(40, seed=4)
    assert a.states.shape != c.states.shape or not np.array_equal(a.states, c.states)


def test_windows_are_19_steps_and_agents_start_even(run):
    _, scene = run
    ws = cut_windows(scene)
    assert ws and all(w.T == 19 for w in ws)
    for w in ws[:30]:
        first = w.valid.argmax(0)
        assert np.all(first % 2 == 0)
        # contiguous presence
        for a in range(w.A):
            idx = np.flatnonzero(w.valid[:, a])
            assert np.all(np.diff(idx) == 1)
    assert align_to_even_steps(ws[0]).A == ws[0].A


def test_lights_cycle_protected_phases():
    town = TinyTown(TinyTownConfig())
    cyc = town.cfg.cycle
    for t in np.linspace(0, cyc, 200):
        s = town.light_states(t, 0.0)
        assert (s != 2).sum() <= 1  # at most one approach is not red


def test_headway_and_w1_hand_cases(run):
    _, scene = run
    h = headways(scene, steps=np.arange(0, 200))
    assert h.size > 0 and h.min() > 0  # no overlaps along lanes
    assert wasserstein1([0.0, 1.0], [0.0, 1.0]) == 0.0
    assert wasserstein1([0.0], [2.0]) == pytest.approx(2.0)
    assert wasserstein1([], [1.0]) == float("inf")


def test_cut_segments_work_is_linear_in_lane_length(monkeypatch):
    """Interpolation work (query points + polyline points, summed over np.interp calls) grows 10x from a 2 km
    to a 20 km lane (a per-piece interpolation over the whole lane grew 100x: 20 km took 0.14 s, 200 km 12.6 s)."""
    from iclr26.infgen import world

    work = []
    real = np.interp

    def counting(x, xp, fp, *a, **kw):
        work.append(np.size(x) + np.size(xp))
        return real(x, xp, fp, *a, **kw)

    monkeypatch.setattr(world.np, "interp", counting)

    def cost(metres):
        work.clear()
        xy = np.stack([np.linspace(0, metres, 2 * metres + 1), np.zeros(2 * metres + 1)], 1)
        pieces = world.cut_segments(xy, 10.0, 11)
        assert len(pieces) == metres // 10 and all(p.shape == (11, 2) for p in pieces)
        assert np.allclose(pieces[3][[0, -1], 0], [30.0, 40.0])
        return sum(work)

    assert 9.0 < cost(20_000) / cost(2_000) < 11.0


def test_nearest_lane_point_hand_cases_and_brute_force():
    from iclr26.infgen.metrics import nearest_lane_point
    from iclr26.infgen.world import build_map

    # lane 0 along y = 0 heading east, lane 1 along y = 3 heading west (points every 0.5 m)
    lanes = [np.array([[0.0, 0.0], [10.0, 0.0]]), np.array([[10.0, 3.0], [0.0, 3.0]])]
    m = build_map(lanes, [0, 0], [], bound=None, lane_half_width=1.75)
    q = np.array([[5.0, 2.0], [5.0, 2.0], [5.0, 2.0], [5.0, 2.0]])
    j, d = nearest_lane_point(m, q)
    assert np.allclose(d, 1.0) and np.allclose(m.dense_xy[j], [5.0, 3.0])
    j, d = nearest_lane_point(m, q, np.array([0.0, np.pi, np.pi / 2, 0.3]))
    assert d[0] == pytest.approx(2.0) and m.dense_lane[j[0]] == 0  # aligned with lane 0 only
    assert d[1] == pytest.approx(1.0) and m.dense_lane[j[1]] == 1
    assert d[2] == float("inf")  # perpendicular to both lanes: no aligned point
    assert d[3] == pytest.approx(2.0) and m.dense_lane[j[3]] == 0
    # the KD-tree search equals brute force on TinyTown, also far from the aligned lanes (k grows)
    town_map = TinyTown().map
    rng = np.random.default_rng(0)
    xy, psi = rng.uniform(-70, 70, (300, 2)), rng.uniform(-np.pi, np.pi, 300)
    brute = np.linalg.norm(xy[:, None] - town_map.dense_xy[None], axis=-1)
    bad = np.abs(((psi[:, None] - town_map.dense_heading[None]) + np.pi) % (2 * np.pi) - np.pi) >= np.pi / 2
    _, d_free = nearest_lane_point(town_map, xy)
    _, d_aligned = nearest_lane_point(town_map, xy, psi)
    assert np.allclose(d_free, brute.min(1)) and np.allclose(d_aligned, np.where(bad, np.inf, brute).min(1))
