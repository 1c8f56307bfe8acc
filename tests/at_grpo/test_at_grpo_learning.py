"""Tests that fail when the update or the reward is wrong: the sign of the advantage, a bandit that must
learn, the team reward read after every agent of the turn has acted, micro-batch accumulation."""

from collections import deque

import numpy as np
import pytest
import torch

from iclr26.at_grpo.at_grpo import ATGRPOConfig, ATGRPOTrainer, Batch, update_policies
from iclr26.at_grpo.plan_path import TOK, PlanPathBatch, PlanPathConfig, env_seeds, make_grid
from iclr26.at_grpo.policy import TinyPolicy
from iclr26.at_grpo.rollout import SampleChunk, Workflow, rollout

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _batch_for(pol: TinyPolicy, n: int = 16, seed: int = 0) -> tuple[Batch, torch.Tensor, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 5, generator=g)
    act = pol.act(obs, "plan", generator=g)
    adv = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    chunk = SampleChunk(
        agent="plan",
        turn=0,
        env=np.arange(n),
        branch=np.zeros(n, dtype=int),
        obs=obs,
        tokens=act.tokens,
        mask=act.mask,
        logp=act.logp,
        local=np.zeros(n),
        team=np.zeros(n),
        reward=adv,
    )
    return Batch([chunk], [np.arange(n)], [adv], n, n), obs, adv


def _seq_logp(pol: TinyPolicy, batch: Batch, obs: torch.Tensor) -> torch.Tensor:
    c = batch.chunks[0]
    with torch.no_grad():
        return (pol.logprobs(obs, "plan", c.tokens) * c.mask).sum(1)


def test_one_update_raises_positive_and_lowers_negative_advantage_samples():
    torch.manual_seed(0)
    pol = TinyPolicy(5, hidden=32)
    batch, obs, adv = _batch_for(pol)
    before = _seq_logp(pol, batch, obs)
    cfg = ATGRPOConfig(K=1, lr=1e-3, ppo_epochs=1)
    opt = {"p": torch.optim.Adam(pol.parameters(), lr=cfg.lr)}
    update_policies(batch, Workflow(("plan",), 1), {"p": pol}, {"plan": "p"}, opt, cfg)
    delta = (_seq_logp(pol, batch, obs) - before).numpy()
    assert delta[adv > 0].mean() > 0 and delta[adv < 0].mean() < 0
    assert (delta[adv > 0] > 0).mean() >= 0.75 and (delta[adv < 0] < 0).mean() >= 0.75


def test_micro_batches_accumulate_to_the_full_batch_gradient():
    torch.manual_seed(1)
    a, b = TinyPolicy(5, hidden=16), TinyPolicy(5, hidden=16)
    b.load_state_dict(a.state_dict())
    batch, _, _ = _batch_for(a, n=10, seed=3)
    for pol, mb in ((a, 0), (b, 3)):
        cfg = ATGRPOConfig(K=1, lr=1e-2, ppo_epochs=2, micro_batch_size=mb)
        opt = {"p": torch.optim.SGD(pol.parameters(), lr=cfg.lr)}
        update_policies(batch, Workflow(("plan",), 1), {"p": pol}, {"plan": "p"}, opt, cfg)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, atol=1e-6, rtol=1e-5)


class Bandit:
    """One-step bandit: reward 1 when the planner's first token is R, else 0; nothing else changes."""

    def __init__(self, n):
        self.n, self.is_done = n, np.zeros(n, dtype=bool)

    def observe(self, agent, turn, kind="features"):
        return torch.ones(self.n, 5)

    def step(self, agent, responses):
        self.is_done[:] = True
        return (np.asarray(responses)[:, 0] == TOK["R"]).astype(float)

    def team_reward(self):
        return np.zeros(self.n)

    def done(self):
        return self.is_done.copy()

    def success(self):
        return self.done()

    def select(self, index):
        self.is_done = self.is_done[index].copy()

    def clone(self):
        new = Bandit(self.n)
        new.is_done = self.is_done.copy()
        return new


def test_bandit_reward_rises_over_a_few_updates():
    torch.manual_seed(0)
    pol = TinyPolicy(5, hidden=16)
    tr = ATGRPOTrainer(
        ATGRPOConfig(K=8, lr=3e-2, ppo_epochs=1),
        Workflow(("plan",), 1),
        {"p": pol},
        {"plan": "p"},
        lambda seeds: Bandit(len(seeds)),
    )
    gen = torch.Generator().manual_seed(0)
    rewards = [tr.step(list(range(8)), gen)["reward_mean"] for _ in range(12)]
    assert rewards[0] < 0.5  # R is one of 5 first tokens (U D L R EOS)
    assert np.mean(rewards[-3:]) > 0.8


