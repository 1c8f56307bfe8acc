"""Tree-structured sampling, code-compat flags, routing of updates to role policies."""

import numpy as np
import pytest
import torch

from iclr26.at_grpo.at_grpo import ATGRPOConfig, ATGRPOTrainer, compute_advantages, shard, update_policies
from iclr26.at_grpo.plan_path import PlanPathBatch, PlanPathConfig, env_seeds
from iclr26.at_grpo.policy import Act, TinyPolicy
from iclr26.at_grpo.rollout import Workflow, rollout

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class FakeEnv:
    """Counter environment: state = running sum of actions; reward = the action value; done at `goal`."""

    def __init__(self, n, goal=100, log=None):
        self.n, self.goal = n, goal
        self.total = np.zeros(n)
        self.log = log if log is not None else []
        self.selections = []

    def observe(self, agent, turn, kind="features"):
        self.log.append(("observe", agent, turn, id(self)))
        return torch.as_tensor(self.total, dtype=torch.float32)[:, None].repeat(1, 2)

    def step(self, agent, responses):
        self.log.append(("step", agent, id(self)))
        a = np.asarray(responses, dtype=float)
        live = self.total < self.goal
        self.total = np.where(live, self.total + a, self.total)
        return np.where(live, a, 0.0)

    def team_reward(self):
        return np.zeros(self.n)

    def done(self):
        return self.total >= self.goal

    def success(self):
        return self.done()

    def select(self, index):
        self.selections.append(np.asarray(index).copy())
        self.total = self.total[index].copy()

    def clone(self):
        new = FakeEnv(self.n, self.goal, self.log)
        new.total = self.total.copy()
        return new


class ScriptedPolicy:
    """Returns the next row of a fixed action script (one value per branch) at every call."""

    obs_kind = "features"

    def __init__(self, script):
        self.script, self.calls = [np.asarray(s, float) for s in script], 0

    def act(self, obs, role, greedy=False, generator=None):
        a = self.script[self.calls % len(self.script)]
        self.calls += 1
        n = len(a)
        return Act(
            responses=a, tokens=torch.zeros(n, 1, dtype=torch.long), mask=torch.ones(n, 1), logp=torch.zeros(n, 1)
        )


def test_tree_branches_groups_and_greedy_selection():
    E, K, T = 2, 3, 2
    wf = Workflow(("tool", "plan"), T)
    # rewards per call (branches e0k0 e0k1 e0k2 e1k0 e1k1 e1k2); ties go to the first index
    script = [[1, 5, 5, 2, 2, 2], [0, 0, 9, 3, 1, 0], [4, 4, 1, 7, 8, 9], [1, 2, 3, 3, 2, 1]]
    pol = ScriptedPolicy(script)
    env = FakeEnv(E * K)
    ro = rollout(env, E, K, wf, {"p": pol}, {"tool": "p", "plan": "p"}, alpha=1.0, mode="tree")
    assert [c.agent for c in ro.chunks] == ["tool", "plan", "tool", "plan"]
    for c in ro.chunks:
        for e in range(E):  # every (env, agent, turn) node has exactly K siblings
            assert (c.env == e).sum() == K and sorted(c.branch[c.env == e]) == list(range(K))
    assert ro.n_samples <= E * len(wf.agents) * T * K
    # one selection per turn, by the FIRST agent's reward (the official per-agent loop: after the first
    # selection every branch is a copy, so the later argmax picks index 0); ties go to the first index
    best = [[1, 0], [0, 2]]  # turn 0 by script[0], turn 1 by script[2]
    assert len(env.selections) == T
    for sel, b in zip(env.selections, best, strict=True):
        assert sel.tolist() == [b[0]] * K + [K + b[1]] * K
    # the continuing state: both agents' actions of the selected branch, per turn
    assert env.total.tolist() == [(5 + 0) + (4 + 1)] * K + [(2 + 3) + (9 + 1)] * K


def test_greedy_off_continues_from_branch_zero():
    pol = ScriptedPolicy([[1, 5, 5]])
    env = FakeEnv(3)
    rollout(env, 1, 3, Workflow(("plan",), 3), {"p": pol}, {"plan": "p"}, greedy_select=False)
    assert all(s.tolist() == [0, 0, 0] for s in env.selections)


def test_episode_stops_at_first_selected_done():
    pol = ScriptedPolicy([[3, 10, 1]])
    env = FakeEnv(3, goal=10)
    ro = rollout(env, 1, 3, Workflow(("tool", "plan"), 5), {"p": pol}, {"tool": "p", "plan": "p"})
    # turn 0: the tool's branch 1 reaches the goal; the planner acts only on the live branches 0 and 2;
    # the selected branch (1) is done, so the episode stops after one turn
    assert [c.agent for c in ro.chunks] == ["tool", "plan"] and ro.chunks[1].branch.tolist() == [0, 2]
    assert ro.success.tolist() == [True]


def test_independent_mode_never_copies_states():
    pol = ScriptedPolicy([[1, 2, 3, 4]])
    env = FakeEnv(4)
    ro = rollout(env, 2, 2, Workflow(("tool", "plan"), 2), {"p": pol}, {"tool": "p", "plan": "p"}, mode="independent")
    assert env.selections == [] and env.total.tolist() == [4, 8, 12, 16]
    assert ro.n_samples == 4 * 4


