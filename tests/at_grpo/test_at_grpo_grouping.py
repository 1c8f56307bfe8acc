"""AT-GRPO grouping, advantages, trajectory baseline, group filter and mixed reward, on hand-built rollouts."""

import numpy as np
import pytest
import torch

from iclr26.at_grpo.at_grpo import ATGRPOConfig, compute_advantages, group_filter, group_keys
from iclr26.at_grpo.rollout import Rollout, SampleChunk, best_branch, mixed_reward
from iclr26.core.grpo import contiguous_group_keys, group_advantages

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def chunk(agent, turn, env, branch, reward):
    m = len(env)
    return SampleChunk(
        agent=agent,
        turn=turn,
        env=np.asarray(env),
        branch=np.asarray(branch),
        obs=torch.zeros(m, 3),
        tokens=torch.zeros(m, 4, dtype=torch.long),
        mask=torch.ones(m, 4),
        logp=torch.zeros(m, 4),
        local=np.asarray(reward, float),
        team=np.zeros(m),
        reward=np.asarray(reward, float),
    )


def tree_rollout_by_hand():
    """2 envs, K = 3, agents tool -> plan, env 0 runs 2 turns, env 1 stops after turn 0."""
    K = 3
    chunks = [
        chunk("tool", 0, [0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2], [1, 2, 3, 0, 0, 0]),
        chunk("plan", 0, [0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2], [5, 5, 8, -2, 1, 4]),
        chunk("tool", 1, [0, 0, 0], [0, 1, 2], [2, 2, 2]),
        chunk("plan", 1, [0, 0, 0], [0, 1, 2], [0, 10, 20]),
    ]
    return Rollout(chunks=chunks, n_envs=2, K=K)


def flat(batch):
    return np.concatenate([a for a in batch.adv])


def test_at_keys_form_the_expected_groups():
    ro = tree_rollout_by_hand()
    env = np.concatenate([c.env for c in ro.chunks])
    agent = [c.agent for c in ro.chunks for _ in c.env]
    turn = np.concatenate([np.full(len(c.env), c.turn) for c in ro.chunks])
    keys = group_keys(env, agent, turn)
    groups = {}
    for k in keys:
        groups[k] = groups.get(k, 0) + 1
    assert groups == {
        (0, "tool", 0): 3,
        (1, "tool", 0): 3,
        (0, "plan", 0): 3,
        (1, "plan", 0): 3,
        (0, "tool", 1): 3,
        (0, "plan", 1): 3,
    }
    assert set(group_keys(env, agent, turn, ("env",))) == {(0,), (1,)}
    # the official tree-mode key (env // K, turn, agent) merges K neighbouring envs
    merged = group_keys(env, agent, turn, code_merge_k=3)
    assert set(merged) == {(0, 0, "tool"), (0, 0, "plan"), (0, 1, "tool"), (0, 1, "plan")}


def test_at_advantages_equal_hand_computed_values():
    b = compute_advantages(tree_rollout_by_hand(), ATGRPOConfig(K=3))
    eps = 1e-6
    # tool turn 0: env 0 rewards 1,2,3 -> mean 2, sample std 1; env 1 all equal -> 0
    np.testing.assert_allclose(b.adv[0], [-1 / (1 + eps), 0, 1 / (1 + eps), 0, 0, 0], atol=1e-12)
    # plan turn 0: env 0 (5,5,8): mean 6, std sqrt(3); env 1 (-2,1,4): mean 1, std 3
    s = np.sqrt(3.0)
    np.testing.assert_allclose(
        b.adv[1], [-1 / (s + eps), -1 / (s + eps), 2 / (s + eps), -3 / (3 + eps), 0, 3 / (3 + eps)], atol=1e-9
    )
    np.testing.assert_allclose(b.adv[2], [0, 0, 0])
    np.testing.assert_allclose(b.adv[3], [-10 / (10 + eps), 0, 10 / (10 + eps)], atol=1e-9)
    assert b.n_groups == 6 and b.n_kept == 18
    # every non-degenerate group sums to 0 with unit sample std
    for a in (b.adv[1][:3], b.adv[1][3:], b.adv[3]):
        assert abs(a.sum()) < 1e-9 and a.std(ddof=1) == pytest.approx(1.0, abs=1e-5)


