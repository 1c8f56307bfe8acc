"""TabletopLite physics on hand-made states, success checks, the SphereAndBins default reward, intents."""

import numpy as np
import pytest

from iclr26.rosetta.env import EnvConfig, TabletopLite, TabletopPrimitives, in_bin, sphere_and_bins_reward
from iclr26.rosetta.intent import SLOW_CAP, Intent, check_intent, make_preferences, rollout_states


def _env():
    env = TabletopLite(2, EnvConfig(), seed=0)
    env.tcp[:] = [0.0, 0.0, 0.1]
    env.obj[:, 0] = [0.0, 0.0, 0.02]
    env.obj[:, 1] = [-0.1, 0.1, 0.02]
    env.bins[:, 0] = [0.15, -0.12, 0.0]
    env.bins[:, 1] = [0.15, 0.12, 0.0]
    return env


def test_grasp_only_when_close_and_closed():
    env = _env()
    env.step(np.array([[0, 0, -1, 1], [0, 0, -0.2, 1]], float))  # env0 reaches z=0.05 (far), env1 z=0.09
    assert (env.held == -1).all()
    env.step(np.array([[0, 0, -1, 1], [0, 0, 0, -1]], float))  # env0 at z=0.02 with a closed grip: grasp
    assert env.held.tolist() == [0, -1]
    env.step(np.array([[0, 0, 1, 1], [0, 0, 0, -1]], float))  # the held object moves with the gripper
    assert env.obj[0, 0, 2] == pytest.approx(0.07) and env.obj[1, 0, 2] == pytest.approx(0.02)


def test_release_drops_to_table_and_counts_in_bin():
    env = _env()
    env.held[0] = 0
    env.tcp[0] = [0.15, 0.12, 0.2]
    env.obj[0, 0] = env.tcp[0]
    env.step(np.array([[0, 0, 0, 1], [0, 0, 0, -1]], float))
    s = env.state()
    assert not in_bin(s["red_cube_pos"], s["red_cube_grasped"], s["bin2_pos"], 0.05)[0]  # still held
    env.step(np.array([[0, 0, 0, -1], [0, 0, 0, -1]], float))
    s = env.state()
    assert s["red_cube_pos"][0, 2] == pytest.approx(0.02) and not s["red_cube_grasped"][0]
    assert in_bin(s["red_cube_pos"], s["red_cube_grasped"], s["bin2_pos"], 0.05).tolist() == [True, False]
    assert env.evaluate()["red_cube_in_bin2"].tolist() == [True, False]


def test_velocity_limit_and_bad_action_shape():
    env = _env()
    env.step(np.array([[5, 0, 0, -1], [0, 0, 0, -1]], float))
    assert np.linalg.norm(env.state()["tcp_vel"][0]) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros((2, 3)))
    with pytest.raises(ValueError):
        TabletopLite(2, EnvConfig(n_objects=4))


def test_sphere_and_bins_default_reward_formula():
    env = _env()
    s = env.state()
    d = np.linalg.norm(s["tcp_pos"][0] - s["red_cube_pos"][0])
    r = sphere_and_bins_reward(s, "red_cube", "bin1")
    assert r[0] == pytest.approx(2 * (1 - np.tanh(5 * d)))
    s["red_cube_grasped"][:] = True
    s["red_cube_pos"][0] = s["bin1_pos"][0] + [0, 0, 0.04]
    assert sphere_and_bins_reward(s, "red_cube", "bin1")[0] == pytest.approx(5.0)  # 4 + (1 - tanh 0)
    s["red_cube_grasped"][:] = False
    s["red_cube_pos"][0] = s["bin1_pos"][0] + [0.01, 0, 0.02]
    assert sphere_and_bins_reward(s, "red_cube", "bin1")[0] == 13.0


def test_checker_components_on_scripted_demos():
    it = Intent((("red_cube", "bin1"), ("blue_cube", "bin1")), ordered=True, home=False)
    st, _ = rollout_states(it, 2, 3, 0)
    assert check_intent(it, st)["success"].all()
    rev = Intent((("blue_cube", "bin1"), ("red_cube", "bin1")), ordered=True)
    res = check_intent(rev, st)
    assert not res["order"].any() and res["satisfaction"] == pytest.approx(2 / 3)
    slow = Intent((("red_cube", "bin2"),), speed_cap=SLOW_CAP)
    fast, _ = rollout_states(slow, 2, 2, 1, speed=1.0)
    gentle, _ = rollout_states(slow, 2, 2, 1, speed=0.5)
    assert not check_intent(slow, fast)["speed"].any() and check_intent(slow, gentle)["success"].all()


def test_preference_set_covers_phenomena():
    prefs = make_preferences(100, seed=0)
    kinds = {p.kind for p in prefs}
    assert {"not_that_one", "other_bin", "slower", "return_home", "synonym", "ordered", "reverse"} <= kinds
    assert len([p for p in prefs if p.chain is None]) == 100
    assert make_preferences(20, seed=4) == make_preferences(20, seed=4)


def test_primitive_env_pick_place_push():
    env = TabletopPrimitives(1, EnvConfig(), seed=0)
    s = env.reset()
    obj = s["red_cube_pos"][0]
    pick = np.r_[1, 0, 0, obj, 0, 0, 0][None]
    env.step(pick)
    assert env.base.held[0] == 0
    place = np.r_[0, 1, 0, [0.15, -0.12, 0.3], 0, 0, 0][None]
    s = env.step(place)
    assert in_bin(s["red_cube_pos"], s["red_cube_grasped"], s["bin1_pos"], 0.05)[0]
    assert s["red_cube_pos"][0, 2] == pytest.approx(0.02) and env.base.held[0] == -1
    blue = s["blue_cube_pos"][0]
    s = env.step(np.r_[0, 0, 1, blue, [0.1, 0.1, 0.0]][None])
    np.testing.assert_allclose(s["blue_cube_pos"][0], [0.1, 0.1, 0.02])
