"""Group-causal mask, perturbation, teacher-forced = incremental, loss."""

import numpy as np
import pytest
import torch

from iclr26.infgen.model import InfGenConfig, InfGenModel, KVCache, collate, collate_maps, group_mask
from iclr26.infgen.tokenizer import AS_KINDS, EOS, MO, MS, RS, SOA, SOS, TL, TYPE, MotionTokenizer, SceneTokenizer
from iclr26.infgen.world import TinyTown, cut_windows

WINDOW = 8


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def seq():
    town = TinyTown()
    w = cut_windows(town.simulate(70, seed=5), length=19)[2]
    tok = SceneTokenizer(motion=MotionTokenizer(n_bins=13))
    s, _ = tok(w, np.random.default_rng(0))
    return s


def tiny_model(**kw):
    torch.manual_seed(0)
    cfg = dict(d_model=32, n_heads=4, n_dec_layers=2, n_actions=169, n_slots=32, max_segments=128, window=WINDOW)
    cfg.update(kw)
    m = InfGenModel(InfGenConfig(**cfg))
    # the zero-initialised heads would hide differences: randomise them
    for head in (m.tl_head, m.mo_head):
        torch.nn.init.normal_(head[-1].weight, std=0.1)
    return m.eval()


def rule(q, k, has_as, as_own_mo=True, mo_all_ends=True):
    """The group-causal attention rules, written independently, for one (query, key) pair (defaults: the
    official attention, causal mask OR force mask)."""
    if k["t"] <= q["t"] - WINDOW:
        return False
    agent_as = (SOA, TYPE, MS, RS)
    same = q["uid"] >= 0 and q["uid"] == k["uid"]
    if q["kind"] == TL:
        return (
            (k["kind"] == TL and k["t"] == q["t"])
            or (k["kind"] == TL and k["light"] == q["light"] and k["t"] < q["t"])
            or (k["kind"] == MO and k["t"] == q["t"] - 1)
        )
    if q["kind"] in AS_KINDS:
        return (
            (k["kind"] in AS_KINDS and k["t"] == q["t"] and k["seq"] <= q["seq"])
            or (k["kind"] == TL and k["t"] == q["t"])
            or (k["kind"] == MO and k["t"] == q["t"] - 1)
            or (k["kind"] in agent_as and same and k["t"] < q["t"])
            or (k["kind"] in (SOS, EOS) and k["t"] < q["t"])
            or (as_own_mo and k["kind"] == MO and same and k["t"] < q["t"])
        )
    if q["kind"] == MO:
        return (
            (k["kind"] == MO and k["t"] == q["t"])
            or (k["kind"] == TL and k["t"] == q["t"])
            or (k["kind"] in agent_as and same and k["t"] <= q["t"])
            or (k["kind"] in (SOS, EOS) and k["t"] <= q["t"] and (mo_all_ends or (q["uid"], k["t"]) in has_as))
            or (k["kind"] == MO and same and k["t"] < q["t"])
        )
    raise AssertionError


@pytest.mark.parametrize("as_own_mo, mo_all_ends", [(True, True), (False, True), (True, False), (False, False)])
def test_mask_matches_rule_table(seq, as_own_mo, mo_all_ends):
    sl = np.flatnonzero((seq.t >= 6) & (seq.t <= 10))  # steps 6..10 (an agent enters at 8), all pairs
    b = collate([seq])
    meta = {k: b[k][:, sl] for k in ("kind", "t", "uid", "light", "seq")}
    n = len(sl)
    flags = dict(as_sees_own_motion=as_own_mo, mo_sees_all_block_ends=mo_all_ends)
    mask = group_mask(meta, meta, WINDOW, **flags)[0].numpy()
    toks = [{k: int(meta[k][0, i]) for k in meta} for i in range(n)]
    has_as = {(tk["uid"], tk["t"]) for tk in toks if tk["kind"] in (SOA, TYPE, MS, RS)}
    expected = np.array([[rule(q, k, has_as, as_own_mo, mo_all_ends) for k in toks] for q in toks])
    assert mask.shape == expected.shape
    assert (mask == expected).all()
    assert mask.diagonal().all()
    official = group_mask(meta, meta, WINDOW)[0].numpy()
    assert (mask != official).any() == (not (as_own_mo and mo_all_ends))  # each flag matters on this scene


