"""Multi-agent drivers (linear chain, circular rounds) and the per-turn measurements.

Every agent is the same tiny VLM answering the same EXIST question about the same scene (its own
view of it); it reads the answers of up to ``max_msgs`` upstream agents as messages (window context)
or the whole transcript of the earlier turns (transcript context) and, under ViF, the relay tokens of
one upstream agent. "Seeded" episodes force agent 1's answer wrong; "natural"
ones let it answer. The last agent's answer is the system's answer; HS (Eq. 7) scores propagation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from iclr26.vif.agent import agent_turn, empty_relay
from iclr26.vif.config import DataConfig, EvalConfig, ViFConfig
from iclr26.vif.data import N_CELLS, NO, NONE, YES, instruction, make_scenes, patches, transcript, view_masks
from iclr26.vif.method import UNIMODAL, ReallocStats, hs_score
from iclr26.vif.tiny import TinyVLM


def parents(t: int, topology: str, max_msgs: int, ring: int = 4) -> tuple[list[int], int | None]:
    """(turns whose answers agent t reads, oldest first; the turn whose relay it receives).

    linear: the previous ``max_msgs`` turns, relay from t-1. circular: agents 0..ring-1 answer in rounds;
    each reads the whole previous round and receives the relay of its ring predecessor in that round.
    """
    if topology == "linear":
        return list(range(max(0, t - max_msgs), t)), (t - 1 if t > 0 else None)
    if topology == "circular":
        r, k = divmod(t, ring)
        if r == 0:
            return [], None
        prev = list(range((r - 1) * ring, r * ring))[-max_msgs:]
        return prev, (r - 1) * ring + (k - 1) % ring
    raise ValueError(f"unknown topology {topology!r}")


@dataclass
class MASResult:
    """correct [E, T]; share [T]: middle-band attention share of text queries on vision (+ relay) keys;
    unimodal [T]: share of vision tokens classified unimodal; stats: reallocation checks."""

    correct: np.ndarray
    share: np.ndarray
    unimodal: np.ndarray
    stats: ReallocStats = field(default_factory=ReallocStats)

    def summary(self) -> dict:
        c = torch.from_numpy(self.correct)
        return {
            "acc_turn": self.correct.mean(0).tolist(),
            "final_acc": float(self.correct[:, -1].mean()),
            "first_acc": float(self.correct[:, 0].mean()),
            "hs": float(hs_score(c).mean()),
            "share_turn": self.share.tolist(),
            "unimodal_turn": self.unimodal.tolist(),
        }


def vision_share(attentions: list[Tensor], layers: tuple[int, ...], layout: dict) -> float:
    """Mean over middle layers, heads and text query rows (instruction + answer) of the attention mass on
    vision and relay keys (Alloc_vision of Eq. 5-6, per text query)."""
    cols = torch.zeros(layout["T"], dtype=torch.bool)
    cols[layout["vision"]] = True
    cols[layout["relay"]] = True
    rows = slice(layout["instr"].start, layout["T"])
    vals = [attentions[l][:, :, rows][..., cols].sum(-1).mean() for l in layers]
    return float(torch.stack(vals).mean())


@dataclass
class Episodes:
    """Evaluation episodes: scenes, per-turn visible cells [E, T, 16], answers [E]."""

    scenes: object
    visible: np.ndarray

    @classmethod
    def draw(cls, seed: int, split: str, n: int, turns: int, dcfg: DataConfig, occluded: bool) -> Episodes:
        rng = np.random.default_rng([seed, 7919, sum(map(ord, split)), int(occluded)])
        sc = make_scenes(rng, n, dcfg)
        vis = np.stack([view_masks(rng, n, np.full(n, occluded), dcfg.visible_cells) for _ in range(turns)], 1)
        return cls(sc, vis)


@torch.no_grad()
def run_mas(
    model: TinyVLM,
    ep: Episodes,
    vcfg: ViFConfig,
    ecfg: EvalConfig,
    dcfg: DataConfig,
    use_vif: bool,
    seeded: bool,
    seed: int = 0,
) -> MASResult:
    """Run every episode through ``ecfg.turns`` agents (batched) and record answers and attention."""
    sc, E, T = ep.scenes, len(ep.scenes), ecfg.turns
    correct = np.zeros((E, T), dtype=bool)
    share = np.zeros((T,))
    uni = np.zeros((T,))
    stats = ReallocStats()
    gen = torch.Generator().manual_seed(seed)
    for lo in range(0, E, ecfg.batch):
        sl = slice(lo, min(E, lo + ecfg.batch))
        B = sl.stop - sl.start
        ans = sc.answer[sl]
        said = np.zeros((B, T), dtype=np.int64)
        relays: dict[int, object] = {}
        for t in range(T):
            par, rpar = parents(t, ecfg.topology, dcfg.max_msgs)
            if dcfg.context == "transcript":  # every earlier turn, oldest first: the context grows
                instr = torch.from_numpy(transcript(_take(sc, sl), said[:, :t]))
            else:
                msgs = np.full((B, dcfg.max_msgs), NONE, dtype=np.int64)
                if par:
                    msgs[:, dcfg.max_msgs - len(par) :] = said[:, par]
                instr = torch.from_numpy(instruction(_take(sc, sl), msgs))
            pat = torch.from_numpy(patches(sc.images[sl], ep.visible[sl, t]))
            relay = None
            if use_vif and vcfg.relay and vcfg.relay_count(N_CELLS):
                relay = relays.get(rpar) if rpar is not None else None
                relay = relay or empty_relay(model, B, vcfg.relay_count(N_CELLS))
            turn = agent_turn(model, pat, instr, relay, vcfg, use_vif, stats, gen)
            relays[t] = turn.relay
            pred = (turn.logit > 0).numpy().astype(np.int64)
            if seeded and t == 0:
                pred = 1 - ans
            said[:, t] = np.where(pred == 1, YES, NO)
            correct[sl, t] = pred == ans
            share[t] += vision_share(turn.out.attentions, model.cfg.middle, turn.out.layout) * B / E
            uni[t] += float((turn.morph.kind == UNIMODAL).float().mean()) * B / E
    return MASResult(correct, share, uni, stats)


def _take(sc, sl: slice):
    """The question fields of a slice of scenes (for :func:`instruction`)."""

    class _Q:
        q_color = sc.q_color[sl]
        q_shape = sc.q_shape[sl]

    return _Q
