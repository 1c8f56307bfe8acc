"""A hostile reward (patched ``np.asarray``, huge integers, strings) gives a handled failure, never an exception."""

import numpy as np
import pytest

from iclr26.rosetta.env import TabletopLite
from iclr26.rosetta.smoke import RewardError, SandboxedReward, SmokeRunner, _short, check_step

N = 4


@pytest.mark.parametrize(
    "value,kind,needle",
    [
        (([10**400] * N, [True] * N), "BadResult", "OverflowError"),
        (([10**5000] * N, [True] * N), "BadResult", "OverflowError"),  # str() of it raises: never formatted
        (([0.0] * N, [10**400] * N), "BadResult", "not boolean or numeric"),
        ((["1.0", "x", "2", "3"], [True] * N), "BadResult", "not numeric"),
        (([[1.0], [1.0, 2.0], [], 3.0], [True] * N), "BadResult", "not numeric"),
        (([0.0] * N, ["yes"] * N), "BadResult", "not boolean or numeric"),
        (([0.0] * N, {"a": 1}), "BadResult", "not boolean or numeric"),
        (({"r": 1}, [True] * N), "BadResult", "not numeric"),
        (([0.0] * (N + 1), [True] * N), "BadShape", "reward has shape"),
        (([float("nan")] * N, [True] * N), "NonFinite", "NaN"),
        ((1, 2, 3), "BadResult", "unexpected value"),
    ],
)
def test_check_step_turns_hostile_values_into_failures(value, kind, needle):
    res = check_step(value, N)
    assert res is not None and not res.ok and res.kind == kind and needle in res.message, res
    assert len(res.message) < 400


def test_check_step_accepts_plain_rewards_and_flags():
    assert check_step((np.zeros(N), np.ones(N, bool)), N) is None
    assert check_step(([1, 2, 3, 4], [0, 1, 0, 1]), N) is None


def test_short_never_raises_on_exception_text_it_cannot_print():
    assert _short(ValueError(10**5000)) == "ValueError"
    assert _short(OverflowError("x" * 1000)) == "OverflowError: " + "x" * 200


PATCHING_REWARD = {
    "evaluate": "def evaluate(state):\n    return {'success': np.zeros(4, dtype=bool)}",
    "compute_dense_reward": (
        "def compute_dense_reward(state, action, info):\n"
        "    np.asarray = lambda *a, **k: [10 ** 400] * 4\n"
        "    return 0.0"
    ),
}


def test_a_reward_that_patches_np_asarray_is_a_failed_reward_not_a_crash():
    env = TabletopLite(N, seed=0)
    with SandboxedReward(PATCHING_REWARD) as reward:
        out = reward.step(env.state(), np.zeros((N, 4)))
        assert out.kind == "BadResult" and "OverflowError" in out.message
        with pytest.raises(RewardError, match="BadResult"):
            reward(env.state(), np.zeros((N, 4)))
    with SmokeRunner(steps=2) as runner:
        res = runner.test(PATCHING_REWARD)
    assert not res.ok and res.kind == "BadResult"
