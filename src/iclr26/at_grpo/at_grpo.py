r"""AT-GRPO: agent- and turn-wise grouping, the group filter, and the per-policy PPO-clip update.

**Grouping.** Every sample carries its environment ``e``, agent ``i`` and turn ``t``. AT-GRPO groups by
:math:`g = (e, i, t)`; with tree sampling each group holds exactly the ``K`` siblings sampled from one
context. Within a group (verl's ``grpo`` estimator, ``norm_adv_by_std_in_grpo=True``):

.. math::  A^{(k)} = \frac{r^{(k)} - \mathrm{mean}_g(r)}{\mathrm{std}_g(r) + \varepsilon}

broadcast to every token of the response. Ablations use the keys ``(e,)``, ``(e, i)``, ``(e, t)``.
``code_group_key=True`` mimics the official tree mode's key ``(e // K, t, i)`` (``_assign_consistent_uids``),
which merges ``K`` neighbouring environments into one group. As in the official trainer, samples are first
split by policy: a group never spans two policies.

**Standard GRPO baseline** (``rollout_mode="no_tree"``): ``K`` independent trajectories per environment.
``traj_samples="all_turns"`` (default, ours): trajectory reward :math:`R_k = \sum_{t,i} r^{(k)}_{t,i}`,
advantage normalised over the ``K`` trajectories of the environment and given to every agent-turn sample
of the trajectory. ``traj_samples="last_turn"`` (the official code): only the samples of the environment's
maximum turn over its ``K`` trajectories are kept, each with its own turn reward, key ``(e,)``.

**Group filter** (official per-model config ``filter_method: mean, filter_ratio: 0.5``; off by default),
applied before the advantage on each policy's samples separately: see :func:`group_filter`.

**Update.** For each policy ``m``, all samples of the agents with :math:`\sigma(i) = m` go to one PPO-clip
step (:func:`iclr26.core.grpo.policy_loss`, token-mean, :math:`\varepsilon = 0.2`, dual clip ``c = 3``, no KL,
no entropy; verl's actor defaults), accumulated over micro-batches: with per-role policies an update
touches only the acting role's parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from iclr26.at_grpo.rollout import Rollout, SampleChunk, Workflow, rollout
from iclr26.core.grpo import group_advantages, kl_k3, policy_loss

KEY_FIELDS = ("env", "agent", "turn")
FILTERS = (None, "mean", "std", "dapo", "uid")


@dataclass(frozen=True)
class ATGRPOConfig:
    """AT-GRPO hyper-parameters (paper / official-code defaults; a tiny-policy learning rate).

    K: branches per agent turn (train_sample_num: 4 in the official scripts, 8 in the yaml).
    alpha (α): weight of the team reward, r = α·r_team + r_loc (the official code adds the env reward: 1).
    rollout_mode: "tree" (AT-GRPO tree sampling) or "no_tree" (K independent trajectories: standard GRPO).
    group_key: fields of the group key in tree mode: (env, agent, turn) = AT-GRPO; subsets are ablations.
    code_group_key: official tree-mode key (env // K, turn, agent), which merges K neighbouring envs.
    greedy_select: if_greedy: continue from the best branch (False: always branch 0).
    intra_turn_visibility: "sequential" (paper figure: the planner sees this turn's tool output) or "parallel" (code).
    traj_samples: no_tree only: "all_turns" (ours: every sample gets its trajectory's advantage) or "last_turn" (code).
    filter_method: group filter run per policy before the advantage: None (paper) or mean (code) / std / dapo / uid.
    filter_ratio: fraction of groups (mean / std) or of samples per group (uid) that the filter drops.
    code_env_copy: mimic the official env-copy divergence (steps hit un-synced originals after turn 1).
    clip_eps (ε): PPO clip, eps_low = eps_high (verl clip_ratio 0.2).
    dual_clip (c): dual-clip bound for negative advantages (verl clip_ratio_c 3.0); None disables it.
    kl_coef (β): weight of the k3 KL to a frozen copy of the initial policy (verl use_kl_loss False: 0).
    kl_clamp: per-token clamp of the k3 estimate (verl low_var_kl clamps to 10).
    adv_eps: epsilon added to the group std (verl grpo: 1e-6).
    normalize: advantage inside a group: "mean_std" (paper / verl grpo) or "mean" (diagnostic, no std).
    lr: Adam learning rate of each policy (tiny nets from scratch; the official LLM runs use 1e-6).
    ppo_epochs: gradient steps per batch (on-policy: the ratio is 1 at the first one; verl ppo_epochs 1).
    max_grad_norm: gradient-norm clip (verl grad_clip 1.0).
    micro_batch_size: responses per forward/backward; gradients are accumulated over micro-batches (0: one).
    """

    K: int = 4
    alpha: float = 1.0
    rollout_mode: Literal["tree", "no_tree"] = "tree"
    group_key: tuple[str, ...] = KEY_FIELDS
    code_group_key: bool = False
    greedy_select: bool = True
    intra_turn_visibility: Literal["sequential", "parallel"] = "sequential"
    traj_samples: Literal["all_turns", "last_turn"] = "all_turns"
    filter_method: Literal["mean", "std", "dapo", "uid"] | None = None
    filter_ratio: float = 0.5
    code_env_copy: bool = False
    clip_eps: float = 0.2
    dual_clip: float | None = 3.0
    kl_coef: float = 0.0
    kl_clamp: float | None = 10.0
    adv_eps: float = 1e-6
    normalize: Literal["mean_std", "mean"] = "mean_std"
    lr: float = 3e-4
    ppo_epochs: int = 1
    max_grad_norm: float = 1.0
    micro_batch_size: int = 0

    def __post_init__(self) -> None:
        if self.K < 1:
            raise ValueError(f"K must be >= 1, got {self.K}")
        if self.rollout_mode not in ("tree", "no_tree"):
            raise ValueError(f"rollout_mode must be 'tree' or 'no_tree', got {self.rollout_mode!r}")
        bad = [f for f in self.group_key if f not in KEY_FIELDS]
        if bad or not self.group_key:
            raise ValueError(f"group_key fields must be a non-empty subset of {KEY_FIELDS}, got {self.group_key}")
        if self.intra_turn_visibility not in ("sequential", "parallel"):
            raise ValueError(
                f"intra_turn_visibility must be 'sequential' or 'parallel', got {self.intra_turn_visibility!r}"
            )
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
        if self.micro_batch_size < 0:
            raise ValueError(f"micro_batch_size must be >= 0, got {self.micro_batch_size}")
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef}")

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------------
# group keys, filter, advantages
# --------------------------------------------------------------------------------------------------


def group_keys(
    env: Sequence[int],
    agent: Sequence[str],
    turn: Sequence[int],
    fields: Sequence[str] = KEY_FIELDS,
    code_merge_k: int | None = None,
) -> list[tuple]:
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
    r"""Boolean keep-mask of the official group filter (``multi_agents_ppo_trainer.py``,
    ``_assign_consistent_uids``); ``None`` keeps everything.

    * ``mean``: drop the :math:`\lfloor ratio \cdot G \rfloor` groups with the lowest mean reward (a group of
      one sample scores 0, as in the code);
    * ``std``: drop as many groups with the lowest range-normalised variance
      :math:`\mathrm{Var}_g(r) / (\max_g r - \min_g r)^2` (each group's own range; 0 for a constant group);
    * ``dapo``: drop every zero-variance group;
    * ``uid``: inside each group drop the :math:`\lfloor ratio \cdot n_g \rfloor` samples farthest from its mean.

    Ties are broken by first appearance (a stable sort, like the code's ``sorted``).
    """
    r = np.asarray(rewards, dtype=np.float64)
    keep = np.ones(len(r), dtype=bool)
    if method is None or len(r) == 0:
        return keep
    if method not in FILTERS:
        raise ValueError(f"unknown filter {method!r}; valid: {FILTERS}")
    gid, G = _group_index(keys)
    members = [np.flatnonzero(gid == g) for g in range(G)]
    if method == "uid":
        for rows in members:
            n_drop = int(math.floor(ratio * len(rows))) if len(rows) > 1 else 0
            if n_drop:
                dev = np.abs(r[rows] - r[rows].mean())
                keep[rows[np.argsort(-dev, kind="stable")[:n_drop]]] = False
        return keep
    if method == "dapo":
        zero_var = np.array([np.ptp(r[rows]) == 0 for rows in members])
        return ~zero_var[gid]
    if method == "mean":
        score = np.array([r[rows].mean() if len(rows) > 1 else 0.0 for rows in members])
    else:  # std: range-normalised variance of each group
        score = np.array([np.var(r[rows]) / np.ptp(r[rows]) ** 2 if np.ptp(r[rows]) > 0 else 0.0 for rows in members])
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


def _filter_per_policy(reward: np.ndarray, keys: list[tuple], policy: list[str], cfg: ATGRPOConfig) -> np.ndarray:
    """The official filter runs on each trainer's own batch (one per policy; per role in per-role mode)."""
    keep = np.ones(len(reward), dtype=bool)
    pol = np.asarray(policy, dtype=object)
    for name in dict.fromkeys(policy):
        rows = np.flatnonzero(pol == name)
        keep[rows] = group_filter(reward[rows], [keys[i] for i in rows], cfg.filter_method, cfg.filter_ratio)
    return keep


def _normalise(reward: np.ndarray, keys: list[tuple], keep: np.ndarray, cfg: ATGRPOConfig) -> np.ndarray:
    r"""GRPO advantage of the kept samples within their group (verl ``compute_grpo_outcome_advantage``):
    :math:`A = (r - \mathrm{mean}_g r) / (\mathrm{std}_g r + \varepsilon)`; 0 for dropped samples."""
    adv = np.zeros(len(reward))
    if keep.any():
        kept_keys = [k for k, m in zip(keys, keep, strict=True) if m]
        adv[keep] = group_advantages(torch.as_tensor(reward[keep]), kept_keys, cfg.normalize, cfg.adv_eps).numpy()
    return adv


def compute_advantages(ro: Rollout, cfg: ATGRPOConfig, agent_to_policy: Mapping[str, str] | None = None) -> Batch:
    """Group the rollout's samples (AT keys or trajectory groups), filter, and normalise within groups.

    As in the official trainer, the batch is first split by policy (``agent_to_policy``; None = one policy):
    group keys never span two policies and the filter runs on each policy's samples separately.
    """
    chunks = ro.chunks
    if not chunks:
        return Batch([], [], [], 0, 0)
    sigma = agent_to_policy or {}
    env = np.concatenate([c.env for c in chunks])
    branch = np.concatenate([c.branch for c in chunks])
    turn = np.concatenate([np.full(len(c.env), c.turn) for c in chunks])
    agent = [c.agent for c in chunks for _ in range(len(c.env))]
    policy = [sigma.get(a, "") for a in agent]
    reward = np.concatenate([c.reward for c in chunks])
    sizes = [len(c.env) for c in chunks]
    if cfg.rollout_mode == "tree":
        keys = group_keys(env, agent, turn, cfg.group_key, cfg.K if cfg.code_group_key else None)
        keys = [(p, *k) for p, k in zip(policy, keys, strict=True)]
        keep = _filter_per_policy(reward, keys, policy, cfg)
        adv = _normalise(reward, keys, keep, cfg)
    elif cfg.traj_samples == "all_turns":
        adv, keep, keys = _trajectory_advantages(ro.K, env, branch, reward, policy, cfg)
    else:  # official no_tree: keep the samples of each env's maximum turn over its K trajectories, key (env,)
        last = np.full(env.max() + 1, -1)
        np.maximum.at(last, env, turn)
        keys = [(p, int(e)) for p, e in zip(policy, env, strict=True)]
        keep = turn == last[env]
        keep[keep] = _filter_per_policy(
            reward[keep],
            [k for k, m in zip(keys, keep, strict=True) if m],
            [p for p, m in zip(policy, keep, strict=True) if m],
            cfg,
        )
        adv = _normalise(reward, keys, keep, cfg)
    n_groups = len({k for k, m in zip(keys, keep, strict=True) if m})
    rows, advs, off = [], [], 0
    for s in sizes:
        k = np.flatnonzero(keep[off : off + s])
        rows.append(k)
        advs.append(adv[off : off + s][k])
        off += s
    return Batch(chunks, rows, advs, n_groups, int(keep.sum()))


def _trajectory_advantages(
    K: int, env: np.ndarray, branch: np.ndarray, reward: np.ndarray, policy: list[str], cfg: ATGRPOConfig
) -> tuple[np.ndarray, np.ndarray, list[tuple]]:
    r"""Standard GRPO over trajectories: :math:`R_k = \sum_{t,i} r^{(k)}_{t,i}` (all agents of trajectory
    ``k``), advantage normalised over the ``K`` trajectories of the env and given to every sample of ``k``."""
    traj = env * K + branch  # trajectory id
    uniq, inv = np.unique(traj, return_inverse=True)
    R = np.zeros(len(uniq))
    np.add.at(R, inv, reward)  # R_k = sum_{t,i} r_{t,i}
    tkeys = [(int(e),) for e in uniq // K]
    tkeep = group_filter(R, tkeys, cfg.filter_method, cfg.filter_ratio)
    A = _normalise(R, tkeys, tkeep, cfg)
    keys = [(p, int(e)) for p, e in zip(policy, env, strict=True)]
    return A[inv], tkeep[inv], keys


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


def _dist_world() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    return 1


def _allreduce_grads(params: Sequence[torch.nn.Parameter]) -> None:
    """Average gradients over processes under torchrun (rollouts are sharded by env), on each parameter's
    own device (CUDA under NCCL, CPU under gloo)."""
    world = _dist_world()
    if world == 1:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        torch.distributed.all_reduce(p.grad)
        p.grad /= world


def _agent_data(batch: Batch, js: list[int]) -> tuple:
    """The kept samples of one agent's chunks: (obs, tokens, old log-probs, mask, advantages), padded."""
    obs = _cat_obs([_take_obs(batch.chunks[j].obs, batch.rows[j]) for j in js])
    sel = [torch.as_tensor(batch.rows[j], dtype=torch.long) for j in js]
    toks = _pad_cat([batch.chunks[j].tokens[r] for j, r in zip(js, sel, strict=True)])
    old = _pad_cat([batch.chunks[j].logp[r] for j, r in zip(js, sel, strict=True)])
    msk = _pad_cat([batch.chunks[j].mask[r] for j, r in zip(js, sel, strict=True)])
    adv = torch.cat([torch.as_tensor(batch.adv[j], dtype=torch.float32) for j in js])
    return obs, toks, old, msk, adv


def _micro_batches(n: int, size: int) -> list[np.ndarray]:
    idx = np.arange(n)
    return [idx] if size <= 0 or size >= n else [idx[i : i + size] for i in range(0, n, size)]


def _accumulate(pol: Any, ref: Any, role: str, data: tuple, n_tok_total: float, cfg: ATGRPOConfig) -> dict:
    """Forward/backward of one agent's samples in micro-batches; every micro-batch's token-mean loss is
    weighted by its share of the policy's tokens, so the summed gradient equals the full batch's token mean."""
    obs, toks, old, msk, adv = data
    acc: dict[str, float] = {}
    for mb in _micro_batches(len(adv), cfg.micro_batch_size):
        t = torch.as_tensor(mb, dtype=torch.long)
        lp = pol.logprobs(_take_obs(obs, mb), role, toks[t])
        dev = lp.device
        m, o, a = msk[t].to(dev), old[t].to(dev), adv[t].to(dev)
        # L = -mean_tok min(rho A, clip(rho, 1-eps, 1+eps) A), dual clip for A < 0 (iclr26.core.grpo.policy_loss)
        loss, st = policy_loss(lp, o, a, m, cfg.clip_eps, None, "token_mean", dual_clip=cfg.dual_clip)
        if ref is not None and cfg.kl_coef > 0:  # + beta * k3 KL(pi || pi_ref), clamped like low_var_kl
            with torch.no_grad():
                ref_lp = ref.logprobs(_take_obs(obs, mb), role, toks[t]).to(dev)
            kl = kl_k3(lp, ref_lp, m, "token_mean", clamp=cfg.kl_clamp)
            loss = loss + cfg.kl_coef * kl
            st["kl"] = float(kl.detach())
        w = float(m.sum()) / max(n_tok_total, 1.0)
        (loss * w).backward()
        for k, v in st.items():
            acc[k] = acc.get(k, 0.0) + w * float(v)
    return acc


def update_policies(
    batch: Batch,
    workflow: Workflow,
    policies: Mapping[str, Any],
    agent_to_policy: Mapping[str, str],
    optimizers: Mapping[str, torch.optim.Optimizer],
    cfg: ATGRPOConfig,
    refs: Mapping[str, Any] | None = None,
) -> dict[str, dict]:
    """One PPO-clip update per policy on the samples of the agents it plays (the router of the paper).

    Per policy and epoch: one optimiser step whose gradient is the token mean over all its samples
    (accumulated over micro-batches, averaged over processes under torchrun, clipped to ``max_grad_norm``).
    """
    stats: dict[str, dict] = {}
    for name, pol in policies.items():
        mine = [j for j, c in enumerate(batch.chunks) if agent_to_policy[c.agent] == name and len(batch.rows[j])]
        if not mine:
            continue
        params = [p for p in pol.parameters() if p.requires_grad]
        per_agent: dict[str, list[int]] = {}  # one forward per agent (its role decides the prompt / grammar)
        for j in mine:
            per_agent.setdefault(batch.chunks[j].agent, []).append(j)
        data = {a: _agent_data(batch, js) for a, js in per_agent.items()}
        n_tok = float(sum(float(d[3].sum()) for d in data.values()))
        for _ in range(cfg.ppo_epochs):
            optimizers[name].zero_grad(set_to_none=True)
            st: dict[str, float] = {}
            for a, d in data.items():
                for k, v in _accumulate(pol, (refs or {}).get(name), workflow.role(a), d, n_tok, cfg).items():
                    st[k] = st.get(k, 0.0) + v
            _allreduce_grads(params)
            gn = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf"))
            st["grad_norm"] = float(gn)
            optimizers[name].step()
        st["n_tokens"] = n_tok
        stats[name] = st
    return stats


class ATGRPOTrainer:
    """Rollouts + grouping + per-policy updates for one workflow.

    ``make_env(seeds)`` builds an environment batch with one branch per seed. ``policies`` maps policy names
    to policies; ``agent_to_policy`` is sigma (one name for every agent = the shared, role-conditioned
    policy; one name per agent = role-specialised policies). With ``kl_coef > 0`` a frozen copy of each
    initial policy is the reference.
    """

    def __init__(
        self,
        cfg: ATGRPOConfig,
        workflow: Workflow,
        policies: Mapping[str, Any],
        agent_to_policy: Mapping[str, str],
        make_env: Callable[[list[int]], Any],
        optimizer_factory: Callable[[Any], torch.optim.Optimizer] | None = None,
    ):
        self.cfg, self.workflow = cfg, workflow
        self.policies, self.agent_to_policy, self.make_env = dict(policies), dict(agent_to_policy), make_env
        factory = optimizer_factory or (
            lambda p: torch.optim.Adam([q for q in p.parameters() if q.requires_grad], lr=cfg.lr)
        )
        self.optimizers = {n: factory(p) for n, p in self.policies.items()}
        self.refs = {n: _frozen_copy(p) for n, p in self.policies.items()} if cfg.kl_coef > 0 else None
        self.samples_seen = 0

    def collect(self, seeds: Sequence[int], generator: torch.Generator | None = None) -> Rollout:
        K = self.cfg.K
        env = self.make_env([s for s in seeds for _ in range(K)])
        mode = "tree" if self.cfg.rollout_mode == "tree" else "independent"
        return rollout(
            env,
            len(seeds),
            K,
            self.workflow,
            self.policies,
            self.agent_to_policy,
            self.cfg.alpha,
            mode=mode,
            greedy_select=self.cfg.greedy_select,
            generator=generator,
            code_env_copy=self.cfg.code_env_copy,
        )

    def step(self, seeds: Sequence[int], generator: torch.Generator | None = None) -> dict[str, Any]:
        ro = self.collect(seeds, generator)
        batch = compute_advantages(ro, self.cfg, self.agent_to_policy)
        stats = update_policies(
            batch, self.workflow, self.policies, self.agent_to_policy, self.optimizers, self.cfg, self.refs
        )
        rewards = np.concatenate([c.reward for c in ro.chunks]) if ro.chunks else np.zeros(0)
        n = ro.n_samples
        if _dist_world() > 1:  # global sample count keeps every rank's budget loop in step
            dev = (
                torch.device("cuda", torch.cuda.current_device())
                if torch.distributed.get_backend() == "nccl"
                else torch.device("cpu")
            )
            t = torch.tensor([n], dtype=torch.long, device=dev)
            torch.distributed.all_reduce(t)
            n = int(t.item())
        self.samples_seen += n
        return {
            "n_samples": n,
            "n_kept": batch.n_kept,
            "n_groups": batch.n_groups,
            "train_success": float(np.mean(ro.success)) if ro.success is not None and len(ro.success) else 0.0,
            "reward_mean": float(rewards.mean()) if len(rewards) else 0.0,
            "policy": stats,
        }


def _frozen_copy(policy: Any) -> Any:
    import copy

    ref = copy.deepcopy(policy)
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def shard(items: Sequence[Any], rank: int, world: int) -> list[Any]:
    """The environments of process ``rank`` out of ``world`` (round robin), for rollouts under torchrun."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} not in [0, {world})")
    return [x for i, x in enumerate(items) if i % world == rank]
