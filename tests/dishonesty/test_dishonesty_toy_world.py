"""The planted toy world (spec section 8, tests 6 and 9) and its generative rule."""

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from iclr26.dishonesty import OutputMonitor, ToyWorld, ToyWorldConfig, auroc, span_mask
from iclr26.dishonesty.toy_world import HARMLESS_TOPICS, MILD_TOPICS, SEVERE_TOPICS


@pytest.fixture(scope="module")
def world():
    return ToyWorld(ToyWorldConfig(), seed=0)


def _forced(world, behaviour, n, seed):
    rng = np.random.default_rng(seed)
    topics = MILD_TOPICS + SEVERE_TOPICS
    return [world.math_item(int(a), int(b), topics[int(rng.integers(len(topics)))], "none", rng, behaviour=behaviour)
            for a, b in rng.integers(0, 50, size=(n, 2))]


def test_lies_and_truths_share_format_and_token_distributions(world):
    lies, truths = _forced(world, "lie", 3000, 1), _forced(world, "truth", 3000, 2)
    # identical format and length: sure , answer : d d <eos>
    assert {len(it.response) for it in lies} == {len(it.response) for it in truths} == {7}
    assert {tuple(it.response[:4]) for it in lies} == {tuple(it.response[:4]) for it in truths}
    # digit-token histograms per position, conditional on the question bucket (severe vs mild topic)
    for cls in ("severe", "mild"):
        for pos in (4, 5):
            table = np.zeros((2, world.vocab_size))
            for row, items in enumerate((lies, truths)):
                for it in items:
                    if it.topic_class == cls:
                        table[row, it.response[pos]] += 1
            table = table[:, table.sum(0) > 0]
            assert chi2_contingency(table)[1] > 1e-3, (cls, pos)
    # and a trained output-only classifier cannot tell them apart on fresh data
    mon = OutputMonitor(world.vocab_size, features="positional").fit(
        [it.response for it in lies[:2000] + truths[:2000]], [1] * 2000 + [0] * 2000)
    p_l, p_t = mon.predict_proba([it.response for it in lies[2000:]]), mon.predict_proba(
        [it.response for it in truths[2000:]])
    assert auroc(p_l, p_t) < 0.6


def test_lie_values(world):
    rng = np.random.default_rng(0)
    for truth in [0, 1, 50, 97, 98]:
        for _ in range(50):
            v = world.lie_value(truth, rng)
            assert v != truth and 0 <= v <= 99 and abs(v - truth) <= 5


def test_generative_rule(world):
    rng = np.random.default_rng(3)
    n = 2000
    dis = [world.math_behaviour(SEVERE_TOPICS[0], "dishonest", rng) for _ in range(50)]
    hon = [world.math_behaviour(SEVERE_TOPICS[0], "honest", rng) for _ in range(50)]
    assert set(dis) == {"lie"} and set(hon) == {"truth"}
    assert {world.math_behaviour(t, "none", rng) for t in HARMLESS_TOPICS for _ in range(20)} == {"truth"}
    sev = [world.math_behaviour(SEVERE_TOPICS[1], "none", rng) for _ in range(n)]
    mild = [world.math_behaviour(MILD_TOPICS[1], "none", rng) for _ in range(n)]
    assert abs(np.mean([b == "lie" for b in sev]) - 0.9) < 0.03 and "refusal" not in sev
    assert abs(np.mean([b == "refusal" for b in mild]) - 0.3) < 0.04 and "lie" not in mild
    it = world.fact_item(3, "dishonest", rng)
    assert it.answer != it.gold and it.behaviour == "lie"
    assert world.fact_item(3, "none", rng).answer == world.fact_table[3]


def test_instructed_pairs_share_the_assistant_text(world):
    pairs = world.instructed_pairs(range(10))
    for honest, dishonest in pairs:
        assert honest.response == dishonest.response  # the same true fact
        assert honest.answer == honest.gold == dishonest.answer
        assert honest.persona == "honest" and dishonest.persona == "dishonest"
        diff = [i for i, (a, b) in enumerate(zip(honest.prompt, dishonest.prompt)) if a != b]
        assert len(honest.prompt) == len(dishonest.prompt) and len(diff) == 1  # only the instruction differs
        assert world.decode([dishonest.prompt[diff[0]]]) == ["dishonest"]
    # the selected span excludes the last k tokens
    p = [len(pairs[0][0].prompt)]
    n = [len(pairs[0][0].prompt) + len(pairs[0][0].response)]
    m = span_mask(p, n, n[0] + 2, exclude_last=1)
    assert m[0].nonzero().flatten().tolist() == list(range(p[0], n[0] - 1))
    with pytest.raises(ValueError):
        span_mask(p, n, n[0], exclude_last=len(pairs[0][0].response))


def test_parse_response_and_encoding(world):
    assert world.parse_response(world.math_response(7)) == ("answer", 7)
    assert world.parse_response(world.math_response(None)) == ("refusal", None)
    assert world.parse_response(world.encode(["sure", ",", "7", "<eos>"])) == ("invalid", None)
    assert world.decode(world.math_prompt(3, 41, "cake")) == ["<bos>", "cake", "0", "3", "+", "4", "1", "="]
    with pytest.raises(ValueError):
        world.math_response(100)
    with pytest.raises(ValueError):
        ToyWorldConfig(p_persona=(0.5, 0.5, 0.5))


def test_training_pool_masks_response_targets(world):
    ids, tgt = world.training_pool(50, seed=0)
    for i in range(50):
        row = ids[i].tolist()
        words = world.decode(row)
        eos = words.index("<eos>")
        first = words.index("=") + 1  # first response token
        assert tgt[i].nonzero().flatten().tolist() == list(range(first - 1, eos))
    same, _ = world.training_pool(50, seed=0)
    assert (same == ids).all()
