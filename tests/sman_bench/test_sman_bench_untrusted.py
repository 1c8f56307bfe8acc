"""Untrusted input: the corpus loader stays inside the corpus folder and names every malformed entry; the
action parsers never raise (LLM replies) or raise only ValueError (corpus strings), in bounded time; the LLM
agent turns every endpoint failure into an invalid action."""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sman_helpers import tiny_app

from iclr26.sman_bench.corpus import UIElement, load_app, load_corpus, parse_action_string, write_app
from iclr26.sman_bench.evaluate import Action, Observation
from iclr26.sman_bench.llm_agent import LLMAgent, LLMConfig, parse_action
from iclr26.sman_bench.paper import make_agent

FUZZ = settings(max_examples=300, deadline=1000, suppress_health_check=[HealthCheck.too_slow])


def _app_dir(tmp_path, name="corpus"):
    root = tmp_path / name
    root.mkdir()
    return root, write_app(tiny_app(), root)


def _rewrite(d, fname, fn):
    path = d / fname
    obj = json.loads(path.read_text())
    if isinstance(obj, str):
        obj = json.loads(obj)
    path.write_text(json.dumps(fn(obj)))


# ------------------------------------------------------------------------------------- the loader
def test_symlinked_app_file_and_app_folder_leaving_the_corpus_are_refused(tmp_path):
    secret = tmp_path / "outside"
    secret.mkdir()
    root, d = _app_dir(tmp_path)
    (secret / "all_triple.json").write_text((d / "all_triple.json").read_text())
    (d / "all_triple.json").unlink()
    (d / "all_triple.json").symlink_to(secret / "all_triple.json")
    with pytest.raises(ValueError, match="outside the corpus folder"):
        load_corpus(root)
    # a whole app folder that is a symlink to somewhere else
    root2 = tmp_path / "corpus2"
    root2.mkdir()
    real = write_app(tiny_app(), secret)
    (root2 / "r").symlink_to(real, target_is_directory=True)
    with pytest.raises(ValueError, match="outside the corpus folder"):
        load_corpus(root2)
    # a symlink that stays inside the corpus is fine
    root3, d3 = _app_dir(tmp_path, "corpus3")
    (root3 / "shared.json").write_text((d3 / "all_page_id.json").read_text())
    (d3 / "all_page_id.json").unlink()
    (d3 / "all_page_id.json").symlink_to(root3 / "shared.json")
    assert load_corpus(root3).apps["r"].page_ids


def test_page_names_with_dotdot_cannot_read_outside(tmp_path):
    secret = tmp_path / "x"
    secret.mkdir()
    (secret / "x-xml.txt").write_text("<hierarchy>SECRET</hierarchy>")
    root, d = _app_dir(tmp_path)
    # a page named "../../x" would read corpus/r/../../x/../../x-xml.txt = tmp/x-xml.txt... point it at x/x-xml.txt
    evil = "../../x"
    _rewrite(d, "all_page_actions.json", lambda o: {"data": o["data"] + [{"name": evil, "action_valid": []}]})
    with pytest.raises(ValueError, match="outside the corpus folder"):
        load_corpus(root, read_xml=True)
    assert evil in load_corpus(root).apps["r"].page_actions  # without read_xml the name is only a name


@pytest.mark.parametrize(
    "fname, edit, needle",
    [
        ("all_action_id.json", lambda o: [1, 2], "all_action_id.json: expected an object"),
        ("all_action_id.json", lambda o: {**o, "click(Q, [0,0][1,1])": 3}, "duplicate id 3"),
        ("all_action_id.json", lambda o: {**o, "click(Q, [0,0][1,1])": 2.5}, "id 2.5 is not an integer"),
        ("all_action_id.json", lambda o: {**o, "click(Q, [0,0][1,1])": True}, "id True is not an integer"),
        ("all_action_id.json", lambda o: {**o, "click(Q, [0,0][1,1])": "nine"}, "entry 'click(Q, [0,0][1,1])'"),
        ("all_page_actions.json", lambda o: {"pages": o["data"]}, 'expected {"data"'),
        ("all_page_actions.json", lambda o: {"data": o["data"] + [o["data"][0]]}, "duplicate page 'r'"),
        (
            "all_page_actions.json",
            lambda o: {"data": [{"name": "r", "action_valid": [0, 99]}]},
            "data[0] (page 'r'): unknown action id 99",
        ),
        (
            "all_page_actions.json",
            lambda o: {"data": [{"name": "r", "action_valid": [0, "x"]}]},
            "data[0] (page 'r'): id 'x' is not an integer",
        ),
        ("all_page_actions.json", lambda o: {"data": [{"name": "r", "action_valid": [0, 0]}]}, "listed twice"),
        ("all_page_actions.json", lambda o: {"data": [{"name": 7, "action_valid": []}]}, "data[0]: expected"),
        ("all_page_actions.json", lambda o: {"data": [{"name": "r", "action_valid": "0,1"}]}, "data[0]: expected"),
        ("all_triple.json", lambda o: {"data": o["data"] + [["r", 42, "r_42"]]}, "data[8]: unknown action id 42"),
        ("all_triple.json", lambda o: {"data": o["data"] + [["r", 1.5, "r_1"]]}, "data[8]: id 1.5 is not an integer"),
        ("all_triple.json", lambda o: {"data": o["data"] + [["r", 1]]}, "data[8]: expected [src_page"),
        ("all_triple.json", lambda o: {"data": {"r": 1}}, 'expected {"data"'),
        ("all_page_id.json", lambda o: {"r": 0, "r_0": 0}, "entry 'r_0': duplicate id 0"),
        ("all_page_id.json", lambda o: {"r": "zero"}, "entry 'r': id 'zero' is not an integer"),
    ],
)
def test_every_malformed_file_names_the_file_and_the_entry(tmp_path, fname, edit, needle):
    root, d = _app_dir(tmp_path)
    _rewrite(d, fname, edit)
    with pytest.raises(ValueError) as e:
        load_corpus(root)
    assert fname in str(e.value) and needle in str(e.value), str(e.value)