def test_team_reward_is_read_after_all_agents_of_the_turn_acted():
    cfg = PlanPathConfig(size=5)
    K, T, E = 4, 3, 6
    after_turn: deque = deque()

    class Spy(PlanPathBatch):
        def select(self, index):  # called once per turn, after every agent of the turn has stepped
            after_turn.append(self.last_reward.copy())
            super().select(index)

    env = Spy(cfg, [s for s in env_seeds(cfg, "train", range(E)) for _ in range(K)], T)
    od = PlanPathBatch.obs_dim(5, T)
    torch.manual_seed(0)
    pols = {"tool": TinyPolicy(od, hidden=16), "plan": TinyPolicy(od, hidden=16)}
    ro = rollout(
        env,
        E,
        K,
        Workflow(("tool", "plan"), T),
        pols,
        {"tool": "tool", "plan": "plan"},
        alpha=0.7,
        generator=torch.Generator().manual_seed(0),
    )
    spread = []
    for t in range(T):
        tool, plan = (c for c in ro.chunks if c.turn == t)
        if not len(after_turn):
            break
        team_after = after_turn.popleft()
        rows = tool.env * K + tool.branch
        np.testing.assert_allclose(tool.team, team_after[rows])  # the tool's team term: reward after the turn
        np.testing.assert_allclose(tool.reward, 0.7 * team_after[rows] + tool.local)
        np.testing.assert_allclose(plan.team, team_after[plan.env * K + plan.branch])
        for e in np.unique(tool.env):
            spread.append(np.ptp(tool.team[tool.env == e]))
    assert max(spread) > 0  # the team term differs between a tool group's branches (alpha matters)


def test_observation_shows_static_grid_unless_the_position_flag_is_on():
    grid = make_grid(3, 5)
    for flag in (False, True):
        cfg = PlanPathConfig(size=5, show_position=flag)
        a, b = PlanPathBatch(cfg, [grid], 2), PlanPathBatch(cfg, [grid], 2)
        free = np.flatnonzero(~grid.walls.reshape(-1))
        b.pos[:] = [c for c in free if c != grid.start][0]  # the agent moved
        same = torch.equal(a.observe("plan", 1), b.observe("plan", 1))
        assert same is (not flag)
        assert a.observe("tool", 0).shape[1] == PlanPathBatch.obs_dim(5, 2, flag)
        assert ("Current" in b.observe("plan", 1, kind="text")[0]) is flag


def test_shortest_path_tables_match_a_plain_bfs():
    for seed in range(6):
        g = make_grid(seed, 6)
        S = 6
        free = ~g.walls.reshape(-1)
        dist = np.full(S * S, 10**6)
        dist[g.goal] = 0
        q = deque([g.goal])
        while q:
            c = q.popleft()
            r, col = divmod(c, S)
            for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                r2, c2 = r + dr, col + dc
                if 0 <= r2 < S and 0 <= c2 < S and free[r2 * S + c2] and dist[r2 * S + c2] > dist[c] + 1:
                    dist[r2 * S + c2] = dist[c] + 1
                    q.append(r2 * S + c2)
        np.testing.assert_array_equal(g.dist[g.goal], dist)
        # following next_move from the start reaches the goal in exactly `shortest` moves
        pos, n = g.start, 0
        deltas = {0: -S, 1: S, 2: -1, 3: 1}
        while pos != g.goal:
            pos += deltas[int(g.next_move[g.goal, pos])]
            n += 1
        assert n == g.shortest == dist[g.start]


def test_dual_clip_stops_the_gradient_of_huge_ratios_with_negative_advantage():
    # verl clip_ratio_c = 3: for A < 0 the per-token loss is bounded by -c*A, so tokens whose ratio is far
    # above c get no gradient; without the dual clip the same tokens push the policy
    changed = {}
    for dual in (3.0, None):
        torch.manual_seed(0)
        pol = TinyPolicy(5, hidden=16)
        batch, _, _ = _batch_for(pol, n=8)
        c = batch.chunks[0]
        c.logp = c.logp - 5.0  # pi_old much smaller than pi: ratio e^5 > 3 on every token
        batch.adv = [-np.ones(8)]
        before = [p.detach().clone() for p in pol.parameters()]
        cfg = ATGRPOConfig(K=1, lr=1e-2, dual_clip=dual)
        opt = {"p": torch.optim.Adam(pol.parameters(), lr=cfg.lr)}
        update_policies(batch, Workflow(("plan",), 1), {"p": pol}, {"plan": "p"}, opt, cfg)
        changed[dual] = any(not torch.equal(a, b) for a, b in zip(before, pol.parameters(), strict=True))
    assert changed == {3.0: False, None: True}


def test_kl_to_the_initial_policy_is_reported_when_enabled():
    torch.manual_seed(0)
    tr = ATGRPOTrainer(
        ATGRPOConfig(K=4, lr=3e-2, kl_coef=0.1),
        Workflow(("plan",), 1),
        {"p": TinyPolicy(5, hidden=16)},
        {"plan": "p"},
        lambda seeds: Bandit(len(seeds)),
    )
    gen = torch.Generator().manual_seed(0)
    kls = [tr.step(list(range(8)), gen)["policy"]["p"]["kl"] for _ in range(3)]
    assert kls[0] == pytest.approx(0.0, abs=1e-9) and kls[-1] > 0  # the reference is the initial policy
    assert all(not p.requires_grad for p in tr.refs["p"].parameters())