def test_mask_window_hides_old_keys(seq):
    b = collate([seq])
    meta = {k: b[k] for k in ("kind", "t", "uid", "light", "seq")}
    mask = group_mask(meta, meta, 3)[0]
    t = b["t"][0]
    assert not (mask & (t[None, :] <= t[:, None] - 3)).any()


def test_later_tokens_never_change_earlier_logits(seq):
    m = tiny_model()
    b = collate([seq])
    mb = collate_maps([seq.map])
    with torch.no_grad():
        h0, _ = m(b, mb)
    # perturb everything from the first token of step 6 on, and separately a late AS token of step 4
    for start in (int(np.flatnonzero(seq.t == 6)[0]), int(np.flatnonzero((seq.t == 4) & (seq.kind == RS))[-1])):
        b2 = {k: v.clone() for k, v in b.items()}
        sl = slice(start, None)
        b2["feat"][:, sl] += torch.randn_like(b2["feat"][:, sl])
        b2["pose"][:, sl] += torch.randn_like(b2["pose"][:, sl]) * 5
        b2["val"][:, sl] = (b2["val"][:, sl] + 1) % 3
        with torch.no_grad():
            h1, _ = m(b2, mb)
        # tokens before `start` that are not in the same group as it (same step, same kind group)
        g_start = (seq.t[start], seq.kind[start] in AS_KINDS, seq.kind[start])
        earlier = [i for i in range(start) if not (seq.t[i] == g_start[0] and seq.kind[i] == MO == g_start[2])]
        assert torch.allclose(h0[0, earlier], h1[0, earlier], atol=1e-6)
        assert not torch.allclose(h0[0, start:], h1[0, start:], atol=1e-4)  # the perturbation did something


def test_teacher_forced_equals_incremental(seq):
    m = tiny_model(window=4)
    b = collate([seq])
    mb = collate_maps([seq.map])
    with torch.no_grad():
        h_full, mc = m(b, mb)
        cache = KVCache()
        outs = []
        # feed in groups: TL group, each AS token alone, MO group; prune the cache as generation does
        bounds = [0]
        for i in range(1, len(seq) + 1):
            if i == len(seq) or seq.kind[i] != seq.kind[i - 1] or seq.kind[i] in AS_KINDS or seq.t[i] != seq.t[i - 1]:
                bounds.append(i)
        for a, z in zip(bounds[:-1], bounds[1:]):
            cache.prune(int(seq.t[a]) - 4 + 1)
            part = {k: v[:, a:z] for k, v in b.items()}
            outs.append(m.extend(part, mc, cache))
        h_inc = torch.cat(outs, 1)
    assert torch.allclose(h_full, h_inc, atol=1e-5)
    assert torch.allclose(m.mo_head(h_full), m.mo_head(h_inc), atol=1e-5)


def test_loss_ignores_padding(seq):
    m = tiny_model()
    short = collate([seq])
    mb = collate_maps([seq.map])
    padded = collate([seq, _truncated(seq, 40)])
    mb2 = collate_maps([seq.map, seq.map])
    with torch.no_grad():
        l1, t1 = m.loss(short, mb)
        h, mc = m(padded, mb2)
        # padding of the short sequence changes no hidden state of the real tokens
        h_short, _ = m(collate([_truncated(seq, 40)]), mb)
    assert torch.allclose(h[1, :40], h_short[0], atol=1e-5)
    assert set(t1) == {"mo", "tl", "type", "ms", "rs"}
    assert float(l1) == pytest.approx(sum(t1.values()), rel=1e-5)


def _truncated(seq, n):
    import copy

    s = copy.copy(seq)
    for f in type(seq).FIELDS:
        setattr(s, f, getattr(seq, f)[:n])
    return s


