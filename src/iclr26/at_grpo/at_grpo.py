r"""AT-GRPO: agent- and turn-wise grouping, the group filter, and the per-policy PPO-clip update.

**Grouping.** Every sample carries its environment ``e``, agent ``i`` and turn ``t``. AT-GRPO groups by
:math:`g = (e, i, t)`; with tree sampling each group holds exactly the ``K`` siblings sampled from one
context. Within a group (verl's ``grpo`` estimator, ``norm_adv_by_std_in_grpo=True``):

.. math::  A^{(k)} = \frac{r^{(k)} - \mathrm{mean}_g(r)}{\mathrm{std}_g(r) + \varepsilon}

broadcast to every token of the response. Ablations use the keys ``(e,)``, ``(e, i)``, ``(e, t)``.
``code_group_key=True`` mimics the official tree mode's key ``(e // K, t, i)``, which merges ``K``
neighbouring environments into one group (spec 3.6.2).

**Standard GRPO baseline** (``rollout_mode="no_tree"``): ``K`` independent trajectories per environment,
trajectory reward :math:`R_k = \sum_{t,i} r^{(k)}_{t,i}`, advantage normalised over the ``K`` trajectories of
the environment (key ``(e,)``) and given to every agent-turn sample of the trajectory
(``traj_samples="all_turns"``). ``traj_samples="last_turn"`` mimics the code: only the samples of each
trajectory's last turn are kept, each with its own turn reward, key ``(e,)``.

**Group filter** (code only: ``filter_method: mean, filter_ratio: 0.5``), applied before the advantage:
``mean`` drops the ``floor(ratio * #groups)`` groups with the lowest mean reward; ``std`` those with the
lowest range-normalised variance; ``dapo`` every zero-variance group; ``uid`` the ``floor(ratio * n_g)``
most-deviating samples inside each group.

**Update.** For each policy ``m``, all samples of the agents with :math:`\sigma(i) = m` go to one PPO-clip
step (:func:`iclr26.core.grpo.policy_loss`, token-mean, :math:`\varepsilon = 0.2`, no KL, no entropy):
with per-role policies an update touches only the acting role's parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from iclr26.at_grpo.rollout import Rollout, SampleChunk, Workflow, rollout
from iclr26.core.grpo import group_advantages, policy_loss

KEY_FIELDS = ("env", "agent", "turn")
FILTERS = (None, "mean", "std", "dapo", "uid")


@dataclass(frozen=True)
class ATGRPOConfig:
    """AT-GRPO hyper-parameters (paper / official-code defaults, tiny-policy learning rate)."""

    K: int = 4
    """Branches per agent turn (train_sample_num: 4 in the scripts, 8 in the yaml)."""
    alpha: float = 1.0
    """alpha of r = alpha * r_team + r_loc (the official code adds the env reward: alpha = 1)."""
    rollout_mode: str = "tree"
    """"tree" (AT-GRPO tree sampling) or "no_tree" (K independent trajectories: standard GRPO)."""
    group_key: tuple[str, ...] = KEY_FIELDS
    """Fields of the group key in tree mode: ("env", "agent", "turn") = AT-GRPO; subsets are ablations."""
    code_group_key: bool = False
    """Mimic the official tree-mode key (env // K, turn, agent) that merges K neighbouring envs."""
    greedy_select: bool = True
    """if_greedy: continue from the best branch (False: always branch 0)."""
    traj_samples: str = "all_turns"
    """no_tree only: "all_turns" (every sample gets its trajectory's advantage) or "last_turn" (code)."""
    filter_method: str | None = None
    """Group filter of the official code: None (paper), "mean" (code default), "std", "dapo", "uid"."""
    filter_ratio: float = 0.5
    """Fraction dropped by the "mean" / "std" / "uid" filters."""
    code_env_copy: bool = False
    """Mimic the official env-copy divergence (steps hit un-synced originals after turn 1)."""
    clip_eps: float = 0.2
    """PPO clip epsilon (eps_low = eps_high = 0.2)."""
    adv_eps: float = 1e-6
    """epsilon added to the group std."""
    normalize: str = "mean_std"
    """Advantage normalisation inside a group: "mean_std" (paper / verl grpo) or "mean" (diagnostic, no std)."""
    lr: float = 3e-4
    """Adam learning rate of each policy (tiny nets from scratch; the LLM runs use 1e-6)."""
    ppo_epochs: int = 1
    """Gradient steps per batch (on-policy: the ratio is 1 at the first one)."""
    max_grad_norm: float = 1.0
    """Gradient clip."""

    def __post_init__(self) -> None:
        if self.K < 1:
            raise ValueError(f"K must be >= 1, got {self.K}")
        if self.rollout_mode not in ("tree", "no_tree"):
            raise ValueError(f"rollout_mode must be 'tree' or 'no_tree', got {self.rollout_mode!r}")
        bad = [f for f in self.group_key if f not in KEY_FIELDS]
        if bad or not self.group_key:
            raise ValueError(f"group_key fields must be a non-empty subset of {KEY_FIELDS}, got {self.group_key}")
        if self.traj_samples not in ("all_turns", "last_turn"):
            raise ValueError(f"traj_samples must be 'all_turns' or 'last_turn', got {self.traj_samples!r}")
        if self.filter_method not in FILTERS:
            raise ValueError(f"filter_method must be one of {FILTERS}, got {self.filter_method!r}")
        if not 0.0 <= self.filter_ratio < 1.0:
            raise ValueError(f"filter_ratio must be in [0, 1), got {self.filter_ratio}")
        if self.normalize not in ("mean_std", "mean"):
            raise ValueError(f"normalize must be 'mean_std' or 'mean', got {self.normalize!r}")
        if self.ppo_epochs < 1:
            raise ValueError(f"ppo_epochs must be >= 1, got {self.ppo_epochs}")

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------------
# group keys, filter, advantages
# --------------------------------------------------------------------------------------------------


def group_keys(env: Sequence[int], agent: Sequence[str], turn: Sequence[int], fields: Sequence[str] = KEY_FIELDS,
               code_merge_k: int | None = None) -> list[tuple]:
    """Group key of each sample: the chosen fields of ``(env, agent, turn)``.

    ``code_merge_k=K`` reproduces the official tree-mode key ``(env // K, turn, agent)``.
    """
    if code_merge_k is not None:
        return [(int(e) // code_merge_k, int(t), a) for e, a, t in zip(env, agent, turn, strict=True)]
    out = []
    for e, a, t in zip(env, agent, turn, strict=True):
        vals = {"env": int(e), "agent": a, "turn": int(t)}
        out.append(tuple(vals[f] for f in fields))
    return out


def _group_index(keys: Sequence[Hashable]) -> tuple[np.ndarray, int]:
    ids: dict[Hashable, int] = {}
    gid = np.array([ids.setdefault(k, len(ids)) for k in keys], dtype=np.int64)
    return gid, len(ids)


def group_filter(rewards: np.ndarray, keys: Sequence[Hashable], method: str | None, ratio: float = 0.5) -> np.ndarray:
    """Boolean keep-mask of the official code's group filter (``None`` keeps everything)."""
    r = np.asarray(rewards, dtype=np.float64)
    keep = np.ones(len(r), dtype=bool)
    if method is None or len(r) == 0:
        return keep
    gid, G = _group_index(keys)
    if method == "uid":
        for g in range(G):
            rows = np.flatnonzero(gid == g)
            n_drop = int(math.floor(ratio * len(rows)))
            if n_drop:
                dev = np.abs(r[rows] - r[rows].mean())
                keep[rows[np.argsort(-dev, kind="stable")[:n_drop]]] = False
        return keep
    means = np.array([r[gid == g].mean() for g in range(G)])
    if method == "dapo":
        zero_var = np.array([np.ptp(r[gid == g]) == 0 for g in range(G)])
        return ~zero_var[gid]
    if method == "mean":
        score = means
    elif method == "std":
        span = np.ptp(r) if np.ptp(r) > 0 else 1.0
        score = np.array([np.var((r[gid == g] - r.min()) / span) for g in range(G)])
    else:
        raise ValueError(f"unknown filter {method!r}; valid: {FILTERS}")
    n_drop = int(math.floor(ratio * G))
    dropped = np.argsort(score, kind="stable")[:n_drop]
    return ~np.isin(gid, dropped)


@dataclass
class Batch:
    """Flattened samples with their group keys, rewards used for the advantage, and advantages."""

    chunks: list[SampleChunk]
    rows: list[np.ndarray]  # per chunk: kept row indices
    adv: list[np.ndarray]  # per chunk: advantages of the kept rows
    n_groups: int
    n_kept: int


def compute_advantages(ro: Rollout, cfg: ATGRPOConfig) -> Batch:
    """Group the rollout's samples (AT keys or trajectory groups), filter, and normalise within groups."""
    chunks = ro.chunks
    if not chunks:
        return Batch([], [], [], 0, 0)
    env = np.concatenate([c.env for c in chunks])
    branch = np.concatenate([c.branch for c in chunks])
    turn = np.concatenate([np.full(len(c.env), c.turn) for c in chunks])
    agent = [c.agent for c in chunks for _ in range(len(c.env))]
    reward = np.concatenate([c.reward for c in chunks])
    sizes = [len(c.env) for c in chunks]
    if cfg.rollout_mode == "tree":
        keys = group_keys(env, agent, turn, cfg.group_key, cfg.K if cfg.code_group_key else None)
        keep = group_filter(reward, keys, cfg.filter_method, cfg.filter_ratio)
        kept_keys = [k for k, m in zip(keys, keep, strict=True) if m]
        adv_kept = group_advantages(torch.as_tensor(reward[keep]), kept_keys, cfg.normalize, cfg.adv_eps).numpy()
        adv = np.zeros(len(reward))
        adv[keep] = adv_kept
        n_groups = len(set(kept_keys))
    else:
        traj = env * ro.K + branch  # trajectory id
        if cfg.traj_samples == "all_turns":
            uniq, inv = np.unique(traj, return_inverse=True)
            R = np.zeros(len(uniq))
            np.add.at(R, inv, reward)  # R_k = sum_{t,i} r_{t,i}
            traj_env = uniq // ro.K
            tkeys = [(int(e),) for e in traj_env]
            tkeep = group_filter(R, tkeys, cfg.filter_method, cfg.filter_ratio)
            A = np.zeros(len(uniq))
            A[tkeep] = group_advantages(torch.as_tensor(R[tkeep]), [k for k, m in zip(tkeys, tkeep, strict=True) if m],
                                        cfg.normalize, cfg.adv_eps).numpy()
            adv = A[inv]
            keep = tkeep[inv]
            n_groups = len({k for k, m in zip(tkeys, tkeep, strict=True) if m})
        else:  # official no_tree: keep only each trajectory's last-turn samples, key (env,)
            last = np.full(traj.max() + 1, -1)
            np.maximum.at(last, traj, turn)
            keep = turn == last[traj]
            keys = [(int(e),) for e in env]
            keep &= group_filter(np.where(keep, reward, 0.0), keys, cfg.filter_method, cfg.filter_ratio) | ~keep
            kept_keys = [k for k, m in zip(keys, keep, strict=True) if m]
            adv = np.zeros(len(reward))
            adv[keep] = group_advantages(torch.as_tensor(reward[keep]), kept_keys, cfg.normalize, cfg.adv_eps).numpy()
            n_groups = len(set(kept_keys))
    rows, advs, off = [], [], 0
    for s in sizes:
        k = np.flatnonzero(keep[off:off + s])
        rows.append(k)
        advs.append(adv[off:off + s][k])
        off += s
    return Batch(chunks, rows, advs, n_groups, int(keep.sum()))


# --------------------------------------------------------------------------------------------------
# update
# --------------------------------------------------------------------------------------------------


def _take_obs(obs: Any, rows: np.ndarray) -> Any:
    if isinstance(obs, Tensor):
        return obs[torch.as_tensor(rows, dtype=torch.long)]
    return [obs[i] for i in rows]


def _cat_obs(parts: list[Any]) -> Any:
    if isinstance(parts[0], Tensor):
        return torch.cat(parts)
    return [o for p in parts for o in p]


def _pad_cat(xs: list[Tensor]) -> Tensor:
    L = max(x.shape[1] for x in xs)
    return torch.cat([torch.nn.functional.pad(x, (0, L - x.shape[1])) for x in xs])


def _allreduce_grads(params: Sequence[torch.nn.Parameter]) -> None:
    """Average gradients over processes when running under torchrun (rollouts are sharded by env)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    world = torch.distributed.get_world_size()
    if world == 1:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        torch.distributed.all_reduce(p.grad)
        p.grad /= world


def update_policies(batch: Batch, workflow: Workflow, policies: Mapping[str, Any], agent_to_policy: Mapping[str, str],
                    optimizers: Mapping[str, torch.optim.Optimizer], cfg: ATGRPOConfig) -> dict[str, dict]:
    """One PPO-clip update per policy on the samples of the agents it plays (the router of the paper)."""
    stats: dict[str, dict] = {}
    for name, pol in policies.items():
        mine = [j for j, c in enumerate(batch.chunks) if agent_to_policy[c.agent] == name and len(batch.rows[j])]
        if not mine:
            continue
        params = [p for p in pol.parameters() if p.requires_grad]
        # one forward per agent (its role decides the prompt / grammar): concatenate that agent's chunks
        per_agent: dict[str, list[int]] = {}
        for j in mine:
            per_agent.setdefault(batch.chunks[j].agent, []).append(j)
        data = []
        for a, js in per_agent.items():
            obs = _cat_obs([_take_obs(batch.chunks[j].obs, batch.rows[j]) for j in js])
            sel = [torch.as_tensor(batch.rows[j], dtype=torch.long) for j in js]
            toks = _pad_cat([batch.chunks[j].tokens[r] for j, r in zip(js, sel, strict=True)])
            old = _pad_cat([batch.chunks[j].logp[r] for j, r in zip(js, sel, strict=True)])
            msk = _pad_cat([batch.chunks[j].mask[r] for j, r in zip(js, sel, strict=True)])
            adv = torch.cat([torch.as_tensor(batch.adv[j], dtype=torch.float32) for j in js])
            data.append((a, obs, toks, old, msk, adv))
        for _ in range(cfg.ppo_epochs):
            lps = [pol.logprobs(obs, workflow.role(a), toks) for a, obs, toks, _, _, _ in data]
            L = max(x.shape[1] for x in lps)

            def pad(xs, L=L):
                return torch.cat([torch.nn.functional.pad(x, (0, L - x.shape[1])) for x in xs])

            olds, masks, advs = [d[3] for d in data], [d[4] for d in data], [d[5] for d in data]
            loss, st = policy_loss(pad(lps), pad(olds), torch.cat(advs), pad(masks), cfg.clip_eps, None, "token_mean")
            optimizers[name].zero_grad(set_to_none=True)
            loss.backward()
            _allreduce_grads(params)
            if cfg.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            optimizers[name].step()
        stats[name] = st
    return stats


class ATGRPOTrainer:
    """Rollouts + grouping + per-policy updates for one workflow.

    ``make_env(seeds)`` builds an environment batch with one branch per seed. ``policies`` maps policy names
    to policies; ``agent_to_policy`` is sigma (one name for every agent = the shared, role-conditioned
    policy; one name per agent = role-specialised policies).
    """

    def __init__(self, cfg: ATGRPOConfig, workflow: Workflow, policies: Mapping[str, Any],
                 agent_to_policy: Mapping[str, str], make_env: Callable[[list[int]], Any],
                 optimizer_factory: Callable[[Any], torch.optim.Optimizer] | None = None):
        self.cfg, self.workflow = cfg, workflow
        self.policies, self.agent_to_policy, self.make_env = dict(policies), dict(agent_to_policy), make_env
        factory = optimizer_factory or (lambda p: torch.optim.Adam(p.parameters(), lr=cfg.lr))
        self.optimizers = {n: factory(p) for n, p in self.policies.items()}
        self.samples_seen = 0

    def collect(self, seeds: Sequence[int], generator: torch.Generator | None = None) -> Rollout:
        K = self.cfg.K
        env = self.make_env([s for s in seeds for _ in range(K)])
        mode = "tree" if self.cfg.rollout_mode == "tree" else "independent"
        return rollout(env, len(seeds), K, self.workflow, self.policies, self.agent_to_policy, self.cfg.alpha,
                       mode=mode, greedy_select=self.cfg.greedy_select, generator=generator,
                       code_env_copy=self.cfg.code_env_copy)

    def step(self, seeds: Sequence[int], generator: torch.Generator | None = None) -> dict[str, Any]:
        ro = self.collect(seeds, generator)
        batch = compute_advantages(ro, self.cfg)
        stats = update_policies(batch, self.workflow, self.policies, self.agent_to_policy, self.optimizers, self.cfg)
        n = ro.n_samples
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            t = torch.tensor([n], dtype=torch.long)  # global sample count keeps every rank's budget loop in step
            torch.distributed.all_reduce(t)
            n = int(t.item())
        self.samples_seen += n
        return {"n_samples": n, "n_kept": batch.n_kept, "n_groups": batch.n_groups,
                "train_success": float(np.mean(ro.success)), "policy": stats}


def shard(items: Sequence[Any], rank: int, world: int) -> list[Any]:
    """The environments of process ``rank`` out of ``world`` (round robin), for rollouts under torchrun."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} not in [0, {world})")
    return [x for i, x in enumerate(items) if i % world == rank]
