"""Motion-token kinematics against the official tokenizer's: the state keeps the velocity vector, so the speed
a step starts from is the norm of the previous step's v + a dt. Worked by hand: start at x = 0, speed 2, heading
0; a full brake (a = -10, dt = 0.5) gives v' = -3 and x = 0.5 * (2 - 3) / 2 = -0.25; then constant velocity:
official speed |-3| = 3, x = -0.25 + 0.5 * 3 = +1.25; signed v = -3, x = -0.25 - 1.5 = -1.75."""

import numpy as np
import pytest

from iclr26.infgen.config import config_for
from iclr26.infgen.tokenizer import MotionTokenizer

BRAKE = 0 * 33 + 16  # a = -10, omega = 0 (33 bins)


def _roll(mt, actions, state=(0.0, 0.0, 0.0, 2.0)):
    s = np.array([state])
    for a in actions:
        s = mt.step(s, np.array([a]))
    return s[0]


def test_brake_then_constant_velocity_official_norm():
    mt = MotionTokenizer()
    assert mt.carry_speed == "norm" and mt.values(BRAKE) == (-10.0, 0.0)
    after_brake = _roll(mt, [BRAKE])
    np.testing.assert_allclose(after_brake, [-0.25, 0.0, 0.0, 3.0])
    np.testing.assert_allclose(_roll(mt, [BRAKE, mt.centre]), [1.25, 0.0, 0.0, 3.0])


def test_brake_then_constant_velocity_signed():
    mt = MotionTokenizer(carry_speed="signed")
    np.testing.assert_allclose(_roll(mt, [BRAKE, mt.centre]), [-1.75, 0.0, 0.0, -3.0])


def test_three_steps_with_turns_keep_heading_and_norm():
    """Multi-step, turning: the heading is psi + omega dt whatever the speed's sign; the carried speed is |v'|."""
    mt = MotionTokenizer()
    turn_brake = 0 * 33 + 32  # a = -10, omega = +pi/2
    s = _roll(mt, [turn_brake, turn_brake, mt.centre], state=(0.0, 0.0, 0.0, 1.0))
    # step 1: v' = -4, psi' = pi/4; carried 4. step 2: v'' = 4 - 5 = -1, psi = pi/2; carried 1. step 3: v = 1.
    assert s[3] == pytest.approx(1.0) and s[2] == pytest.approx(np.pi / 2)
    x1 = 0.5 * (1 - 4) / 2 * np.cos(np.pi / 8)
    y1 = 0.5 * (1 - 4) / 2 * np.sin(np.pi / 8)
    x2 = x1 + 0.5 * (4 - 1) / 2 * np.cos(3 * np.pi / 8)
    y2 = y1 + 0.5 * (4 - 1) / 2 * np.sin(3 * np.pi / 8)
    np.testing.assert_allclose(s[:2], [x2 + 0.0, y2 + 0.5 * 1.0], atol=1e-12)


def test_config_default_is_the_official_kinematics():
    assert config_for("small").motion.carry_speed == "norm"
    with pytest.raises(ValueError):
        MotionTokenizer(carry_speed="abs")