def test_step_and_score_use_the_same_object_and_code_env_copy_diverges():
    log = []
    pol = ScriptedPolicy([[1, 2]])
    env = FakeEnv(2, log=log)
    rollout(env, 1, 2, Workflow(("plan",), 3), {"p": pol}, {"plan": "p"})
    assert {e[-1] for e in log} == {id(env)}  # observed, stepped and copied: one object
    log2 = []
    env2 = FakeEnv(2, log=log2)
    rollout(env2, 1, 2, Workflow(("plan",), 3), {"p": pol}, {"plan": "p"}, code_env_copy=True)
    stepped = {e[-1] for e in log2 if e[0] == "step"}
    observed = [e[-1] for e in log2 if e[0] == "observe"]
    assert stepped == {id(env2)} and observed[0] == id(env2) and set(observed[1:]) == {observed[1]} != {id(env2)}
    # the originals were stepped each turn without being synced: branch 1 kept its own actions
    assert env2.total.tolist() == [3, 6]


def test_parallel_visibility_builds_all_observations_before_stepping():
    for vis, expected in (
        ("sequential", ["observe", "step", "observe", "step"]),
        ("parallel", ["observe", "observe", "step", "step"]),
    ):
        log = []
        env = FakeEnv(2, log=log)
        wf = Workflow(("tool", "plan"), 1, intra_turn_visibility=vis)
        rollout(env, 1, 2, wf, {"p": ScriptedPolicy([[1, 1]])}, {"tool": "p", "plan": "p"})
        assert [e[0] for e in log] == expected


def test_tree_on_plan_path_all_branches_equal_after_each_step():
    cfg = PlanPathConfig(size=5)
    seeds = env_seeds(cfg, "train", range(3))
    K, T = 4, 2
    snapshots, pre = [], []

    class Spy(PlanPathBatch):
        def select(self, index):
            pre.append(self.state_key())
            super().select(index)
            snapshots.append(self.state_key())

    env = Spy(cfg, [s for s in seeds for _ in range(K)], T)
    od = PlanPathBatch.obs_dim(5, T)
    torch.manual_seed(0)
    pols = {"tool": TinyPolicy(od, hidden=16), "plan": TinyPolicy(od, hidden=16)}
    ro = rollout(
        env,
        3,
        K,
        Workflow(("tool", "plan"), T),
        pols,
        {"tool": "tool", "plan": "plan"},
        generator=torch.Generator().manual_seed(0),
    )
    assert snapshots
    for snap in snapshots:
        for e in range(3):
            assert len(set(snap[e * K : (e + 1) * K])) == 1
    assert ro.n_samples <= 3 * 2 * T * K
    # the continuing branch is the argmax-reward branch (first index on ties) of the first agent step
    r = ro.chunks[0].reward.reshape(3, K)
    for e in range(3):
        assert snapshots[0][e * K] == pre[0][e * K + int(np.argmax(r[e]))]


def _mini_trainer(sigma, seed=0):
    cfg_env = PlanPathConfig(size=5)
    od = PlanPathBatch.obs_dim(5, 2)
    torch.manual_seed(seed)
    pols = {n: TinyPolicy(od, hidden=16) for n in sorted(set(sigma.values()))}
    tr = ATGRPOTrainer(
        ATGRPOConfig(K=4, lr=1e-2),
        Workflow(("tool", "plan"), 2),
        pols,
        sigma,
        lambda s: PlanPathBatch(cfg_env, s, 2, rng_seed=0),
    )
    return tr, env_seeds(cfg_env, "train", range(6))


def test_per_role_update_changes_only_the_acting_role():
    tr, seeds = _mini_trainer({"tool": "tool", "plan": "plan"})
    ro = tr.collect(seeds, torch.Generator().manual_seed(0))
    ro.chunks = [c for c in ro.chunks if c.agent == "tool"]  # only the tool acted
    before = {n: [p.detach().clone() for p in pol.parameters()] for n, pol in tr.policies.items()}
    batch = compute_advantages(ro, tr.cfg)
    update_policies(batch, tr.workflow, tr.policies, tr.agent_to_policy, tr.optimizers, tr.cfg)
    same = {
        n: all(torch.equal(a, b) for a, b in zip(before[n], tr.policies[n].parameters(), strict=True)) for n in before
    }
    assert same == {"tool": False, "plan": True}


def test_per_role_routing_equals_updating_each_policy_on_its_own_samples():
    tr, seeds = _mini_trainer({"tool": "tool", "plan": "plan"})
    ro = tr.collect(seeds, torch.Generator().manual_seed(0))
    tr2, _ = _mini_trainer({"tool": "tool", "plan": "plan"})
    batch = compute_advantages(ro, tr.cfg)
    update_policies(batch, tr.workflow, tr.policies, tr.agent_to_policy, tr.optimizers, tr.cfg)
    only_tool = compute_advantages(ro, tr.cfg)
    keep = [j for j, c in enumerate(only_tool.chunks) if c.agent == "tool"]
    only_tool.chunks = [only_tool.chunks[j] for j in keep]
    only_tool.rows = [only_tool.rows[j] for j in keep]
    only_tool.adv = [only_tool.adv[j] for j in keep]
    update_policies(only_tool, tr2.workflow, tr2.policies, tr2.agent_to_policy, tr2.optimizers, tr2.cfg)
    for a, b in zip(tr.policies["tool"].parameters(), tr2.policies["tool"].parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_shared_mode_sends_all_samples_to_one_policy():
    tr, seeds = _mini_trainer({"tool": "shared", "plan": "shared"})
    assert list(tr.policies) == ["shared"]
    stats = tr.step(seeds, torch.Generator().manual_seed(0))
    assert list(stats["policy"]) == ["shared"]
    assert stats["n_kept"] == stats["n_samples"] and np.isfinite(
        stats["policy"]["shared"]["loss"]
        if "loss" in stats["policy"]["shared"]
        else stats["policy"]["shared"]["policy_loss"]
    )


def test_shard_round_robin():
    assert shard(list(range(7)), 1, 3) == [1, 4]
    with pytest.raises(ValueError):
        shard([1], 3, 3)
