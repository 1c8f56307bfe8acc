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