def test_paper_configs():
    sizes = {s: InfGenConfig.paper(s) for s in ("small", "large", "xl")}
    assert sizes["large"].d_model == 128 and sizes["xl"].n_heads == 8 and sizes["xl"].n_dec_layers == 6
    with pytest.raises(ValueError):
        InfGenConfig.paper("huge")


def official_pair(q, k):
    """The official attention for one pair, as the union of its causal and force masks (read from
    ``_build_all_tokens_mask_for_{tl,tg,motion}`` and ``_build_force_mask_for_{tl,tg,motion}``): every step
    holds the same agents in the same order, so a token is (kind, step, agent index, position in its block)."""
    qk, kk, qt, kt = q["kind"], k["kind"], q["t"], k["t"]
    agent = (SOA, TYPE, MS, RS)
    same = q["agent"] >= 0 and q["agent"] == k["agent"]
    if qk == TL:
        causal = (kk == TL and kt == qt) or (kk == TL and k["light"] == q["light"] and kt < qt)
        causal = causal or (kk == MO and kt == qt - 1)
        force = kk == TL and k["light"] == q["light"] and kt < qt
    elif qk in AS_KINDS:
        causal = (kk in AS_KINDS and kt == qt and k["pos"] <= q["pos"]) or (kk == TL and kt == qt)
        causal = causal or (kk == MO and kt == qt - 1)
        causal = causal or (kk in AS_KINDS and kt < qt and k["pos"] == q["pos"])  # diag_tg: same position only
        causal = causal or (kk in (SOS, EOS) and kt < qt)
        force = qk in agent and kt < qt and same and (kk == MO or kk in agent)  # own motion and all four <AS>
        force = force or (qk == SOS and kk == MO and kt == qt - 1)
    else:
        causal = (kk == MO and kt == qt) or (kk == TL and kt == qt) or (kk in agent and same and kt <= qt)
        causal = causal or (kk in (SOS, EOS) and kt <= qt) or (kk == MO and same and kt < qt)
        force = (
            (kk in agent and same and kt <= qt) or (kk in (SOS, EOS) and kt <= qt) or (kk == MO and same and kt < qt)
        )
    return causal or force


def test_default_mask_is_the_official_causal_or_force_mask():
    from iclr26.infgen.tokenizer import END_UID_BASE
    from iclr26.infgen.world import Scene

    town = TinyTown()
    T, A = 5, 3
    states = np.zeros((T, A, 4))
    states[..., 0] = np.arange(A)[None] * 8.0 - 40
    states[..., 1] = -1.75
    tl = np.zeros((T, town.map.num_lights), int)
    scene = Scene(
        states, np.ones((T, A), bool), np.tile([4.5, 1.9, 1.5], (A, 1)), np.zeros(A, int), np.arange(A), tl, town.map
    )
    s, _ = SceneTokenizer(motion=MotionTokenizer(n_bins=5), randomize_ids=False)(scene)
    keep = np.flatnonzero(s.uid < END_UID_BASE)  # the official block has no SOA_end slot
    b = collate([s])
    meta = {k: b[k][:, keep] for k in ("kind", "t", "uid", "light", "seq")}
    ours = group_mask(meta, meta, 100)[0].numpy()
    toks = []
    for i in keep:
        block = np.flatnonzero((s.t == s.t[i]) & np.isin(s.kind, AS_KINDS) & (s.uid < END_UID_BASE))
        toks.append(
            dict(
                kind=int(s.kind[i]),
                t=int(s.t[i]),
                light=int(s.light[i]),
                agent=int(s.uid[i]),
                pos=int(np.searchsorted(block, i)) if s.kind[i] in AS_KINDS else -1,
            )
        )
    expected = np.array([[official_pair(q, k) for k in toks] for q in toks])
    assert (ours == expected).all()
    legacy = group_mask(meta, meta, 100, as_sees_own_motion=False, mo_sees_all_block_ends=False)[0].numpy()
    assert (legacy != expected).any()
