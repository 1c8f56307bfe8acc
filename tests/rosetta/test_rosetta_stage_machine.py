"""Long-horizon stage machine (official build_actprim_funcs), run in the sandbox like any generated code."""

import numpy as np
import pytest

from iclr26.core.sandbox import SandboxServer
from iclr26.rosetta.extract import assemble
from iclr26.rosetta.stage_machine import build_stage_machine, extract_target_actions

# two stages: pick up near a target (stage 0), place at another (stage 1); r_stage is read from the info
STAGES = {
    "compute_target_position_stage0": "def compute_target_position_stage0(prev_info, cur_info):\n"
    "    return cur_info['t0'], None",
    "compute_target_pos_reward_stage0": "def compute_target_pos_reward_stage0(pos1, pos2, t1, t2):\n"
    "    return -np.minimum(np.linalg.norm(pos1 - t1, axis=1), 1.0)",
    "stage0_success": "def stage0_success(info):\n    return info['s0']",
    "compute_target_position_stage1": "def compute_target_position_stage1(prev_info, cur_info):\n"
    "    return cur_info['t1'], None",
    "compute_target_pos_reward_stage1": "def compute_target_pos_reward_stage1(pos1, pos2, t1, t2):\n"
    "    return -np.minimum(np.linalg.norm(pos1 - t1, axis=1), 1.0)",
    "stage1_success": "def stage1_success(info):\n    return info['s1']",
}


def _server(afford="scaled"):
    funcs = build_stage_machine(STAGES, [0, 1], afford=afford)
    src, _ = assemble(funcs)
    return SandboxServer(src)


def _info(s0, s1, n=3):
    return {"t0": np.zeros((n, 3)), "t1": np.ones((n, 3)), "s0": np.array(s0), "s1": np.array(s1)}


def _action(prim, p1):
    a = np.zeros((len(prim), 9))
    a[np.arange(len(prim)), prim] = 1.0
    a[:, 3:6] = p1
    return a


def test_afford_values_and_stage_advance():
    with _server() as srv:
        info = _info([False, False, True], [False, False, False])
        # env 0: wrong primitive (place in the pick stage) -> afford 0; env 1: right primitive on target (r = 0)
        # -> 5; env 2: right primitive, r = -1 (far), stage success -> 0 + 10 and the stage advances
        a = _action([1, 0, 0], np.array([[0, 0, 0], [0, 0, 0], [5, 5, 5]], float))
        res = srv.call("skill_reward", info, info, a, np.array([0, 0, 0]))
        assert res.ok, res.message
        reward, stage = res.value
        np.testing.assert_allclose(reward, [0.0, 5.0, 10.0])
        np.testing.assert_array_equal(stage, [0, 0, 1])


def test_success_only_at_the_last_stage():
    with _server() as srv:
        info = _info([True, True], [True, True], n=2)
        ev = srv.call("evaluate", info, np.array([0, 1])).value
        np.testing.assert_array_equal(ev["success"], [False, True])
        np.testing.assert_array_equal(ev["stage0_success"], [True, True])
        # stage 1 (last): its own targets; right primitive half-way (r = -0.5) -> (1 - 0.5) * 5
        a = _action([1, 1], np.array([[1, 1, 0.5], [1, 1, 1]], float))
        r, st = srv.call("skill_reward", info, _info([False, False], [False, False], n=2), a, np.array([1, 1])).value
        np.testing.assert_allclose(r, [2.5, 5.0])
        np.testing.assert_array_equal(st, [1, 1])


def test_penalised_afford_form_flag():
    with _server("penalised") as srv:
        info = _info([False, False], [False, False], n=2)
        a = _action([1, 0], np.zeros((2, 3)))
        r, _ = srv.call("skill_reward", info, info, a, np.array([0, 0])).value
        np.testing.assert_allclose(r, [-1.0, 0.0])  # wrong primitive -1; right one r (x1 at a non-last stage)


def test_target_actions_from_plan_and_bad_input():
    plan = 'Stage 0: grab\n- Stage template: "pick up"\nStage 1: drop\n- Stage template: "place"\n'
    assert extract_target_actions(plan) == [0, 1]
    with pytest.raises(ValueError, match="unknown stage template"):
        extract_target_actions('Stage 0: x\n- Stage template: "throw"\n')
    with pytest.raises(ValueError, match="missing generated function"):
        build_stage_machine({k: v for k, v in STAGES.items() if k != "stage1_success"}, [0, 1])
    with pytest.raises(ValueError, match="target actions"):
        build_stage_machine(STAGES, [0])
