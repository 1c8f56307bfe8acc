"""The language-aligned (CLIP-like) union channel of ShapesSG and the exact per-pair CGP it feeds."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from iclr26.apt.apt import CGP
from iclr26.apt.config import APTConfig, DataConfig, HeadConfig, OptimConfig, RunConfig
from iclr26.apt.models import RelationModel
from iclr26.apt.names import OBJECTS, PREDICATES, load_table
from iclr26.apt.runner import run_seed
from iclr26.apt.shapes_sg import Split, aligned_channel, generate
from iclr26.apt.train_eval import batch_of

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TINY = DataConfig(n_train=60, n_val=4, n_test=20)


def _toy_split() -> Split:
    """One image of 3 objects, all 6 ordered pairs; (0, 1) is 'lying on', (2, 0) is 'near'."""
    pairs = [(i, j) for i in range(3) for j in range(3) if i != j]
    label = {(0, 1): PREDICATES.index("lying on") + 1, (2, 0): PREDICATES.index("near") + 1}
    n = len(pairs)
    return Split(
        obj_cls=torch.zeros(3, dtype=torch.long),
        obj_vis=torch.zeros(3, 4),
        pair_s=torch.tensor([p[0] for p in pairs]),
        pair_o=torch.tensor([p[1] for p in pairs]),
        pair_label=torch.tensor([label.get(p, 0) for p in pairs]),
        pair_union=torch.zeros(n, 4),
        pair_geo=torch.zeros(n, 9),
        pair_img=torch.zeros(n, dtype=torch.long),
        img_obj_start=torch.tensor([0, 3]),
        obj_pose=torch.zeros(3, dtype=torch.long),
        obj_stride=torch.zeros(3, dtype=torch.long),
    )


def test_channel_is_the_predicate_of_the_unordered_pair_scaled_plus_unit_noise():
    split, pred = _toy_split(), load_table()[1]
    a, d = 0.7, pred.shape[1]
    t = aligned_channel(split, pred, a, np.random.default_rng(5)).numpy()
    noise = np.random.default_rng(5).normal(0.0, 1.0, (6, d))
    pairs = list(zip(split.pair_s.tolist(), split.pair_o.tolist(), strict=True))
    lying, near = pred[PREDICATES.index("lying on")], pred[PREDICATES.index("near")]
    expect = {(0, 1): lying, (1, 0): lying, (2, 0): near, (0, 2): near, (1, 2): 0 * near, (2, 1): 0 * near}
    for n, p in enumerate(pairs):
        np.testing.assert_allclose(t[n], a * np.sqrt(d) * expect[p] + noise[n], rtol=1e-5, atol=1e-5)


def test_channel_off_leaves_the_world_bit_identical_and_on_adds_only_the_channel():
    off = generate(replace(TINY, text_align=0.0), 3)
    on = generate(replace(TINY, text_align=0.5), 3)
    assert off.train.pair_text is None and off.train.union_dim == TINY.feat_dim
    for a, b in ((off.train, on.train), (off.test, on.test)):
        for name in ("obj_vis", "pair_union", "pair_geo", "pair_label", "pair_s", "pair_o", "obj_cls"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        assert b.pair_text.shape == (len(b.pair_label), 384) and b.union_dim == TINY.feat_dim + 384
    assert torch.equal(generate(replace(TINY, text_align=0.5), 3).test.pair_text, on.test.pair_text)
    assert not torch.equal(generate(replace(TINY, text_align=0.5), 4).test.pair_text[:20], on.test.pair_text[:20])


def test_strong_channel_points_at_the_annotated_predicate_not_an_object_name():
    data = generate(replace(TINY, text_align=3.0), 0)
    obj, pred = load_table()
    sp = data.train
    t = torch.nn.functional.normalize(sp.pair_text, dim=-1)
    fg = torch.nonzero(sp.pair_label > 0).squeeze(1)
    guess = (t[fg] @ torch.from_numpy(pred).T).argmax(-1) + 1
    assert (guess == sp.pair_label[fg]).float().mean() > 0.95
    # the row is the predicate's vector (1-based label -> row label - 1), not an object row
    best_pred = (t[fg] @ torch.from_numpy(pred).T).max(-1).values.mean()
    assert best_pred > (t[fg] @ torch.from_numpy(obj).T).max(-1).values.mean()
    # pairs with no predicate either way carry noise only: cosine with every predicate near 0
    s, o, lab = sp.pair_s.tolist(), sp.pair_o.tolist(), sp.pair_label.tolist()
    annotated = {(a, b) for a, b, y in zip(s, o, lab, strict=True) if y > 0}
    bg = [n for n, (a, b) in enumerate(zip(s, o, strict=True)) if (a, b) not in annotated and (b, a) not in annotated]
    assert (t[bg] @ torch.from_numpy(pred).T).abs().mean() < 0.1
    # the reverse of an annotated pair carries the same predicate (one union region)
    index = {(a, b): n for n, (a, b) in enumerate(zip(s, o, strict=True))}
    rev = torch.tensor([index[(o[n], s[n])] for n in fg.tolist()])
    rev_guess = (t[rev] @ torch.from_numpy(pred).T).argmax(-1) + 1
    assert (rev_guess == sp.pair_label[fg]).float().mean() > 0.95


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_bad_strength_is_refused(bad):
    with pytest.raises(ValueError, match="text_align"):
        generate(replace(TINY, text_align=bad), 0)


def test_models_read_the_channel_as_part_of_the_union_input():
    data = generate(replace(TINY, text_align=0.5), 0)
    sp = data.train
    idx = torch.arange(10)
    b = batch_of(sp, idx)
    assert torch.equal(b["union"], torch.cat([sp.pair_union[idx], sp.pair_text[idx]], -1))
    obj, pred = (torch.from_numpy(x) for x in load_table())
    for v in ("b0", "apt", "cgp", "noprompt"):
        m = RelationModel(obj, pred, v, APTConfig(), HeadConfig(), TINY.feat_dim, sp.union_dim)
        assert m(b).shape == (10, 1 + len(PREDICATES))
    # the union channel changes the scores (the models do read it)
    m = RelationModel(obj, pred, "b0", APTConfig(), HeadConfig(), TINY.feat_dim, sp.union_dim)
    b2 = dict(b, union=torch.cat([sp.pair_union[idx], torch.zeros_like(sp.pair_text[idx])], -1))
    assert not torch.allclose(m(b), m(b2))


def test_parameter_matched_adapter_stays_matched_with_the_wider_union():
    obj, pred = (torch.from_numpy(x) for x in load_table())
    union = 64 + 384
    apt = RelationModel(obj, pred, "apt", APTConfig(), HeadConfig(), 64, union).added_parameters()
    adapter = RelationModel(obj, pred, "adapter", APTConfig(), HeadConfig(), 64, union).added_parameters()
    narrow = RelationModel(obj, pred, "apt", APTConfig(), HeadConfig(), 64).added_parameters()
    assert apt > narrow and abs(adapter - apt) / apt < 0.01


@pytest.mark.parametrize("gate", ["softmax", "sigmoid"])
@pytest.mark.parametrize("ln", [True, False])
def test_cgp_forward_pairs_equals_forward_on_the_expanded_grid(gate, ln):
    torch.manual_seed(0)
    cgp = CGP(12, 7, num_basis=4, prompt_len=3, gate=gate, bps_layernorm=ln, rcg_hidden=5, frf_hidden=6)
    with torch.no_grad():  # non-zero biases so that a dropped or doubled bias shows
        for p in cgp.parameters():
            p.add_(0.3 * torch.randn_like(p))
    e, v = torch.randn(5, 12), torch.randn(3, 7)
    ref, w_ref = cgp(e.unsqueeze(0).expand(3, 5, 12), v.unsqueeze(1).expand(3, 5, 7))
    out, w = cgp.forward_pairs(e, v)
    assert out.shape == (3, 5, 12) and w.shape == (3, 5, 4)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w, w_ref, rtol=1e-5, atol=1e-6)
    # each output depends on its own concept and context only
    e2 = e.clone()
    e2[2] += 1.0
    out2, _ = cgp.forward_pairs(e2, v)
    assert torch.equal(out2[:, [0, 1, 3, 4]], out[:, [0, 1, 3, 4]]) and not torch.allclose(out2[:, 2], out[:, 2])
    with pytest.raises(ValueError):
        cgp.forward_pairs(e.unsqueeze(0), v)


def test_cgp_model_prototypes_use_the_per_pair_path():
    obj, pred = (torch.from_numpy(x) for x in load_table())
    torch.manual_seed(1)
    m = RelationModel(obj, pred, "cgp", APTConfig(), HeadConfig(), 4, 6)
    ctx = torch.randn(3, 6 + 9)
    e = m.pred_static.unsqueeze(0).expand(3, len(PREDICATES), -1)
    ref = m.cgp(e, ctx.unsqueeze(1).expand(3, len(PREDICATES), -1))[0]
    torch.testing.assert_close(m.cgp_embeddings(ctx)[0], ref, rtol=1e-5, atol=1e-5)


def test_one_seed_runs_every_model_with_the_channel():
    cfg = RunConfig(
        data=replace(TINY, text_align=0.5),
        optim=OptimConfig(steps=3, batch_size=32, warmup_steps=1),
        models=("b0", "apt", "adapter"),
        mi_clusters=4,
        workers=1,
    )
    out = run_seed(0, cfg)
    assert set(out["models"]) == {"b0", "apt", "adapter"} and set(out["ov"]) == {"b0", "cgp"}
    assert "novel_mR@20" in out["ov"]["cgp"] and len(OBJECTS) == 12


def test_pilot_refuses_claim_seeds_and_unknown_fields():
    from iclr26.apt.pilot import main

    for argv in (
        ["--seed", "7", "--field", "text_align", "--values", "0.1"],
        ["--seed", "0", "--field", "text_align", "--values", "0.1"],
        ["--seed", "100", "--field", "no_such_field", "--values", "0.1"],
        ["--seed", "100", "--field", "text_align", "--values", "a,b"],
    ):
        with pytest.raises(SystemExit):
            main(argv)


def test_pilot_gate_values_are_b0s_head_minus_tail():
    from iclr26.apt.pilot import gate_values

    cfg = RunConfig(data=replace(TINY, text_align=0.5), optim=OptimConfig(steps=3, batch_size=32, warmup_steps=1))
    row = gate_values(cfg, 100)
    assert row["head_minus_tail"] == pytest.approx(row["head_R@20"] - row["tail_R@20"])
    assert 0.0 <= row["tail_R@20"] <= 100.0 and "b0_zero_shot_novel_mR@20" in row
