r"""The multi-agent rollout engine: roles, turns, environment steps and tree-structured sampling.

A :class:`Workflow` fixes the agents, their ``turn_order`` and the turn budget ``T``. An environment batch
holds ``n`` branches and offers ``observe(agent, turn, kind)``, ``step(agent, responses) -> r_loc``,
``team_reward()``, ``done()``, ``success()``, ``select(index)`` and ``clone()``
(:class:`~iclr26.at_grpo.plan_path.PlanPathBatch` is one).

**Tree-structured sampling** (paper section 3, ``mode="tree"``): environment ``e`` owns the ``K`` branches
``e*K .. e*K+K-1``, all starting from the same state. For ``t = 1..T`` and each agent ``i`` in turn order:

1. every branch builds :math:`o_{t,i}` from its own (identical) state and samples one response
   :math:`a^{(k)} \sim \pi_{\theta_{\sigma(i)}}(\cdot \mid o_{t,i})`;
2. branch ``k`` executes :math:`a^{(k)}` and gets :math:`r^{(k)}_{t,i} = \alpha\, r^{team} + r^{loc,(k)}_{t,i}`;
3. the ``K`` samples are recorded as the group :math:`g = (e, i, t)`;
4. :math:`k^* = \arg\max_k r^{(k)}` (first index on ties; ``greedy_select=False`` always takes 0) and every
   branch becomes a deep copy of branch :math:`k^*`;
5. if the selected branch is done, the episode of ``e`` stops.

So each ``(e, i, t)`` node yields exactly ``K`` samples from the same context, and at most ``N*T*K`` samples
per environment. ``mode="independent"`` is the baseline (the code's ``no_tree``): ``K`` independent
trajectories per environment, no copying.

Flags that mimic the official code (off by default = paper semantics):

* ``intra_turn_visibility="parallel"``: every agent's observation of turn ``t`` is built before any agent
  of that turn steps, so the planner sees the tool's output of turn ``t-1`` (spec 3.6.4);
* ``code_env_copy=True``: after the first greedy selection the selected *copies* are observed, scored and
  checked for ``done``, but steps keep going to the un-synced original branches (spec 3.6.3).
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
            raise ValueError(f"intra_turn_visibility must be 'sequential' or 'parallel', got "
                             f"{self.intra_turn_visibility!r}")

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


def rollout(env, n_envs: int, K: int, workflow: Workflow, policies: Mapping[str, Any],
            agent_to_policy: Mapping[str, str], alpha: float = 1.0, mode: str = "tree", greedy_select: bool = True,
            greedy_decode: bool = False, generator: torch.Generator | None = None, code_env_copy: bool = False,
            record: bool = True) -> Rollout:
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
    env_idx = np.repeat(np.arange(n_envs), K)
    branch_idx = np.tile(np.arange(K), n_envs)
    stepped, view = env, env
    copied = False
    for t in range(workflow.max_turns):
        done = view.done()
        if done.all():
            break
        pre_obs = {}
        if workflow.intra_turn_visibility == "parallel":
            for a in workflow.agents:
                pre_obs[a] = view.observe(a, t, kind=policies[agent_to_policy[a]].obs_kind)
        for a in workflow.agents:
            live = ~view.done()
            if not live.any():
                break
            pol = policies[agent_to_policy[a]]
            obs = pre_obs[a] if a in pre_obs else view.observe(a, t, kind=pol.obs_kind)
            act = pol.act(obs, workflow.role(a), greedy=greedy_decode, generator=generator)
            local = stepped.step(a, act.responses)
            team = view.team_reward()
            r = mixed_reward(team, local, alpha)
            if record:
                rows = np.flatnonzero(live)
                out.chunks.append(SampleChunk(
                    agent=a, turn=t, env=env_idx[rows], branch=branch_idx[rows], obs=_take(obs, rows),
                    tokens=act.tokens[rows], mask=act.mask[rows], logp=act.logp[rows], local=local[rows],
                    team=team[rows], reward=r[rows]))
            if mode == "tree" and K > 1:
                best = best_branch(r, K, greedy_select)
                index = np.arange(n_envs) * K + best
                index = np.repeat(index, K)
                if code_env_copy:
                    if not copied:  # the first selection deep-copies the (stepped) originals ...
                        view = stepped.clone()
                        copied = True
                    view.select(index)  # ... later ones copy the copies; steps still hit the originals
                else:
                    env.select(index)
    succ = view.success()
    out.success = succ.reshape(n_envs, K)[:, 0] if mode == "tree" else succ
    return out


def evaluate(make_env, seeds, workflow: Workflow, policies: Mapping[str, Any], agent_to_policy: Mapping[str, str],
             alpha: float = 1.0) -> float:
    """Held-out success rate: one greedy (temperature 0) rollout per test environment, no tree."""
    env = make_env(list(seeds))
    ro = rollout(env, len(seeds), 1, workflow, policies, agent_to_policy, alpha, mode="independent",
                 greedy_decode=True, record=False)
    return float(np.mean(ro.success))