def test_unparsable_action_string_is_a_counted_skip_not_an_abort(tmp_path):
    root, d = _app_dir(tmp_path)
    _rewrite(d, "all_action_id.json", lambda o: {**{k: v for k, v in o.items() if v != 0}, "tap(A)": 0})
    app = load_corpus(root).apps["r"]
    assert app.unparsable_actions() == {0: "tap(A)"}
    page = app.page("r")
    assert page.skipped == [(0, "not a click/input/scroll string")]
    assert [e.text for e in page.elements] == ["B", "Recommended: X"]


def test_roles_empty_app_empty_corpus_and_bad_bytes(tmp_path):
    root, d = _app_dir(tmp_path)
    (d / "roles.json").write_text(json.dumps({"77": "section"}))
    with pytest.raises(ValueError, match=r"roles.json: entry '77': unknown action id"):
        load_corpus(root)
    (d / "roles.json").write_text(json.dumps({"1": 5}))
    with pytest.raises(ValueError, match=r"roles.json: entry '1': role 5"):
        load_corpus(root)
    (d / "roles.json").unlink()
    for fname in ("all_page_actions.json", "all_triple.json"):
        (d / fname).write_text(json.dumps({"data": []}))
    (d / "all_action_id.json").write_text(json.dumps({}))
    with pytest.raises(ValueError, match="all_page_actions.json: the app has no pages"):
        load_corpus(root)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no app directory"):
        load_corpus(empty)
    root2, d2 = _app_dir(tmp_path, "c2")
    (d2 / "all_triple.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(ValueError, match="all_triple.json: unreadable"):
        load_corpus(root2)
    (d2 / "all_triple.json").write_text("[" * 100_000)
    with pytest.raises(ValueError, match="all_triple.json: malformed"):
        load_corpus(root2)


def test_loader_accepts_digit_string_ids_and_round_trips(tmp_path):
    root, d = _app_dir(tmp_path)
    _rewrite(d, "all_triple.json", lambda o: {"data": [[s, str(a), t] for s, a, t in o["data"]]})
    app = load_corpus(root).apps["r"]
    assert app.T == tiny_app().T and load_app(d).page_actions == tiny_app().page_actions


# ------------------------------------------------------------------------------------- the parsers
def _obs():
    els = [
        UIElement("click", "Red Lamp", ((0, 0), (10, 10))),
        UIElement("input", "Filter", None),
        UIElement("scroll", "list", ((0, 0), (100, 100))),
    ]
    return Observation("Open the Red Lamp.", "Select Red Lamp.", els, "r", "r", qa_slots=["item"])


PIECES = st.sampled_from(
    [
        "Action",
        "Action:",
        "action :",
        " ",
        "\n",
        "\t",
        "\u2028",
        "\x0b",
        "click",
        "input",
        "scroll",
        "back",
        "ask",
        "(",
        ")",
        ",",
        '"',
        "'",
        "`",
        "```",
        "c1",
        "i1",
        "s1",
        "c99",
        "up",
        "diag",
        "Summary:",
        "\u00a0",
        "ＡＣＴＩＯＮ:",
        "\x00",
    ]
)
ADVERSARIAL = st.lists(st.tuples(PIECES, st.integers(1, 5000)), max_size=12).map(
    lambda parts: "".join(p * n for p, n in parts)
)


@FUZZ
@given(st.one_of(st.text(max_size=3000), ADVERSARIAL))
def test_llm_reply_parser_never_raises(text):
    a = parse_action(text, _obs())
    assert isinstance(a, Action) and a.kind in ("click", "input", "scroll", "back", "ask", "invalid")
    if a.kind in ("click", "input", "scroll"):
        assert 0 <= a.index < 3


def test_llm_reply_parser_regressions():
    o = _obs()
    for text in (
        "Action:  ",
        "Action:\t\u00a0",
        "x" * 10**6,
        "Action: click(" * 10**5,
        "Action: click(c1" + ")" * 10**5 + " " * 10**5 + "x",
        "(" * 3000 + ")" * 3000,
    ):
        assert parse_action(text, o).kind == "invalid"
    assert parse_action("Action: click(c1)" + " " * 10**5, o) == Action("click", 0)


CORPUS_PIECES = st.sampled_from(
    [
        "click(",
        "click(<",
        "scroll((",
        "<",
        ">",
        'bounds="',
        'description="',
        "input(",
        "scroll(",
        ", [",
        ", '",
        "'",
        "[",
        "]",
        ",",
        ")",
        "1",
        "-",
        "12",
        "][",
        "') ",
        "')",
        " ",
        "\n",
    ]
)


@FUZZ
@given(
    st.one_of(
        st.text(max_size=3000),
        st.lists(st.tuples(CORPUS_PIECES, st.integers(1, 5000)), max_size=12).map(
            lambda parts: "".join(p * n for p, n in parts)
        ),
    )
)
def test_corpus_action_string_parser_raises_only_value_error(s):
    try:
        p = parse_action_string(s)
    except ValueError:
        return
    assert p["kind"] in ("click", "input", "scroll")


def test_corpus_action_string_parser_linear_cases_still_parse():
    assert parse_action_string("input(" + ", '" * 100_000 + "')")["kind"] == "input"
    for s in ("input(" + ", '" * 100_000, "click(" + ", [1,1][1,1" * 30_000 + ")", 42, None):
        with pytest.raises(ValueError):
            parse_action_string(s)


def test_corpus_parser_tries_a_greedy_regex_only_after_its_closing_suffix(monkeypatch):
    """The guard that keeps ``input(`` + ``, '`` x n linear: no backtracking regex runs on a string without the
    closing suffix its pattern needs (a structural check; the timing is covered by the fuzz deadline)."""
    from iclr26.sman_bench import corpus as C

    calls = []

    class Spy:
        def __init__(self, rx):
            self.rx = rx

        def match(self, text):
            calls.append(self.rx.pattern[:8])
            return self.rx.match(text)

    monkeypatch.setattr(C, "_INPUT", Spy(C._INPUT))
    monkeypatch.setattr(C, "_CLICK", Spy(C._CLICK))
    for s in ("input(" + ", '" * 50, "click(" + ", [1,1][1,1" * 50 + "]"):
        with pytest.raises(ValueError):
            C.parse_action_string(s)
    assert calls == []
    assert C.parse_action_string("input(F, 'x')")["kind"] == "input" and calls  # the spy sees real matches


# ------------------------------------------------------------------------------------- the agent
def test_llm_agent_act_never_raises_on_endpoint_failures():
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(302)
            self.send_header("Location", "http://localhost:1/steal")
            self.send_header("Content-Length", "0")
            self.end_headers()

    srv = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True).start()
    try:
        agent = LLMAgent(LLMConfig(f"http://127.0.0.1:{srv.server_port}/v1", api_key="sk-x", timeout_s=5))
        a = agent.act(_obs())
    finally:
        srv.shutdown()
        srv.server_close()
    assert a == Action("invalid", text="endpoint error: redirect") and "redirect" in agent.errors[0]
    assert "sk-x" not in repr(agent.cfg)
    with pytest.raises(ValueError):
        LLMConfig("http://127.0.0.1:8000/v1", timeout_s=0)


def test_api_key_from_the_environment(monkeypatch):
    monkeypatch.setenv("SMAN_TEST_KEY", "sk-env")
    agent = make_agent("llm", None, {"base_url": "http://127.0.0.1:8000/v1", "api_key_env": "SMAN_TEST_KEY"})
    assert agent.cfg.api_key == "sk-env"
    monkeypatch.delenv("SMAN_TEST_KEY")
    with pytest.raises(ValueError, match="SMAN_TEST_KEY"):
        make_agent("llm", None, {"base_url": "http://127.0.0.1:8000/v1", "api_key_env": "SMAN_TEST_KEY"})
    assert os.environ.get("SMAN_TEST_KEY") is None
