import json

import pytest
from sman_helpers import tiny_app

from iclr26.sman_bench.corpus import (
    actions_generate,
    load_app,
    load_corpus,
    page_parent,
    page_path_ids,
    parse_action_string,
    scroll_endpoints,
    swipe_direction,
    write_app,
    write_corpus,
)
from iclr26.sman_bench.generator import SMOKE_CONFIG, generate_corpus


def test_loader_round_trip_double_json(tmp_path):
    corpus, _ = generate_corpus(3, SMOKE_CONFIG)
    write_corpus(corpus, tmp_path)
    raw = (tmp_path / "app0" / "all_action_id.json").read_text()
    assert isinstance(json.loads(raw), str)  # JSON-encoded text, decoded twice by the loader
    back = load_corpus(tmp_path, read_xml=True)
    assert set(back.apps) == set(corpus.apps)
    for name, app in corpus.apps.items():
        b = back.apps[name]
        assert b.action_ids == app.action_ids
        assert b.T == app.T
        assert b.page_actions == app.page_actions
        assert b.roles == app.roles
        for p in list(app.page_actions)[:5]:
            assert b.page(p).elements == app.page(p).elements
    # page folders with xml and html
    page = next(iter(corpus.apps["app0"].page_actions))
    assert (tmp_path / "app0" / page / f"{page}-html.txt").exists()


def test_loader_single_encoded_and_errors(tmp_path):
    app = tiny_app()
    d = write_app(app, tmp_path)
    (d / "all_action_id.json").write_text(json.dumps(app.action_ids))  # plain JSON is accepted too
    assert load_app(d).action_ids == app.action_ids
    (d / "all_triple.json").write_text("{not json")
    with pytest.raises(ValueError, match="malformed"):
        load_app(d)
    (d / "all_triple.json").unlink()
    with pytest.raises(ValueError, match="all_triple.json"):
        load_app(d)
    with pytest.raises(ValueError):
        load_corpus(tmp_path / "nowhere")


def test_transitions_and_back():
    app = tiny_app()
    for s, a, t in app.triples:
        assert app.step(s, a) == t
    assert app.step("r", 5) == "r"  # invalid action keeps the page
    assert app.step("r", 999) == "r"
    assert page_parent("r_0_3") == "r_0"
    assert page_parent("r") == "r"  # root back is a no-op
    assert page_path_ids("r_0_3_5") == [0, 3, 5]
    assert app.root == "r"


def test_scroll_endpoint_geometry():
    b = ((0, 0), (1080, 2000))
    assert scroll_endpoints(b, "up") == ((540, 1500), (540, 500))
    assert scroll_endpoints(b, "down") == ((540, 500), (540, 1500))
    assert scroll_endpoints(b, "left") == ((810, 1000), (270, 1000))
    assert scroll_endpoints(b, "right") == ((270, 1000), (810, 1000))
    for d in ("up", "down", "left", "right"):
        assert swipe_direction(*scroll_endpoints(b, d)) == d
    with pytest.raises(ValueError):
        scroll_endpoints(b, "sideways")


def test_action_strings_parse_and_page_view():
    p = parse_action_string("click(Red Lamp, [40,240][1040,370])")
    assert p == {"kind": "click", "text": "Red Lamp", "bounds": ((40, 240), (1040, 370))}
    assert parse_action_string("input(Filter, 'red')")["text"] == "red"
    with pytest.raises(ValueError):
        parse_action_string("tap(3)")
    app = tiny_app()
    view = app.page("r_1")
    kinds = [e.kind for e in view.elements]
    assert kinds == ["input", "scroll"]
    assert view.resolve("input", 0, " RED ") == 6
    assert view.resolve("input", 0, "blue") is None
    assert view.resolve("scroll", 1, "up") == 7
    assert view.resolve("scroll", 1, "down") is None
    assert view.resolve("click", 0) is None  # wrong kind


def test_actions_generate_covers_valid_clicks():
    corpus, _ = generate_corpus(0, SMOKE_CONFIG)
    app = corpus.apps["app0"]
    for page in list(app.page_actions)[:10]:
        cands = set(actions_generate(app.xml[page]))
        for aid in app.page_actions[page]:
            s = app.id_to_action[aid]
            if s.startswith("click") or s.startswith("scroll"):
                assert s in cands
