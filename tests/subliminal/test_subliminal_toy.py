"""Toy-model side: teacher forcing vs greedy data, brute-force finder, masked loss, single-block training,
preference metric, attribution patching."""

import pytest
import torch
import torch.nn.functional as F

from iclr26.core.transformer import TransformerConfig, generate
from iclr26.subliminal.attribution import attribution_patching, patched_metric
from iclr26.subliminal.toy import (
    StudentConfig,
    brute_force_divergence,
    build_model,
    find_divergence_tokens,
    finetune_student,
    generate_completions,
    masked_lm_loss,
    pad_batch,
    preference_exact,
    preference_sampled,
    teacher_forced_argmax,
)
from iclr26.subliminal.world import VOCAB, NumberRow, make_number_prompts, persona

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CFG = TransformerConfig(vocab_size=len(VOCAB), d_model=32, n_layers=2, n_heads=2, max_len=64)


def _model(seed=0, scale=1.0):
    m = build_model(CFG, seed)
    with torch.no_grad():  # larger weights: argmaxes that depend on the context
        for p in m.parameters():
            p.mul_(scale)
    return m.eval()


def _rows(model, n=12, system=(), seed=0):
    prompts = make_number_prompts(n, seed)
    comps = generate_completions(model, prompts, system, max_new_tokens=8)
    return [NumberRow(p, c) for p, c in zip(prompts, comps, strict=True)]


def test_teacher_forced_argmax_reproduces_greedy_tokens():
    model = _model(scale=20.0)
    sys_b = persona("raven")
    rows = _rows(model, system=sys_b)
    preds = teacher_forced_argmax(model, rows, sys_b)
    assert all(p.tolist() == list(r.completion) for p, r in zip(preds, rows, strict=True))
    res = find_divergence_tokens(rows, (model, sys_b), [(model, sys_b)])
    assert res.decision_points == [[] for _ in rows]  # identical counterfactual: nothing diverges
    assert res.factual_agreement([r.completion for r in rows]) == 1.0


