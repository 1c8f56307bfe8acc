"""The sparse self-attention (per-query key lists) computes the same function as the dense one; the key
lists are exactly the mask's allowed keys; precomputed per-sequence lists give the same numbers; the run's
<AS> targets are entries by default."""

import copy

import numpy as np
import pytest
import torch

from iclr26.infgen.config import config_for
from iclr26.infgen.experiment import build
from iclr26.infgen.model import (
    META,
    InfGenConfig,
    InfGenModel,
    attach_neighbours,
    collate,
    collate_maps,
    group_mask,
    neighbours,
    seq_neighbours,
)
from iclr26.infgen.tokenizer import END_UID_BASE, IGNORE, SOA, MotionTokenizer, SceneTokenizer, long_run_windows
from iclr26.infgen.world import TinyTown, cut_windows

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def seqs():
    town = TinyTown()
    tok = SceneTokenizer(motion=MotionTokenizer(n_bins=13))
    wins = cut_windows(town.simulate(70, seed=5), length=13)
    return [tok(w, np.random.default_rng(i))[0] for i, w in enumerate(wins[1:4])]


def _pair(sparse_kw=None, **kw):
    """A dense and a sparse model with the same (randomised-head) weights."""
    torch.manual_seed(0)
    cfg = dict(d_model=32, n_heads=4, n_dec_layers=2, n_actions=169, n_slots=32, max_segments=128, window=6)
    cfg.update(kw)
    dense = InfGenModel(InfGenConfig(**cfg, sparse_attn=False))
    for head in (dense.tl_head, dense.mo_head):
        torch.nn.init.normal_(head[-1].weight, std=0.1)
    sparse = InfGenModel(InfGenConfig(**cfg, sparse_attn=True))
    sparse.load_state_dict(dense.state_dict())
    return dense, sparse


def _batch(seqs):
    return collate(seqs), collate_maps([s.map for s in seqs])


@pytest.mark.parametrize("kw", [{}, {"rel_hidden": 16}, {"rel_bias": False}, {"official_residual": True}])
def test_sparse_attention_equals_dense(seqs, kw):
    dense, sparse = _pair(**kw)
    b, mb = _batch(seqs)  # three sequences of different lengths: padding included
    assert len({len(s) for s in seqs}) > 1
    ld, td = dense.loss(b, mb)
    ls, ts = sparse.loss(b, mb)
    ld.backward()
    ls.backward()
    with torch.no_grad():
        hd, _ = dense(b, mb)
        hs, _ = sparse(b, mb)
    real = b["kind"] >= 0
    assert torch.allclose(hd[real], hs[real], atol=1e-5)
    assert float(ld.detach()) == pytest.approx(float(ls.detach()), rel=1e-6)
    for (name, pd), ps in zip(dense.named_parameters(), sparse.parameters(), strict=True):
        if pd.grad is None:
            assert ps.grad is None, name
            continue
        assert torch.allclose(pd.grad, ps.grad, atol=1e-5, rtol=1e-4), name


def test_key_lists_are_the_allowed_keys(seqs):
    b, _ = _batch(seqs)
    meta = {k: b[k] for k in META}
    allowed = group_mask(meta, meta, 6)
    idx, valid = neighbours(allowed)
    rebuilt = torch.zeros_like(allowed)
    for i in range(idx.shape[0]):
        for q in range(idx.shape[1]):
            keys = idx[i, q][valid[i, q]]
            assert bool((keys[1:] > keys[:-1]).all())  # increasing, no duplicates
            rebuilt[i, q, keys] = True
    assert torch.equal(rebuilt, allowed)
    assert idx.shape[2] == int(allowed.sum(-1).max()) < allowed.shape[2]  # fewer keys than the dense row


def test_precomputed_key_lists_give_the_same_numbers(seqs):
    _, sparse = _pair()
    b, mb = _batch(seqs)
    lists = [seq_neighbours(sparse, s) for s in seqs]
    b2 = attach_neighbours(b, lists)
    with torch.no_grad():
        l1, _ = sparse.loss(b, mb)
        l2, _ = sparse.loss(b2, mb)
        h1, _ = sparse(b, mb)
        h2, _ = sparse(b2, mb)
    assert torch.equal(h1, h2) and float(l1) == float(l2)
    # lists of another sequence would change the numbers (the batch really uses them)
    b3 = attach_neighbours(b, [lists[1], lists[0], lists[2]])
    with torch.no_grad():
        h3, _ = sparse(b3, mb)
    assert not torch.allclose(h1, h3, atol=1e-3)


def test_training_with_cached_key_lists_matches_uncached(seqs):
    from iclr26.core.train import TrainConfig
    from iclr26.infgen.training import train_infgen

    _, a = _pair()
    b = copy.deepcopy(a)
    cfg = TrainConfig(steps=3, lr=1e-3, warmup_steps=1, progress=False)
    ra = train_infgen(a, seqs, cfg, batch_size=2, seed=0, cache_neighbours=True)
    rb = train_infgen(b, seqs, cfg, batch_size=2, seed=0, cache_neighbours=False)
    assert ra.losses == pytest.approx(rb.losses, rel=1e-5)


def test_run_trains_the_insertion_heads_on_entries_by_default():
    small, paper = config_for("small"), config_for("paper")
    assert small.data.as_targets == "entries" and paper.data.as_targets == "all"  # paper scale: official loss
    tok, _ = build(config_for("smoke"), 0)
    assert tok.as_targets == "entries"
    run = TinyTown().simulate(120, seed=4)
    share = {}
    for mode in ("entries", "all"):
        t = SceneTokenizer(motion=MotionTokenizer(n_bins=5), as_targets=mode)
        n_entry = n_tgt = 0
        for w, s in long_run_windows(t, run, length=11, stride=2):
            agent = (s.kind == SOA) & (s.uid < END_UID_BASE) & (s.tgt != IGNORE)
            first = {int(u): int(w.valid[:, j].argmax()) for j, u in enumerate(w.uid)}
            entry = np.array([first[int(u)] == int(tt) for u, tt in zip(s.uid[agent], s.t[agent], strict=True)])
            n_entry += int(entry.sum())
            n_tgt += int(agent.sum())
        share[mode] = n_entry / n_tgt
    assert share["entries"] == 1.0  # every agent type target is a new agent
    assert share["all"] < 0.3  # the official loss: mostly agents already present