def test_env_only_key_mixes_agents_and_turns():
    b = compute_advantages(tree_rollout_by_hand(), ATGRPOConfig(K=3, group_key=("env",)))
    r0 = np.array([1, 2, 3, 5, 5, 8, 2, 2, 2, 0, 10, 20], float)
    expect0 = (r0 - r0.mean()) / (r0.std(ddof=1) + 1e-6)
    got = flat(b)
    env = np.concatenate([c.env for c in tree_rollout_by_hand().chunks])
    np.testing.assert_allclose(got[env == 0], expect0, atol=1e-9)


def test_reduction_to_vanilla_grpo_with_one_agent_one_turn():
    rng = np.random.default_rng(0)
    E, K = 5, 8
    r = rng.normal(size=E * K)
    ro = Rollout(chunks=[chunk("plan", 0, np.repeat(np.arange(E), K), np.tile(np.arange(K), E), r)], n_envs=E, K=K)
    b = compute_advantages(ro, ATGRPOConfig(K=K))
    vanilla = group_advantages(torch.as_tensor(r), contiguous_group_keys(E * K, K)).numpy()
    assert np.array_equal(b.adv[0], vanilla)


def test_trajectory_grouping_all_turns_and_last_turn():
    # env 0, K = 2 independent trajectories; traj 0 has 2 turns, traj 1 one turn
    chunks = [
        chunk("tool", 0, [0, 0], [0, 1], [1.0, 0.0]),
        chunk("plan", 0, [0, 0], [0, 1], [2.0, 0.0]),
        chunk("tool", 1, [0], [0], [1.0]),
        chunk("plan", 1, [0], [0], [3.0]),
    ]
    ro = Rollout(chunks=chunks, n_envs=1, K=2)
    b = compute_advantages(ro, ATGRPOConfig(K=2, rollout_mode="no_tree"))
    # returns R0 = 7, R1 = 0 -> advantages +-(3.5 / (std + eps)) with sample std 4.95
    a = 3.5 / (np.std([7.0, 0.0], ddof=1) + 1e-6)
    np.testing.assert_allclose(flat(b), [a, -a, a, -a, a, a], atol=1e-9)
    b2 = compute_advantages(ro, ATGRPOConfig(K=2, rollout_mode="no_tree", traj_samples="last_turn"))
    # official _assign_consistent_uids (no_tree): keep the samples of the env's maximum turn over its K
    # trajectories: turn 1 of traj 0 only (traj 1 ended at turn 0 and contributes nothing); one group (env 0)
    kept = [(j, list(r)) for j, r in enumerate(b2.rows) if len(r)]
    assert kept == [(2, [0]), (3, [0])]
    r = np.array([1.0, 3.0])
    np.testing.assert_allclose(flat(b2), (r - r.mean()) / (r.std(ddof=1) + 1e-6), atol=1e-9)


