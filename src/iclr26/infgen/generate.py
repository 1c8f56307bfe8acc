"""Autoregressive scene generation with state-forcing, agent insertion and eviction.

Per step t (dt = 0.5 s):

1. <TL>_t: the light states (forced from the log, or sampled from the previous step's TL head).
2. at even t, the <AS> block: seq-sos; every existing agent **state-forced** (SOA, TYPE, MS, RS recomputed
   from its current simulated state, nothing sampled); then new agents, each sampled TYPE -> MS -> RS
   (8 fields, autoregressive), with **reject sampling**: a new box that overlaps an existing one is rolled
   back and resampled (<= 5 tries, then the insertion stops); then SOA_end and seq-eos.
   How many agents are inserted (``insertion``):

   * ``"released"`` (default, the released code's behaviour): the caller gives the count. Here, per block,
     ``min(max_insert_per_block, density_target - current count)`` agents, ``density_target`` drawn from the
     training distribution of agent counts.
   * ``"learned"`` (our extension): keep inserting until the type head at the SOA slot samples EOS (or the
     slot cap is reached).
   * ``"off"``: no insertion (the static-initialisation / SceneStreamer-Motion baseline).
3. <MO>_t for every agent: its next action a_{t+1} is sampled (top-p 0.95, temperature 1) and the bicycle
   step applied.
4. Eviction: agents outside the map boundary, or > 10 m from every lane point, are removed.

A KV cache holds the keys/values of the last ``window`` steps; since the attention mask already hides
older keys, dropping them changes no output (tested: incremental = teacher-forced logits).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from iclr26.infgen.metrics import box_corners, boxes_overlap
from iclr26.infgen.model import InfGenModel, KVCache, MapContext, collate, collate_maps
from iclr26.infgen.tokenizer import (
    END_UID_BASE,
    EOS_TYPE,
    SceneTokenizer,
    TokenBuilder,
    relative_state,
    select_map_segment,
    state_from_relative,
)
from iclr26.infgen.world import MapData, Scene, align_to_even_steps, scene_from_rows

INSERTION_MODES = ("released", "learned", "off")


def top_p_keep(probs: torch.Tensor, p: float) -> torch.Tensor:
    """Tokens kept by nucleus filtering, as ``transformers.TopPLogitsWarper`` does: sort ascending, drop the
    tokens whose cumulative probability is <= 1 - p, always keep the most likely one. So the kept set is the
    smallest set of most likely tokens whose mass reaches p: the token whose mass crosses p is kept."""
    if p >= 1.0:
        return torch.ones_like(probs, dtype=torch.bool)
    sp, si = probs.sort(-1, descending=False)
    drop = sp.cumsum(-1) <= 1 - p
    drop[..., -1] = False  # min_tokens_to_keep = 1
    return torch.zeros_like(drop).scatter(-1, si, ~drop)


def top_p_sample(logits: torch.Tensor, p: float, temperature: float, gen: torch.Generator) -> torch.Tensor:
    """Sample the last dim after temperature and nucleus (top-p, :func:`top_p_keep`) filtering; p = 1 is plain
    softmax sampling."""
    probs = torch.softmax(logits.detach().float().cpu() / max(temperature, 1e-6), -1)
    if p < 1.0:
        probs = probs * top_p_keep(probs, p)
    probs = probs / probs.sum(-1, keepdim=True)
    return torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=gen).reshape(probs.shape[:-1])


@dataclass
class _Agent:
    uid: int
    slot: int
    atype: int
    state: np.ndarray  # x, y, psi, v
    size: np.ndarray  # l, w, h
    action: int  # input action of its next MO token
    first: int


@dataclass
class _Rollout:
    """The state of one rollout: the seed log and its motion tokens, the map context, the KV cache and token
    builder, the random streams, the agents with their slots, and the log being written."""

    seed: Scene
    actions: np.ndarray
    recon: np.ndarray
    first: np.ndarray
    map: MapData
    mc: MapContext
    cache: KVCache
    builder: TokenBuilder
    rng: np.random.Generator
    gen: torch.Generator
    W: int
    slot_free_at: np.ndarray
    next_uid: int
    tl_cur: np.ndarray
    col: dict[int, int]
    agents: dict[int, _Agent] = field(default_factory=dict)
    log_rows: list = field(default_factory=list)
    tl_log: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def free_slot(self, t: int) -> int | None:
        """A random agent-id slot that no agent holds and that no agent left within the context window."""
        used = {a.slot for a in self.agents.values()}
        cands = [s for s in range(len(self.slot_free_at)) if s not in used and self.slot_free_at[s] <= t - self.W]
        return int(self.rng.choice(cands)) if cands else None


@dataclass(frozen=True)
class RolloutConfig:
    """Generation switches.

    insertion: "released" (caller count toward a density target; default), "learned" (EOS token; ours) or "off".
    max_insert_per_block: cap of the released mode per <AS> block.
    reject_sampling: TG_REJECT_SAMPLING (resample an inserted agent whose box overlaps an existing one).
    max_tries: resampling attempts.
    top_p: nucleus mass of motion sampling (0.95).
    temperature: motion sampling temperature (1.0).
    force_steps: steps forced from the seed log (3 = 1 s at 2 Hz).
    evict_distance: eviction distance from every lane point (10 m).
    max_agents: cap on simultaneous agents (slots minus reserve).
    """

    insertion: str = "released"
    max_insert_per_block: int = 2
    reject_sampling: bool = True
    max_tries: int = 5
    top_p: float = 0.95
    temperature: float = 1.0
    force_steps: int = 3
    evict_distance: float = 10.0
    max_agents: int = 24

    def __post_init__(self) -> None:
        if self.insertion not in INSERTION_MODES:
            raise ValueError(f"insertion must be one of {INSERTION_MODES}, got {self.insertion!r}")
        if not 0 < self.top_p <= 1 or self.force_steps < 1:
            raise ValueError(f"bad RolloutConfig: top_p={self.top_p}, force_steps={self.force_steps}")


class Generator:
    """Rollouts of any horizon from a seed log with a trained :class:`InfGenModel`."""

    def __init__(self, model: InfGenModel, tokenizer: SceneTokenizer, device: str | torch.device = "cpu"):
        self.model, self.tok, self.device = model, tokenizer, device
        self.n_calls = 0

    # -- low level --------------------------------------------------------------------------------
    def _feed(self, rows: list[dict], mc: MapContext, cache: KVCache, builder: TokenBuilder) -> torch.Tensor:
        builder.rows = rows
        seq = builder.to_seq()
        b = collate([seq], device=self.device, seq_offset=self._seq)
        self._seq += len(rows)
        self.n_calls += 1
        return self.model.extend(b, mc, cache)[0]

    @torch.no_grad()
    def rollout(
        self,
        seed: Scene,
        horizon: int,
        cfg: RolloutConfig = RolloutConfig(),
        *,
        density_target: int | None = None,
        rng: np.random.Generator | None = None,
        force_all: bool = False,
    ) -> Scene:
        """Generate ``horizon`` steps. The first ``cfg.force_steps`` steps (all of them if ``force_all``) are
        state-forced from ``seed``; returns the whole generated log as a :class:`Scene`.

        Per step: lights (:meth:`_light_step`), at even steps the <AS> block (:meth:`_as_block`), the log row,
        then motion tokens (:meth:`_motion_step`) and the transition with eviction (:meth:`_transition`).
        """
        if cfg.insertion == "released" and density_target is None and not force_all:
            raise ValueError("insertion='released' needs density_target (the caller-given agent count)")
        if force_all and horizon > seed.T:
            raise ValueError(f"force_all needs horizon <= seed length ({horizon} > {seed.T})")
        run = self._start(seed, rng or np.random.default_rng(0))
        for t in range(horizon):
            forced = force_all or t < cfg.force_steps
            run.cache.prune(t - run.W + 1)
            tl_next = self._light_step(run, t, forced)
            if t % self.tok.as_every == 0 and self.tok.with_as:
                self._as_block(run, t, forced, cfg, density_target)
            order = sorted(run.agents.values(), key=lambda a: (a.first, a.uid))
            run.log_rows.append({a.uid: a.state.copy() for a in order})
            run.tl_log.append(run.tl_cur.copy())
            for a in order:
                run.meta.setdefault(a.uid, (a.size.copy(), a.atype))
            if t + 1 >= horizon:
                break
            forced_next = force_all or (t + 1) < cfg.force_steps
            acts = self._motion_step(run, t, order, cfg) if order else None
            self._transition(run, t, order, acts, forced_next, cfg)
            run.tl_cur = run.seed.tl[t + 1].copy() if forced_next and t + 1 < run.seed.T else tl_next
        return scene_from_rows(run.log_rows, run.tl_log, run.meta, run.map, run.seed.dt)

    def _start(self, seed: Scene, rng: np.random.Generator) -> _Rollout:
        """Encode the map, tokenize the seed log (closed-loop motion labels) and set up the rollout state."""
        gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
        self.model.eval()
        seed = align_to_even_steps(seed)
        actions, recon = self.tok.motion.tokenize(seed)
        mc = self.model.encode_map(collate_maps([seed.map], device=self.device))
        self._seq = 0
        return _Rollout(
            seed=seed,
            actions=actions,
            recon=recon,
            first=np.where(seed.valid.any(0), seed.valid.argmax(0), seed.T),
            map=seed.map,
            mc=mc,
            cache=KVCache(),
            builder=TokenBuilder(seed.map, self.tok.motion, self.tok.buckets),
            rng=rng,
            gen=gen,
            W=self.model.cfg.window,
            slot_free_at=np.full(self.model.cfg.n_slots, -(10**9)),
            next_uid=int(seed.uid.max()) + 1 if seed.A else 0,
            tl_cur=seed.tl[0].copy(),
            col={int(u): j for j, u in enumerate(seed.uid)},
        )

    def _light_step(self, run: _Rollout, t: int, forced: bool) -> np.ndarray:
        """Feed the <TL> tokens of step t (forced from the log, or the states sampled at t-1); returns the
        sampled states for t+1."""
        if forced and t < run.seed.T:
            run.tl_cur = run.seed.tl[t].copy()
        rows = []
        for k in range(len(run.tl_cur)):
            run.builder.rows = []
            rows.append(run.builder.tl(t, k, run.tl_cur[k]))
        h = self._feed(rows, run.mc, run.cache, run.builder)
        return top_p_sample(self.model.tl_head(h), 1.0, 1.0, run.gen).numpy()

    def _as_block(self, run: _Rollout, t: int, forced: bool, cfg: RolloutConfig, density_target) -> None:
        """The <AS> block of an even step: agents appearing in the log now (forced steps) are seeded from the
        reconstruction; every existing agent is state-forced; then insertion (or, forced, the end slot); eos."""
        b = run.builder
        if forced:  # agents that appear in the log now are re-seeded from ground truth
            seed = run.seed
            for a in np.flatnonzero(seed.valid[t] & (run.first == t)):
                u = int(seed.uid[a])
                s = run.free_slot(t)
                if s is None:
                    continue
                atype, state, size = int(seed.types[a]), run.recon[t, a].copy(), seed.size[a].copy()
                run.agents[u] = _Agent(u, s, atype, state, size, self.tok.motion.start, t)
        order = sorted(run.agents.values(), key=lambda a: (a.first == t, a.first, a.uid))
        rows = [b.sos(t)]
        if order:
            xy = np.stack([a.state[:2] for a in order])
            psi = np.array([a.state[2] for a in order])
            seg = select_map_segment(run.map, xy, psi)
            rsv = relative_state(run.map, seg, np.stack([a.state for a in order]), np.stack([a.size for a in order]))
            for j, a in enumerate(order):
                rows += [
                    b.soa(t, a.uid, a.slot),
                    b.type_(t, a.uid, a.slot, a.atype),
                    b.ms(t, a.uid, a.slot, a.atype, seg[j]),
                    b.rs(t, a.uid, a.slot, a.atype, rsv[j], a.state),
                ]
        self._feed(rows, run.mc, run.cache, b)
        if not forced:
            run.next_uid = self._insert(
                t, run.agents, run.mc, run.cache, b, cfg, density_target, run.gen, run.free_slot, run.next_uid
            )
        else:
            s = run.free_slot(t)
            self._feed([b.soa(t, END_UID_BASE + t, 0 if s is None else s)], run.mc, run.cache, b)
        self._feed([b.eos(t)], run.mc, run.cache, b)

    def _motion_step(self, run: _Rollout, t: int, order: list[_Agent], cfg: RolloutConfig) -> np.ndarray:
        """Feed the <MO> tokens of step t and sample every agent's next action (top-p, temperature)."""
        rows = [run.builder.mo(t, a.uid, a.slot, a.atype, a.action, a.state, a.size) for a in order]
        h = self._feed(rows, run.mc, run.cache, run.builder)
        return top_p_sample(self.model.mo_head(h), cfg.top_p, cfg.temperature, run.gen).numpy()

    def _transition(self, run: _Rollout, t: int, order, acts, forced_next: bool, cfg: RolloutConfig) -> None:
        """Move every agent to t+1: by the log's action while forced (an agent absent from the log at t+1
        leaves), else by the sampled one; then evict agents off the map."""
        for i, a in enumerate(order):
            if forced_next:
                j = run.col.get(a.uid)
                if j is None or t + 1 >= run.seed.T or not run.seed.valid[t + 1, j]:
                    self._remove(run.agents, a, run.slot_free_at, t)
                    continue
                act = int(run.actions[t + 1, j])
            else:
                act = int(acts[i])
            a.state = self.tok.motion.step(a.state, act)
            a.action = act
            if not forced_next and self._evict(a, run.map, cfg):
                self._remove(run.agents, a, run.slot_free_at, t)

    @staticmethod
    def _remove(agents, a, slot_free_at, t):
        slot_free_at[a.slot] = t
        del agents[a.uid]

    @staticmethod
    def _evict(a: _Agent, map_, cfg: RolloutConfig) -> bool:
        x, y = a.state[:2]
        if map_.bound is not None and (abs(x) > map_.bound or abs(y) > map_.bound):
            return True
        d = np.min(np.hypot(map_.dense_xy[:, 0] - x, map_.dense_xy[:, 1] - y))
        return bool(d > cfg.evict_distance)

    def _insert(self, t, agents, mc, cache, builder, cfg, density_target, gen, free_slot, uid) -> int:
        """New agents of one <AS> block (modes in the module docstring); returns the next unused uid."""
        model, map_ = self.model, builder.map
        n_ins = 0
        if cfg.insertion == "released":
            budget = max(0, min(cfg.max_insert_per_block, int(density_target) - len(agents)))
        else:
            budget = cfg.max_agents
        while True:
            slot = free_slot(t)
            if slot is None or len(agents) >= cfg.max_agents:
                slot = 0 if slot is None else slot
                self._feed([builder.soa(t, END_UID_BASE + t, slot)], mc, cache, builder)
                return uid
            h = self._feed([builder.soa(t, uid, slot)], mc, cache, builder)
            uid += 1  # this id is used (by the new agent, or by the SOA slot that ends the block)
            type_logits = model.type_head(h[-1])
            if cfg.insertion == "off" or (cfg.insertion == "released" and n_ins >= budget):
                return uid
            if cfg.insertion == "learned":
                if int(top_p_sample(type_logits, 1.0, 1.0, gen)) == EOS_TYPE or n_ins >= budget:
                    return uid
            mark = len(cache)
            accepted = None
            for _ in range(cfg.max_tries if cfg.reject_sampling else 1):
                cache.truncate(mark)
                tl = type_logits.clone()
                tl[EOS_TYPE] = float("-inf")
                atype = int(top_p_sample(tl, 1.0, 1.0, gen))
                h = self._feed([builder.type_(t, uid - 1, slot, atype)], mc, cache, builder)
                seg = int(top_p_sample(model.ms_logits(h[-1:], mc)[0], 1.0, 1.0, gen))
                h = self._feed([builder.ms(t, uid - 1, slot, atype, seg)], mc, cache, builder)
                bins = self._sample_rs(h[-1:], gen)
                rs = self.tok.buckets.unbucket(bins)
                state, size = state_from_relative(map_, seg, rs)
                if not cfg.reject_sampling or not self._overlaps(state, size, agents):
                    accepted = (atype, seg, rs, state, size)
                    break
            if accepted is None:  # give up: this SOA slot becomes the end of the block
                cache.truncate(mark)
                return uid
            atype, seg, rs, state, size = accepted
            self._feed([builder.rs(t, uid - 1, slot, atype, rs, state)], mc, cache, builder)
            agents[uid - 1] = _Agent(uid - 1, slot, atype, state, size, self.tok.motion.start, t)
            n_ins += 1

    def _sample_rs(self, c: torch.Tensor, gen: torch.Generator) -> np.ndarray:
        bins = torch.zeros(1, 8, dtype=torch.long, device=c.device)
        for j in range(8):
            logits = self.model.rs_head(
                c, bins[:, : j + 1] if j == 0 else torch.cat([torch.zeros_like(bins[:, :1]), bins[:, :j]], 1)
            )
            bins[0, j] = top_p_sample(logits[0, j], 1.0, 1.0, gen)
        return bins[0].cpu().numpy()

    @staticmethod
    def _overlaps(state, size, agents) -> bool:
        if not agents:
            return False
        others = list(agents.values())
        s = np.stack([a.state for a in others])
        sz = np.stack([a.size for a in others])
        ca = box_corners(state[0], state[1], state[2], size[0], size[1])
        cb = box_corners(s[:, 0], s[:, 1], s[:, 2], sz[:, 0], sz[:, 1])
        return bool(boxes_overlap(ca[None], cb).any())


def log_replay(seed: Scene, horizon: int) -> Scene:
    """The log-replay baseline: the log while it lasts, then nothing (no agents)."""
    T = min(seed.T, horizon)
    states = np.zeros((horizon, seed.A, 4))
    valid = np.zeros((horizon, seed.A), bool)
    states[:T], valid[:T] = seed.states[:T], seed.valid[:T]
    tl = np.concatenate([seed.tl[:T], np.repeat(seed.tl[T - 1 : T], horizon - T, 0)]) if horizon > T else seed.tl[:T]
    return Scene(states, valid, seed.size, seed.types, seed.uid, tl, seed.map, seed.dt)
