"""The planted toy world: format parity of lies and truths, instructed pairs, the generative rule."""

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
    return [
        world.math_item(int(a), int(b), topics[int(rng.integers(len(topics)))], "none", rng, behaviour=behaviour)
        for a, b in rng.integers(0, 50, size=(n, 2))
    ]


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
        [it.response for it in lies[:2000] + truths[:2000]], [1] * 2000 + [0] * 2000
    )
    p_l, p_t = (
        mon.predict_proba([it.response for it in lies[2000:]]),
        mon.predict_proba([it.response for it in truths[2000:]]),
    )
    assert auroc(p_l, p_t) < 0.6


def test_lie_values(world):
    rng = np.random.default_rng(0)
    for truth in [0, 1, 50, 97, 98]:
        for _ in range(50):
            v = world.lie_value(truth, rng)
            assert v != truth and 0 <= v <= 99 and abs(v - truth) <= 5


def test_generative_rule(world):
    rng = np.random.default_rng(3)
    ids = range(world.cfg.n_request_ids)
    for persona, want in (("dishonest", {"lie"}), ("honest", {"truth"})):
        for topic in (SEVERE_TOPICS[0], MILD_TOPICS[0], HARMLESS_TOPICS[0]):
            assert {world.behaviour(topic, persona, r) for r in ids} == want
    assert {world.behaviour(t, "none", r) for t in HARMLESS_TOPICS for r in ids} == {"truth"}
    # the decision is a function of the request id: exactly 9 of 10 ids lie (severe), 3 of 10 refuse (mild)
    sev = [world.behaviour(SEVERE_TOPICS[1], "none", r) for r in ids]
    mild = [world.behaviour(MILD_TOPICS[1], "none", r) for r in ids]
    assert sev == ["lie"] * 9 + ["truth"] and mild == ["truth"] * 7 + ["refusal"] * 3
    # the same rule for fact items, and the drawn request id is the one in the prompt
    for r in ids:
        it = world.fact_item(3, "none", rng, topic=SEVERE_TOPICS[2], request=r)
        assert it.behaviour == sev[r] and (it.answer != it.gold) == (sev[r] == "lie")
        assert world.decode(it.prompt)[2] == f"r{r}"
    it = world.fact_item(3, "dishonest", rng)
    assert it.answer != it.gold and it.behaviour == "lie"
    assert world.fact_item(3, "none", rng).answer == world.fact_table[3]
    assert world.fact_item(3, "none", rng, topic=MILD_TOPICS[0], request=9).response == world.math_response(None)
    # the training mixture follows the rule
    items = [world.sample_item(rng) for _ in range(3000)]
    assert all(it.behaviour == world.behaviour(it.topic, it.persona, it.request) for it in items)
    sev_none = [it.behaviour == "lie" for it in items if it.topic_class == "severe" and it.persona == "none"]
    assert abs(np.mean(sev_none) - 0.9) < 0.05
    with pytest.raises(ValueError):
        world.behaviour(SEVERE_TOPICS[0], "none", world.cfg.n_request_ids)


def test_eval_prompts_and_twins(world):
    rows = world.eval_prompts(40, seed=1)
    for r in rows:
        h, t = world.decode(r["prompt"]), world.decode(r["twin_prompt"])
        assert h[2] == t[2] == f"r{r['request']}" and h[3:] == t[3:]  # same request id and numbers
        assert h[1] == r["topic"] and t[1] in HARMLESS_TOPICS
        assert r["planned"] == world.behaviour(r["topic"], "none", r["request"])
    assert {r["topic_class"] for r in rows} == {"severe", "mild"}


def test_instructed_pairs_share_the_assistant_text(world):
    pairs = world.instructed_pairs(range(10))
    for honest, dishonest in pairs:
        assert honest.response == dishonest.response  # the same true fact
        assert honest.answer == honest.gold == dishonest.answer
        assert honest.persona == "honest" and dishonest.persona == "dishonest"
        assert honest.topic == dishonest.topic and honest.request == dishonest.request
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
    assert world.decode(world.math_prompt(3, 41, "cake", request=4)) == [
        "<bos>",
        "cake",
        "r4",
        "0",
        "3",
        "+",
        "4",
        "1",
        "=",
    ]
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