def test_group_filter_modes():
    keys = [0] * 2 + [1] * 2 + [2] * 2 + [3] * 2 + [4] * 2
    r = np.array([5, 6, 0, 0, 1, 3, -4, 2, 9, 9], float)  # group means 5.5, 0, 2, -1, 9
    keep = group_filter(r, keys, "mean", 0.5)  # drop floor(2.5) = 2 lowest: groups 3 and 1
    assert keep.tolist() == [True, True, False, False, True, True, False, False, True, True]
    keep = group_filter(r, keys, "dapo")
    assert keep.tolist() == [True, True, False, False, True, True, True, True, False, False]
    # mean 3.25: |deviation| 3.25, 2.25, 1.25, 6.75 -> drop the 2 most deviating (10 and 0)
    keep = group_filter(np.array([0, 1, 2, 10.0]), [0] * 4, "uid", 0.5)
    assert keep.tolist() == [False, True, True, False]
    # std: Var_g / range_g^2 of each group's own rewards: 0.25 for every 2-sample group with a spread, 0 for
    # constant groups -> drop floor(0.4 * 5) = 2: the constant groups 1 and 4
    keep = group_filter(r, keys, "std", 0.4)
    assert keep.tolist() == [True, True, False, False, True, True, True, True, False, False]
    # each group's own range (official range_normalized_variance), not the batch range: (0, 5, 10) scores
    # (50/3)/100 = 1/6 and (0, 0, 1) scores (2/9)/1 = 2/9, so the first group goes (the batch range 10 would
    # score the second 0.0022 and drop it instead)
    r3 = np.array([0.0, 5.0, 10.0, 0.0, 0.0, 1.0])
    keep = group_filter(r3, [0] * 3 + [1] * 3, "std", 0.5)
    assert keep.tolist() == [False] * 3 + [True] * 3
    # mean: a group of one sample scores 0 (official code), so it can be dropped before a negative-mean group
    keep = group_filter(np.array([5.0, -1.0, -1.0]), [0, 1, 1], "mean", 0.5)
    assert keep.tolist() == [True, False, False]
    assert group_filter(r, keys, None).all()


def test_filter_runs_per_policy():
    # per-role: tool and plan samples are separate trainer batches, 50% of EACH policy's groups are dropped
    ro = tree_rollout_by_hand()
    sigma = {"tool": "tool", "plan": "plan"}
    b = compute_advantages(ro, ATGRPOConfig(K=3, filter_method="mean", filter_ratio=0.5), sigma)
    # tool groups: t0e0 mean 2, t0e1 0, t1e0 2 -> drop floor(1.5) = 1: t0e1; plan: p0e0 6, p0e1 1, p1e0 10 -> p0e1
    assert [r.tolist() for r in b.rows] == [[0, 1, 2], [0, 1, 2], [0, 1, 2], [0, 1, 2]]
    # shared policy: all 6 groups in one batch, drop 3 (see the next test)
    b1 = compute_advantages(ro, ATGRPOConfig(K=3, filter_method="mean", filter_ratio=0.5), {"tool": "s", "plan": "s"})
    assert [len(r) for r in b1.rows] == [0, 3, 3, 3]


def test_filter_is_applied_before_the_advantage():
    b = compute_advantages(tree_rollout_by_hand(), ATGRPOConfig(K=3, filter_method="mean", filter_ratio=0.5))
    # group means: tool0/e0 2, tool0/e1 0, plan0/e0 6, plan0/e1 1, tool1/e0 2, plan1/e0 10 -> drop the 3
    # lowest: tool0/e1, plan0/e1 and (tie at 2, first group wins the stable sort) tool0/e0
    assert [len(r) for r in b.rows] == [0, 3, 3, 3]
    assert b.n_groups == 3


def test_mixed_reward_and_best_branch():
    team, local = np.array([1.0, 2.0]), np.array([0.5, -1.0])
    np.testing.assert_allclose(mixed_reward(team, local, 0.0), local)
    np.testing.assert_allclose(mixed_reward(team, local, 1.0), team + local)  # the code's "local + env reward"
    big = mixed_reward(team, local, 1e6)
    assert np.argmax(big) == np.argmax(team)
    assert best_branch(np.array([1, 3, 3, 0, 2, 2, 2, 1]), 4).tolist() == [1, 0]
    assert best_branch(np.array([1, 3, 3, 0]), 4, greedy=False).tolist() == [0]


def test_config_validation():
    with pytest.raises(ValueError):
        ATGRPOConfig(group_key=("env", "role"))
    with pytest.raises(ValueError):
        ATGRPOConfig(filter_method="median")
    with pytest.raises(ValueError):
        ATGRPOConfig(rollout_mode="beam")


def test_mean_only_normalisation_diagnostic():
    b = compute_advantages(tree_rollout_by_hand(), ATGRPOConfig(K=3, normalize="mean"))
    np.testing.assert_allclose(b.adv[3], [-10, 0, 10])
    np.testing.assert_allclose(b.adv[1], [-1, -1, 2, -3, 0, 3])
    with pytest.raises(ValueError):
        ATGRPOConfig(normalize="std")
