"""SandboxServer(fresh="draft"): one child per server, so a draft's calls share its state (the cost of a fork
and of replaying the definitions per call is gone), while another server (another draft) starts clean; the
default fresh="call" keeps every call apart. rosetta's PPO reward uses one child per draft."""

import numpy as np
import pytest

from iclr26.core.sandbox import SandboxServer

COUNTER = "state = [0]\ndef bump():\n    state[0] += 1\n    return state[0]\n"


def test_draft_calls_share_state_and_drafts_do_not():
    with SandboxServer(COUNTER, fresh="draft") as a, SandboxServer(COUNTER, fresh="draft") as b:
        assert [a.call("bump").value for _ in range(3)] == [1, 2, 3]
        assert b.call("bump").value == 1


def test_call_mode_starts_every_call_from_the_definitions():
    with SandboxServer(COUNTER) as s:
        assert [s.call("bump").value for _ in range(3)] == [1, 1, 1]


def test_fresh_is_checked():
    with pytest.raises(ValueError, match="fresh"):
        SandboxServer(COUNTER, fresh="never")


def test_rosetta_reward_keeps_one_child_per_draft():
    from iclr26.rosetta.env import TabletopLite
    from iclr26.rosetta.smoke import SandboxedReward

    funcs = {
        "evaluate": "def evaluate(state):\n    return {'success': state['tcp_pos'][:, 0] > 1e9}",
        "compute_dense_reward": (
            "def compute_dense_reward(state, action, info):\n    return 0 * state['tcp_pos'][:, 0] + 1"
        ),
    }
    env = TabletopLite(3, seed=0)
    with SandboxedReward(funcs) as r:
        assert r.server.fresh == "draft"
        reward, success = r.step(env.state(), np.zeros((3, 4)))
        assert reward.tolist() == [1.0, 1.0, 1.0] and not success.any()
