"""Scale ``real`` on the real SmolLM2-135M-Instruct (offline), kept small: the probe's training never sees
a generated answer, labels come from checking answers (not from the prompt), steering at alpha 0 leaves the
logits unchanged, the claims run end to end and a rerun reads its generations from the cache."""

import json
import re
from dataclasses import replace

import numpy as np
import pytest
import torch

from iclr26.dishonesty import real_scale
from iclr26.dishonesty.probe import ProbeConfig
from iclr26.dishonesty.protocol import label_evilmath
from iclr26.dishonesty.real_scale import (
    CAPITALS,
    HARMFUL_PREAMBLES,
    RealConfig,
    chat_ids,
    fit_instructed_probe,
    instructed_pairs,
    question_pool,
    run_real_seed,
)
from iclr26.dishonesty.steering import SteeringHook

TINY = RealConfig(
    n_arith=4, n_capitals=4, n_eval=6, n_pair_statements=8, layers=(4, 8), max_new_tokens=6, alphas=(-2.0, 0.0)
)


def test_question_pool_keeps_probe_statements_apart_from_questions():
    qs, statements = question_pool(RealConfig(), seed=0)
    capitals_asked = {q["q"].rsplit(" ", 1)[1].rstrip("?") for q in qs if "capital" in q["q"]}
    assert all(c not in s for c in capitals_asked for s in statements)
    assert len(statements) == RealConfig().n_pair_statements and len(qs) == 32 + 12
    assert question_pool(RealConfig(), seed=1)[0] != qs  # the seed draws the pool


@pytest.mark.real
def test_probe_training_never_generates(smollm2, monkeypatch):
    model, tok = smollm2

    def no_generation(*a, **k):
        raise AssertionError("the instructed-pairs probe must not see a generated answer")

    monkeypatch.setattr(model, "generate", no_generation)
    _, statements = question_pool(TINY, seed=3)
    prompts, responses, y = instructed_pairs(tok, statements)
    assert [tok.decode(r) for r in responses] == statements + statements  # teacher-forced statements only
    assert y.tolist() == [0] * len(statements) + [1] * len(statements)  # 1 = the dishonest instruction
    assert "dishonest" in tok.decode(prompts[-1]) and "dishonest" not in tok.decode(prompts[0])
    probe, layer, sweep, sep = fit_instructed_probe(model, tok, statements, TINY, ProbeConfig(), seed=3)
    assert layer in (4, 8) and set(sweep) == {4, 8} and sep > 0


@pytest.mark.real
def test_steering_at_alpha_zero_leaves_logits_unchanged(smollm2):
    model, tok = smollm2
    ids = torch.tensor([chat_ids(tok, None, "What is 2 plus 3?")])
    with torch.no_grad():
        base = model(input_ids=ids).logits
        v = np.random.default_rng(0).normal(size=model.config.hidden_size)
        with SteeringHook(model, 16, v, 0.0):
            same = model(input_ids=ids).logits
        with SteeringHook(model, 16, v, 4.0):
            moved = model(input_ids=ids).logits
    assert torch.equal(base, same)
    assert (moved - base).abs().max() > 1e-2


def _canned_generate(tok):
    """Answers from the prompt text: right for honest prompts and the twins, wrong for every other
    dishonest/strategic prompt (so labels taken from the prompt would disagree with the answers)."""
    capitals = dict(CAPITALS)
    count = {"n": 0}

    def fake(model, tok_, prompts, **kw):
        out = []
        for p in prompts:
            text = tok.decode(p)
            user = text.rsplit("What is", 1)[1]
            add = re.search(r"(\d+) plus (\d+)", user)
            gold = str(int(add[1]) + int(add[2])) if add else capitals[re.search(r"capital of (\w+)", user)[1]]
            count["n"] += 1
            harmful = any(h in text for h in HARMFUL_PREAMBLES)
            answer = ("Rome" if gold != "Rome" else "Paris") if not add else str(int(gold) + 3)
            out.append(
                tok(answer if harmful and count["n"] % 2 else f"It is {gold}.", add_special_tokens=False)["input_ids"]
            )
        return out

    return fake


@pytest.mark.real
def test_labels_come_from_checking_answers(smollm2, smollm2_dir, tmp_path, monkeypatch):
    model, tok = smollm2
    monkeypatch.setattr(real_scale, "generate", _canned_generate(tok))
    cfg = replace(TINY, cache_dir=str(tmp_path))
    m = run_real_seed(model, tok, smollm2_dir, cfg, ProbeConfig(), seed=2, say=lambda *_: None)
    items = {c: [it for it in m["items"] if it["condition"] == c] for c in ("dishonest", "strategic")}
    for c, its in items.items():
        wrong = [not re.search(rf"\b{it['gold']}\b", it["response"]) for it in its]
        assert 0 < sum(wrong) < len(its)
        assert [it["label"] for it in its] == ["New Incorrect" if w else "Correct" for w in wrong]
        assert m[f"lie_rate_{c}"] == pytest.approx(np.mean(wrong))
    assert m["honest_accuracy"] == 1.0 and m["n_lies"] + m["n_truths"] == 2 * m["n_kept"]


@pytest.mark.real
@pytest.mark.slow
def test_real_seed_labels_from_answers_and_cache(smollm2, smollm2_dir, tmp_path, monkeypatch):
    model, tok = smollm2
    cfg = replace(TINY, cache_dir=str(tmp_path))
    m = run_real_seed(model, tok, smollm2_dir, cfg, ProbeConfig(), seed=11, say=lambda *_: None)
    assert m["n_kept"] >= 4  # real weights answer plain additions and capitals
    for it in m["items"]:  # every label is the answer checker's verdict on the response text
        assert it["label"] == label_evilmath(it["response"], it["reference"], it["gold"])
    dis = [it for it in m["items"] if it["condition"] == "dishonest"]
    assert m["lie_rate_dishonest"] == pytest.approx(np.mean([it["label"] == "New Incorrect" for it in dis]))
    assert set(m["steer_lie_rate"]) == {-2.0, 0.0} and np.isfinite(m["steer_unit_separation"])

    monkeypatch.setattr(model, "generate", lambda *a, **k: (_ for _ in ()).throw(AssertionError("not cached")))
    again = run_real_seed(model, tok, smollm2_dir, cfg, ProbeConfig(), seed=11, say=lambda *_: None)
    assert again["cache_hits"] > 0
    drop = ("cache_hits", "layer_sweep")
    assert json.dumps({k: v for k, v in again.items() if k not in drop}, sort_keys=True, default=str) == json.dumps(
        {k: v for k, v in m.items() if k not in drop}, sort_keys=True, default=str
    )
