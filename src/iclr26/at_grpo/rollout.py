r"""The multi-agent rollout engine: roles, turns, environment steps and tree-structured sampling.

A :class:`Workflow` fixes the agents, their ``turn_order`` and the turn budget ``T``. An environment batch
holds ``n`` branches and offers ``observe(agent, turn, kind)``, ``step(agent, responses) -> r_loc``,
``team_reward()``, ``done()``, ``success()``, ``select(index)`` and ``clone()``
(:class:`~iclr26.at_grpo.plan_path.PlanPathBatch` is one).

**Tree-structured sampling** (paper section 3, ``mode="tree"``; the official
``multi_agents_execution_engine.py``, ``generate_env_idx_rollout``): environment ``e`` owns the ``K`` branches
``e*K .. e*K+K-1``, identical at the start of every turn. For ``t = 1..T``:

1. each agent ``i`` in turn order acts once on every branch: branch ``k`` builds :math:`o_{t,i}` from its own
   state, samples :math:`a^{(k)} \sim \pi_{\theta_{\sigma(i)}}(\cdot \mid o_{t,i})` and executes it, getting
   its local reward :math:`r^{loc,(k)}_{t,i}`;
2. once every agent of the turn has stepped, the team reward :math:`r^{team,(k)}_t` (the environment
   reward after the turn) is read and :math:`r^{(k)}_{t,i} = \alpha\, r^{team,(k)}_t + r^{loc,(k)}_{t,i}`;
3. the ``K`` samples of agent ``i`` are recorded as the group :math:`g = (e, i, t)`;
4. :math:`k^* = \arg\max_k r^{(k)}_{t,1}` by the first agent's reward (first index on ties;
   ``greedy_select=False`` always takes 0) and every branch becomes a deep copy of branch :math:`k^*`
   (the official per-agent selection loop amounts to this: after the first agent's selection all
   branches are copies, so the later agents' argmax picks index 0);
5. if the selected branch is done, the episode of ``e`` stops.

So each ``(e, i, t)`` node yields exactly ``K`` samples, at most ``N*T*K`` per environment. The first agent's
``K`` contexts are identical; a later agent's contexts are identical under
``intra_turn_visibility="parallel"`` (official: all prompts are built before any agent steps, so the planner
sees the tool's output of turn ``t-1``) and differ by the earlier agents' outputs of the same turn under
``"sequential"`` (default: the paper's workflow figure, tool then planner). ``mode="independent"`` is the
baseline (the code's ``no_tree``): ``K`` independent trajectories per environment, no copying.

``code_env_copy=True`` mimics the official engine's env-copy divergence: after the first greedy selection
the selected *copies* are observed, scored and checked for ``done``, but ``agent.step`` keeps going to the
un-synced original environments (``self.envs[rollout_idx]``). Off by default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True)
class Workflow:
    """A multi-agent workflow: agents in turn order, their roles, and the turn budget."""

    agents: tuple[str, ...]
    """Agent names in turn order (e.g. ("tool", "plan"); the single-agent workflow is ("plan",))."""
    max_turns: int = 4
    """T: turn budget of an episode."""
    roles: tuple[str, ...] | None = None
    """Role of each agent (the prompt / grammar it is given); None = the agent names."""
    intra_turn_visibility: str = "sequential"
    """"sequential" (paper: the planner sees this turn's tool output) or "parallel" (official code)."""

    def __post_init__(self) -> None:
        if not self.agents or len(set(self.agents)) != len(self.agents):
            raise ValueError(f"agents must be non-empty and distinct, got {self.agents}")
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.roles is not None and len(self.roles) != len(self.agents):
            raise ValueError("roles must have one entry per agent")
        if self.intra_turn_visibility not in ("sequential", "parallel"):
            raise ValueError(
                f"intra_turn_visibility must be 'sequential' or 'parallel', got {self.intra_turn_visibility!r}"
            )

    def role(self, agent: str) -> str:
        return agent if self.roles is None else self.roles[self.agents.index(agent)]


@dataclass
class SampleChunk:
    """The samples of one agent step: ``m`` rows (one per recorded branch)."""

    agent: str
    turn: int
    env: np.ndarray  # [m] environment index within the batch
    branch: np.ndarray  # [m] branch index k (tree) / trajectory id (independent)
    obs: Any  # [m, d] tensor or list of m prompts
    tokens: Tensor  # [m, L]
    mask: Tensor  # [m, L]
    logp: Tensor  # [m, L] old log-probs
    local: np.ndarray  # [m] r_loc
    team: np.ndarray  # [m] r_team
    reward: np.ndarray  # [m] alpha * r_team + r_loc


@dataclass
class Rollout:
    """Everything a batch of episodes produced."""

    chunks: list[SampleChunk] = field(default_factory=list)
    n_envs: int = 0
    K: int = 1
    success: np.ndarray | None = None  # [n_envs] (tree) or [n_envs * K] (independent)

    @property
    def n_samples(self) -> int:
        return int(sum(len(c.env) for c in self.chunks))


def mixed_reward(team: np.ndarray, local: np.ndarray, alpha: float) -> np.ndarray:
    r"""Mixed team / local reward :math:`r_{t,i} = \alpha\, r^{team}_t + r^{loc}_{t,i}` (code: alpha = 1)."""
    return alpha * np.asarray(team, dtype=np.float64) + np.asarray(local, dtype=np.float64)


def best_branch(reward: np.ndarray, K: int, greedy: bool = True) -> np.ndarray:
    """Per environment, the branch to continue: argmax over its K rewards (first index on ties), or 0."""
    r = np.asarray(reward).reshape(-1, K)
    return r.argmax(1) if greedy else np.zeros(r.shape[0], dtype=np.int64)


def _take(obs: Any, rows: np.ndarray) -> Any:
    if isinstance(obs, Tensor):
        return obs[torch.as_tensor(rows, dtype=torch.long)]
    return [obs[i] for i in rows]


def rollout(
    env,
    n_envs: int,
    K: int,
    workflow: Workflow,
    policies: Mapping[str, Any],
    agent_to_policy: Mapping[str, str],
    alpha: float = 1.0,
    mode: str = "tree",
    greedy_select: bool = True,
    greedy_decode: bool = False,
    generator: torch.Generator | None = None,
    code_env_copy: bool = False,
    record: bool = True,
) -> Rollout:
    """Run one batch of episodes on ``env`` (``n_envs * K`` branches, branch ``e*K+k`` of env ``e``).

    Args:
        policies: policy name -> policy (``act`` / ``logprobs`` / ``obs_kind``).
        agent_to_policy: sigma, agent -> policy name (one shared name = role-sharing mode).
        mode: ``"tree"`` (AT-GRPO) or ``"independent"`` (K independent trajectories; evaluation with K=1).
        greedy_decode: temperature-0 decoding (validation).
    """
    if mode not in ("tree", "independent"):
        raise ValueError(f"mode must be 'tree' or 'independent', got {mode!r}")
    if env.n != n_envs * K:
        raise ValueError(f"env has {env.n} branches, expected n_envs * K = {n_envs * K}")
    missing = [a for a in workflow.agents if agent_to_policy.get(a) not in policies]
    if missing:
        raise ValueError(f"agents {missing} have no policy in {sorted(policies)}")
    out = Rollout(n_envs=n_envs, K=K)
    ids = (np.repeat(np.arange(n_envs), K), np.tile(np.arange(K), n_envs))
    stepped, view = env, env
    for t in range(workflow.max_turns):
        if view.done().all():
            break
        turn = _play_turn(t, stepped, view, workflow, policies, agent_to_policy, greedy_decode, generator)
        # team reward after ALL agents of the turn have stepped (the official engine calls calculate_reward
        # for every agent once the whole turn is stepped): r_{t,i} = alpha * r_team_t + r_loc_{t,i}
        team = view.team_reward()
        rewards = [mixed_reward(team, local, alpha) for _, _, _, local, _ in turn]
        if record:
            for (a, obs, act, local, rows), r in zip(turn, rewards, strict=True):
                out.chunks.append(
                    SampleChunk(
                        agent=a,
                        turn=t,
                        env=ids[0][rows],
                        branch=ids[1][rows],
                        obs=_take(obs, rows),
                        tokens=act.tokens[rows],
                        mask=act.mask[rows],
                        logp=act.logp[rows],
                        local=local[rows],
                        team=team[rows],
                        reward=r[rows],
                    )
                )
        if mode == "tree" and K > 1:
            # greedy selection: the official per-agent loop picks the best branch by the first agent's reward;
            # the later agents' choices then run over identical copies, so one selection per turn is the same
            index = np.repeat(np.arange(n_envs) * K + best_branch(rewards[0], K, greedy_select), K)
            if code_env_copy:
                if view is stepped:  # the first selection deep-copies the (stepped) originals ...
                    view = stepped.clone()
                view.select(index)  # ... later ones copy the copies; steps still hit the originals
            else:
                env.select(index)
    succ = view.success()
    out.success = succ.reshape(n_envs, K)[:, 0] if mode == "tree" else succ
    return out


def _play_turn(
    t: int,
    stepped,
    view,
    workflow: Workflow,
    policies: Mapping[str, Any],
    agent_to_policy: Mapping[str, str],
    greedy_decode: bool,
    generator: torch.Generator | None,
) -> list:
    """Every agent of turn ``t`` acts once on every branch, in turn order: ``[(agent, obs, act, r_loc, rows)]``.

    ``rows`` are the branches that were live when the agent acted. With ``intra_turn_visibility="parallel"``
    every observation is built before any agent steps (the official engine); "sequential" builds each
    agent's observation after the previous agents of the turn have stepped.
    """
    pre_obs = {}
    if workflow.intra_turn_visibility == "parallel":
        for a in workflow.agents:
            pre_obs[a] = view.observe(a, t, kind=policies[agent_to_policy[a]].obs_kind)
    turn = []
    for a in workflow.agents:
        live = ~view.done()
        if not live.any():
            break
        pol = policies[agent_to_policy[a]]
        obs = pre_obs[a] if a in pre_obs else view.observe(a, t, kind=pol.obs_kind)
        act = pol.act(obs, workflow.role(a), greedy=greedy_decode, generator=generator)
        local = np.asarray(stepped.step(a, act.responses), dtype=np.float64)
        turn.append((a, obs, act, local, np.flatnonzero(live)))
    return turn


def evaluate(
    make_env,
    seeds,
    workflow: Workflow,
    policies: Mapping[str, Any],
    agent_to_policy: Mapping[str, str],
    alpha: float = 1.0,
) -> float:
    """Held-out success rate: one greedy (temperature 0) rollout per test environment, no tree."""
    env = make_env(list(seeds))
    ro = rollout(
        env,
        len(seeds),
        1,
        workflow,
        policies,
        agent_to_policy,
        alpha,
        mode="independent",
        greedy_decode=True,
        record=False,
    )
    return float(np.mean(ro.success))
