"""Plan-Path: reward constants on hand-made grids, seeds, tool programs, plan actions, text parsing."""

import numpy as np
import pytest

from iclr26.at_grpo.plan_path import (
    EOS,
    TOK,
    PlanPathBatch,
    PlanPathConfig,
    env_seeds,
    grid_from_layout,
    make_grid,
    parse_text_response,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CFG = PlanPathConfig(size=5)
# agent A at (2, 0), goal G at (2, 4): Manhattan 4, shortest path 4 along row 2
LAYOUT = ["#....", ".#...", "A...G", ".....", "....."]


def batch(n=1, layout=LAYOUT, cfg=CFG):
    g = grid_from_layout(layout)
    return PlanPathBatch(cfg, [g] * n, max_turns=4)


def plan(*moves):
    ids = [TOK[m] for m in moves] + [EOS] * (4 - len(moves))
    return np.array([ids])


def test_valid_step_towards_goal_reward():
    env = batch()
    d = 4
    r = env.step("plan", plan("R"))
    assert r[0] == pytest.approx(-0.01 + (0.99 * (-(d - 1)) + d))
    assert env.team_reward()[0] == pytest.approx(r[0])


def test_invalid_moves_reward_and_agent_stays():
    env = batch()
    d = 4
    start = int(env.pos[0])
    r = env.step("plan", plan("L"))  # out of bounds
    assert r[0] == pytest.approx(-0.10 + (0.99 * (-d) + d))
    assert int(env.pos[0]) == start
    r = env.step("plan", plan("U"))  # into the wall at (1, 0)? no: (1,0) is free; the wall is at (0,0) after it
    assert int(env.pos[0]) == start - 5
    r = env.step("plan", plan("U"))  # (0, 0) is a wall
    assert r[0] == pytest.approx(-0.10 + (0.99 * (-5) + 5))


def test_optimal_arrival_bonus_and_stop_at_goal():
    env = batch()
    r1 = env.step("plan", plan("R", "R", "R"))
    r2 = env.step("plan", plan("R", "R", "R"))  # arrives after the first move; the list stops there
    shaping = 0.99 * 0 + 1
    assert r2[0] == pytest.approx(-0.01 + shaping + 1.0 + 0.5)
    assert env.done()[0] and env.success()[0]
    assert int(env.steps[0]) == 4
    assert r1[0] == pytest.approx(sum(-0.01 + 0.99 * -(d - 1) + d for d in (4, 3, 2)))
    # done branches no longer move and get 0
    assert env.step("plan", plan("L"))[0] == 0.0


def test_non_optimal_arrival_has_no_bonus():
    env = batch()
    env.step("plan", plan("L"))  # wasted (invalid) move counts as a step
    env.step("plan", plan("R", "R", "R"))
    r = env.step("plan", plan("R"))
    assert r[0] == pytest.approx(-0.01 + 1 + 1.0)


def test_bad_plan_action_gets_minus_two_and_no_move():
    env = batch()
    for toks in ([EOS, EOS, EOS, EOS], [TOK["BFS"], EOS, EOS, EOS], [TOK["R"], TOK["H1"], EOS, EOS]):
        r = env.step("plan", np.array([toks]))
        assert r[0] == -2.0
        assert int(env.pos[0]) == 10 and int(env.steps[0]) == 0


def test_tool_bfs_program_runs_on_a_copy():
    env = batch()
    prog = np.array([[TOK["BFS"], TOK["2"], TOK["4"], TOK["H3"]]])
    r = env.step("tool", prog)
    assert env.tool_list[0].tolist() == [3, 3, 3]  # R R R
    assert r[0] == pytest.approx(sum(-0.01 + 0.99 * -(d - 1) + d for d in (4, 3, 2)))
    assert int(env.pos[0]) == 10 and int(env.steps[0]) == 0  # real state untouched
    assert env.team_reward()[0] == 0.0


def test_tool_errors():
    env = batch()
    malformed = np.array([[TOK["R"], TOK["2"], TOK["4"], TOK["H3"]]])
    assert env.step("tool", malformed)[0] == -2.0
    outside = np.array([[TOK["BFS"], TOK["7"], TOK["4"], TOK["H3"]]])  # row 7 on a 5x5 grid
    assert env.step("tool", outside)[0] == -1.0
    wall = np.array([[TOK["BFS"], TOK["0"], TOK["0"], TOK["H3"]]])  # target is a wall: empty list
    assert env.step("tool", wall)[0] == 0.0
    assert (env.tool_list[0] == -1).all()


def test_bfs_horizon_and_detour():
    layout = ["A#G..", ".#...", ".#...", ".....", "....."]
    env = batch(layout=layout)
    env.step("tool", np.array([[TOK["BFS"], TOK["0"], TOK["2"], TOK["H2"]]]))
    assert env.tool_list[0].tolist() == [1, 1, -1]  # D D (around the wall), horizon 2
    assert env.grids[0].shortest == 8  # down 3, right 2, up 3


def test_seeds_disjoint_and_deterministic():
    cfg = PlanPathConfig(size=6)
    tr = env_seeds(cfg, "train", range(100))
    te = env_seeds(cfg, "test", range(100))
    assert not set(tr) & set(te)
    g1, g2 = make_grid(te[3], 6), make_grid(te[3], 6)
    assert (g1.walls == g2.walls).all() and g1.start == g2.start and g1.goal == g2.goal
    for s in tr[:30]:
        g = make_grid(s, 6)
        assert g.walls.sum() == round(0.22 * 36) and g.start != g.goal and 1 <= g.shortest < 36
    with pytest.raises(ValueError):
        PlanPathConfig(test_seed_offset=5)


def test_parse_text_response():
    assert parse_text_response("tool", "**Actions List**: BFS 2 3 3") == [TOK["BFS"], TOK["2"], TOK["3"], TOK["H3"]]
    assert parse_text_response("plan", "I go right #### [R, R, U]") == [3, 3, 0, EOS]
    assert parse_text_response("plan", "no answer") == []
    env = batch(2)
    r = env.step("plan", ["#### [R]", "garbage"])
    assert r[1] == -2.0 and r[0] > 0


def test_select_copies_branches():
    env = batch(3)
    env.step("plan", np.array([[TOK["R"], EOS, EOS, EOS], [TOK["U"], EOS, EOS, EOS], [TOK["L"], EOS, EOS, EOS]]))
    keys = env.state_key()
    assert len(set(keys)) == 3
    env.select(np.array([1, 1, 1]))
    assert env.state_key() == [keys[1]] * 3
