import numpy as np
import pytest

from iclr26.sman_bench.corpus import page_path_ids, parse_action_string
from iclr26.sman_bench.generator import SMOKE_CONFIG, GeneratorConfig, generate_corpus
from iclr26.sman_bench.instructions import STEP_TEMPLATES, TEMPLATES, VAGUE, generate_tasks, make_task


@pytest.fixture(scope="module")
def corpus():
    return generate_corpus(0, SMOKE_CONFIG)[0]


def test_slot_values_come_from_the_trajectory(corpus):
    tasks = generate_tasks(corpus, 40, 1)
    assert len(tasks) >= 20
    for t in tasks:
        app = corpus.apps[t.app]
        texts = [parse_action_string(app.id_to_action[a]).get("text") for a in page_path_ids(t.name)]
        for slot, value in t.slots.items():
            assert value in texts, (slot, value)
            assert value in t.complete_instruct
        assert len(t.step_instruct) == len(t.gold) == len(t.roles)
        assert tuple(t.roles) in TEMPLATES
        lines = t.task.splitlines()
        assert lines[-1] == t.complete_instruct and lines[0].startswith("1. ")
        for r, s, a in zip(t.roles, t.step_instruct, t.gold):
            if r != "more":
                assert parse_action_string(app.id_to_action[a])["text"] in s
            assert s == STEP_TEMPLATES[r].format(value=t.slots.get(r, ""))


def test_easy_variant_drops_exactly_the_qa_slots(corpus):
    for t in generate_tasks(corpus, 40, 2):
        dropped = {q["slot"] for q in t.qa}
        assert dropped and "section" not in dropped
        for slot, value in t.slots.items():
            if slot in dropped:
                assert VAGUE[slot] in t.easy_instruct
                assert value not in t.easy_instruct
            else:
                assert value in t.easy_instruct
        # the answers restore the complete instruction
        restored = t.easy_instruct
        for q in t.qa:
            restored = restored.replace(VAGUE[q["slot"]], q["answer"], 1)
        assert restored == t.complete_instruct


def test_generation_is_deterministic_from_the_seed():
    a, _ = generate_corpus(7, SMOKE_CONFIG)
    b, _ = generate_corpus(7, SMOKE_CONFIG)
    c, _ = generate_corpus(8, SMOKE_CONFIG)
    assert a.apps["app0"].triples == b.apps["app0"].triples
    assert a.apps["app0"].triples != c.apps["app0"].triples
    ta = [x.to_json() for x in generate_tasks(a, 15, 3)]
    tb = [x.to_json() for x in generate_tasks(b, 15, 3)]
    assert ta == tb


def test_shortcuts_give_multiple_paths():
    corpus, meta = generate_corpus(0, GeneratorConfig(n_apps=1))
    app = corpus.apps["app0"]
    indeg = {}
    for _s, a, t in app.triples:
        if app.roles[str(a)] != "home":
            indeg[t] = indeg.get(t, 0) + 1
    # every recommended/search/popular/similar target has >= 2 incoming routes
    multi = [p for p, d in indeg.items() if d >= 2]
    assert len(multi) >= 3
    for p in multi:
        assert p in meta["app0"]["items"].values()


def test_no_template_returns_none(corpus):
    app = corpus.apps["app0"]
    root_child = next(p for p in app.page_actions if p.count("_") == 1)
    assert make_task(app, root_child, np.random.default_rng(0)) is None


def test_bad_generator_config():
    with pytest.raises(ValueError):
        GeneratorConfig(n_apps=0)
    with pytest.raises(ValueError):
        GeneratorConfig(p_popular=1.5)