@pytest.mark.parametrize("pos", ["rope", "learned"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_cached_generation_equals_full_recompute(pos, temperature):
    cfg = TransformerConfig(vocab_size=len(VOCAB), d_model=32, n_layers=2, n_heads=2, max_len=64, pos=pos)
    model = build_model(cfg, 3)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(20.0)
    x = torch.randint(3, len(VOCAB), (16, 9), generator=torch.Generator().manual_seed(0))
    ref = generate(
        model.eval(), x, 12, temperature=temperature, eos_id=VOCAB.eos, generator=torch.Generator().manual_seed(1)
    )
    got = generate(
        model,
        x,
        12,
        temperature=temperature,
        eos_id=VOCAB.eos,
        generator=torch.Generator().manual_seed(1),
        kv_cache=True,
    )
    assert torch.equal(ref[0], got[0]) and torch.equal(ref[1], got[1])
    assert len(set(ref[0][:, 9:].flatten().tolist())) > 3  # the continuations are not constant


def test_batched_finder_equals_brute_force():
    model = _model(scale=20.0)
    sys_b = persona("raven")
    rows = _rows(model, n=6, system=sys_b, seed=1)
    contexts = [(model, sys_b), (model, persona("owl")), (model, persona("cat")), (model, ())]
    res = find_divergence_tokens(rows, contexts[0], contexts[1:])
    sets, ties = brute_force_divergence(rows, contexts)
    assert sum(len(d) for d in res.decision_points) > 0
    for d, s, t in zip(res.decision_points, sets, ties, strict=True):
        assert (set(d) ^ s) <= t


def test_masked_loss_equals_manual_gather():
    model = _model(seed=3)
    seqs = [[1, 5, 6, 7, 8, 9], [1, 5, 10, 11]]
    masks = [[False, False, True, False, True, True], [False, True, False, True]]
    ids, tgt = pad_batch(seqs, masks)
    got = masked_lm_loss(model, ids, tgt)
    terms = []
    for s, m in zip(seqs, masks, strict=True):
        logits = model(torch.tensor([s])).logits[0]
        for k in range(1, len(s)):
            if m[k]:
                terms.append(F.cross_entropy(logits[k - 1][None], torch.tensor([s[k]])))
    assert got.item() == pytest.approx(torch.stack(terms).mean().item(), rel=1e-5)


def test_single_block_training_leaves_the_rest_bit_identical():
    base = _model(seed=4)
    rows = _rows(_model(seed=5, scale=20.0), n=8)
    masks = [[True] * len(r.completion) for r in rows]
    student = finetune_student(base, rows, masks, StudentConfig(steps=3, batch_size=4, warmup_steps=1), 0, trainable=0)
    before, after = dict(base.named_parameters()), dict(student.named_parameters())
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed and all(n.startswith("blocks.0.") for n in changed)
    last = finetune_student(base, rows, masks, StudentConfig(steps=3, batch_size=4, warmup_steps=1), 0, trainable=-1)
    changed = {n for n, p in last.named_parameters() if not torch.equal(before[n], p)}
    assert changed and all(n.startswith("blocks.1.") for n in changed)
    full = finetune_student(base, rows, masks, StudentConfig(steps=3, batch_size=4, warmup_steps=1), 0)
    assert not torch.equal(full.tok_emb.weight, base.tok_emb.weight)


def test_student_loss_only_sees_masked_tokens():
    base = _model(seed=6)
    rows = _rows(_model(seed=7, scale=20.0), n=8)
    none = [[False] * len(r.completion) for r in rows]
    student = finetune_student(base, rows, none, StudentConfig(steps=3, batch_size=4, warmup_steps=1), 0)
    assert all(torch.equal(p, q) for p, q in zip(base.parameters(), student.parameters(), strict=True))


def test_exact_preference_inside_the_sampled_interval():
    model = _model(seed=8, scale=3.0)
    for target in ("owl", "cat", "raven"):
        exact = preference_exact(model, target)
        s = preference_sampled(model, target, n_per_question=2000, seed=1)
        assert 0.0 <= exact <= 1.0
        assert s["ci_low"] <= exact <= s["ci_high"], (target, exact, s)


def _pairs(model):
    rows = _rows(model, n=4, system=persona("raven"), seed=2)
    clean = torch.tensor([[VOCAB.bos, *persona("raven"), *r.prompt, *r.completion] for r in rows[:1]])
    patch = torch.tensor([[VOCAB.bos, *persona("owl"), *rows[0].prompt, *rows[0].completion]])
    pos = torch.tensor([clean.shape[1] - 3])
    return clean, patch, pos, torch.tensor([VOCAB.id["3"]]), torch.tensor([VOCAB.id["7"]])


def test_attribution_completeness_and_zero_for_identical_runs():
    model = _model(seed=9, scale=5.0)
    clean, patch, pos, a, b = _pairs(model)
    attr = attribution_patching(model, clean, patch, pos, a, b, steps=200)
    with torch.no_grad():
        m_clean = torch.stack([patched_metric(model, clean, clean, layer, pos, a, b) for layer in range(2)])
        m_patch = torch.stack([patched_metric(model, clean, patch, layer, pos, a, b) for layer in range(2)])
    target = (m_patch - m_clean)[:, 0]
    assert target.abs().max() > 1e-3
    assert torch.allclose(attr[0].sum(-1), target, rtol=0.05, atol=1e-4)
    # the animal token (position 3) is where clean and patch differ first
    assert attr[0, 0, :3].abs().max() == 0
    zero = attribution_patching(model, clean, clean, pos, a, b, steps=3)
    assert zero.abs().max() == 0


def test_attribution_rejects_misaligned_pairs():
    model = _model()
    with pytest.raises(ValueError, match="align"):
        attribution_patching(
            model, torch.zeros(1, 5, dtype=torch.long), torch.zeros(1, 6, dtype=torch.long), [2], [1], [2]
        )


def test_same_seed_same_numbers():
    teacher = _model(seed=11, scale=20.0)
    prompts = make_number_prompts(6, 4)
    a = generate_completions(teacher, prompts, temperature=1.0, seed=5, max_new_tokens=6)
    assert a == generate_completions(teacher, prompts, temperature=1.0, seed=5, max_new_tokens=6)
    rows = [NumberRow(p, c) for p, c in zip(prompts, a, strict=True)]
    masks = [[True] * len(c) for c in a]
    cfg = StudentConfig(steps=2, batch_size=3, warmup_steps=1)
    s1 = finetune_student(_model(seed=12), rows, masks, cfg, 7)
    s2 = finetune_student(_model(seed=12), rows, masks, cfg, 7)
    assert all(torch.equal(p, q) for p, q in zip(s1.parameters(), s2.parameters(), strict=True))
