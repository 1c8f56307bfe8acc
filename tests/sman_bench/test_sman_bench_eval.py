import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sman_helpers import ScriptAgent, tiny_corpus, tiny_task

from iclr26.sman_bench.agents import OracleAgent
from iclr26.sman_bench.corpus import UIElement, scroll_endpoints
from iclr26.sman_bench.evaluate import (
    ACTION_KINDS,
    NO_ANSWER,
    Action,
    char_f1,
    in_bounds,
    multi_path_episode,
    noisy_episode,
    score_noisy_step,
    single_path_episode,
)
from iclr26.sman_bench.generator import SMOKE_CONFIG, generate_corpus
from iclr26.sman_bench.instructions import generate_tasks
from iclr26.sman_bench.splits import build_noisy_split


def test_multi_path_gold_alternative_and_stuck():
    c, t = tiny_corpus(), tiny_task()
    app = c.apps["r"]
    gold = multi_path_episode(c, t, ScriptAgent(app, {"r": 0, "r_0": 3, "r_0_3": 5}))
    assert gold["success"] == 1 and gold["step_reward"] == 1 and gold["gold_match"] == 1 and gold["n_actions"] == 3
    alt = multi_path_episode(c, t, ScriptAgent(app, {"r": 2, "r_0_3": 5}))  # shortcut: valid, not the gold path
    assert alt["success"] == 1 and alt["gold_match"] == 0 and alt["n_actions"] == 2
    stuck = multi_path_episode(c, t, ScriptAgent(app, {"r": 0, "r_0": 4}), max_rounds=7)
    assert stuck["success"] == 0 and stuck["step_reward"] == pytest.approx(1 / 3)
    assert stuck["n_actions"] == 7 and stuck["errors"] == 5
    # compat: the same ratio per episode, plus the counts for the released micro average
    compat = multi_path_episode(c, t, ScriptAgent(app, {"r": 0, "r_0": 4}), max_rounds=7, compat=True)
    assert compat["step_reward"] == pytest.approx(1 / 3) and (compat["matched"], compat["n_gold"]) == (1, 3)
    # back goes to the discovery parent
    back = multi_path_episode(c, t, ScriptAgent(app, {"r": 0, "r_0": 4, "r_0_4": "back"}), max_rounds=3)
    assert back["final_page"] == "r_0"


def test_oracle_reaches_every_target():
    corpus, _ = generate_corpus(1, SMOKE_CONFIG)
    tasks = generate_tasks(corpus, 30, 0)
    for shortcuts in (True, False):
        ag = OracleAgent(corpus, shortcuts=shortcuts)
        for t in tasks:
            r = multi_path_episode(corpus, t, ag)
            assert r["success"] == 1 and r["step_reward"] == 1
            if not shortcuts:
                assert r["gold_match"] == 1


def test_single_path_teacher_forcing_arithmetic():
    c, t = tiny_corpus(), tiny_task()
    app = c.apps["r"]
    perfect = single_path_episode(c, t, ScriptAgent(app, {"r": 0, "r_0": 3, "r_0_3": 5}))
    assert perfect == {"success": 1.0, "action_acc": 1.0, "type_acc": 1.0}
    for j, wrong in ((0, {"r": 1}), (1, {"r_0": 4}), (2, {"r_0_3": "back"})):
        plan = {"r": 0, "r_0": 3, "r_0_3": 5} | wrong
        r = single_path_episode(c, t, ScriptAgent(app, plan))
        assert r["success"] == 0 and r["action_acc"] == pytest.approx(2 / 3), j
    # the next page is always the gold page: a wrong first step does not derail later steps
    r = single_path_episode(c, t, ScriptAgent(app, {"r": 2, "r_0": 3, "r_0_3": 5}))
    assert r["action_acc"] == pytest.approx(2 / 3) and r["type_acc"] == 1.0


def test_noise_click_geometry_fixed_and_compat():
    el = [UIElement("click", "Close", ((100, 200), (300, 400)))]
    pred = Action("click", 0)
    assert score_noisy_step(pred, el, {"type": "click", "point": [150, 250]}) == (True, True)
    assert score_noisy_step(pred, el, {"type": "click", "point": [150, 450]}) == (False, True)
    assert score_noisy_step(pred, el, {"type": "click", "point": [350, 250]}) == (False, True)
    # the released y-range check uses click_area[1][0] (x2=300) as the lower y bound
    assert not in_bounds([150, 250], ((100, 200), (300, 400)), compat=True)
    assert in_bounds([150, 350], ((100, 200), (300, 400)), compat=True)
    assert score_noisy_step(pred, el, {"type": "click", "point": [150, 250]}, compat=True)[0] is False


def test_noise_scroll_direction_and_text():
    b = ((40, 240), (1040, 1000))
    el = [UIElement("scroll", "list", b), UIElement("input", "Filter", None)]
    s, e = scroll_endpoints(b, "up")
    gt = {"type": "scroll", "start": list(s), "end": list(e)}
    assert score_noisy_step(Action("scroll", 0, direction="up"), el, gt) == (True, True)
    assert score_noisy_step(Action("scroll", 0, direction="down"), el, gt) == (False, True)
    assert score_noisy_step(Action("scroll", 0, direction="up"), el, gt, compat=True)[0] is False  # 'swpie'
    gt_t = {"type": "type", "text": "red lamp"}
    assert score_noisy_step(Action("input", 1, text="red lamps"), el, gt_t)[0]
    assert not score_noisy_step(Action("input", 1, text="blue"), el, gt_t)[0]


def test_char_f1_known_pairs():
    assert char_f1("red lamp", "red lamp") == 1.0
    assert char_f1("abc", "abd") == pytest.approx(2 / 3)
    assert char_f1("xyz", "abc") == 0.0
    assert char_f1("", "abc") == 0.0
    assert char_f1("anything", NO_ANSWER) == 1.0
    assert char_f1("aab", "ab") == pytest.approx(0.8)


def test_noisy_back_skipped_and_compat_type_acc():
    el = [UIElement("click", "Close", ((100, 200), (300, 400)))]
    ep = {
        "task": tiny_task(),
        "screens": [
            {"elements": el, "action": {"type": "back"}},
            {"elements": el, "action": {"type": "click", "point": [200, 350]}},
        ],
    }

    class Clicker:
        def act(self, obs):
            return Action("click", 0)

    assert noisy_episode(ep, Clicker()) == {"success": 1.0, "action_acc": 1.0, "type_acc": 1.0}
    assert noisy_episode(ep, Clicker(), compat=True)["type_acc"] == 0.0


def test_noisy_split_oracle_script_and_clean_control():
    corpus, _ = generate_corpus(2, SMOKE_CONFIG)
    tasks = generate_tasks(corpus, 10, 0)
    noisy = build_noisy_split(corpus, tasks, 5, p_noise=1.0)
    clean = build_noisy_split(corpus, tasks, 5, p_noise=1.0, clean=True)
    assert all(e["n_noise"] >= 1 for e in noisy) and all(e["n_noise"] == 0 for e in clean)
    for n, c in zip(noisy, clean):  # same real screens and GT, noise screens inserted
        real = [s for s in n["screens"] if not s["noise"]]
        assert [s["action"] for s in real] == [s["action"] for s in c["screens"]]
        assert len(real) == len(n["task"].gold)


actions = st.one_of(
    st.none(),
    st.text(max_size=5),
    st.integers(),
    st.tuples(st.integers(), st.text(max_size=3)),
    st.builds(
        Action,
        kind=st.sampled_from(ACTION_KINDS + ("tap", "")),
        index=st.one_of(st.none(), st.integers(-3, 40), st.booleans()),
        text=st.one_of(st.none(), st.text(max_size=8), st.integers()),
        direction=st.one_of(st.none(), st.sampled_from(["up", "down", "x"]), st.integers()),
    ),
)

_CORPUS, _ = generate_corpus(4, SMOKE_CONFIG)
_TASKS = generate_tasks(_CORPUS, 3, 0)
_NOISY = build_noisy_split(_CORPUS, _TASKS, 0, p_noise=1.0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(actions, st.just("RAISE")), min_size=1, max_size=6))
def test_no_agent_output_crashes_an_evaluator(outputs):
    class Fuzz:
        i = 0

        def act(self, obs):
            self.i += 1
            out = outputs[self.i % len(outputs)]
            if out == "RAISE":
                raise RuntimeError("boom")
            return out

    for t in _TASKS:
        for compat in (False, True):
            r = multi_path_episode(
                _CORPUS, t, Fuzz(), max_rounds=5, allow_ask=True, compat=compat, popup_rate=0.5 if compat else 0.0
            )
            assert 0 <= r["step_reward"] <= 1 and r["success"] in (0.0, 1.0)
        r = single_path_episode(_CORPUS, t, Fuzz())
        assert 0 <= r["action_acc"] <= 1
    for e in _NOISY:
        for compat in (False, True):
            r = noisy_episode(e, Fuzz(), compat=compat)
            assert 0 <= r["action_acc"] <= 1


def test_popups_in_the_walk():
    c, t = tiny_corpus(), tiny_task()
    app = c.apps["r"]
    plan = {"r": 0, "r_0": 3, "r_0_3": 5}

    class DismissThenPlan(ScriptAgent):
        def act(self, obs):
            if obs.page.endswith("#popup"):
                return Action("click", next(i for i, e in enumerate(obs.elements) if e.text in ("Close", "×")))
            return super().act(obs)

    r = multi_path_episode(c, t, DismissThenPlan(app, plan), popup_rate=1.0, popup_seed=0)
    # every page is covered once on first visit: 3 pages before the target -> 3 dismissals + 3 moves
    assert r["success"] == 1 and r["popups"] == 3 and r["n_actions"] == 6 and r["gold_match"] == 1
    # an agent that never dismisses stays on the overlay and fails
    stuck = multi_path_episode(c, t, ScriptAgent(app, plan), popup_rate=1.0, max_rounds=5)
    assert stuck["success"] == 0 and stuck["errors"] == 5
    assert multi_path_episode(c, t, ScriptAgent(app, plan), popup_rate=0.0) == multi_path_episode(
        c, t, ScriptAgent(app, plan)
    )
    with pytest.raises(ValueError):
        multi_path_episode(c, t, ScriptAgent(app, plan), popup_rate=2.0)


def test_single_path_type_accuracy_counts_wrong_types():
    c, t = tiny_corpus(), tiny_task()
    app = c.apps["r"]
    # step 3 answered with `back` (gold: a click): action and type both wrong there
    r = single_path_episode(c, t, ScriptAgent(app, {"r": 0, "r_0": 3, "r_0_3": "back"}))
    assert r["type_acc"] == pytest.approx(2 / 3)
    # an invalid action at every step: no type is right
    r = single_path_episode(c, t, ScriptAgent(app, {}))
    assert r == {"success": 0.0, "action_acc": 0.0, "type_acc": 0.0}


def test_step_reward_is_positional():
    from iclr26.sman_bench.evaluate import step_reward

    # the right ids in the wrong order earn nothing; a shared prefix earns its length over L
    assert step_reward("r_3_0", "r_0_3_5") == 0.0
    assert step_reward("r_0_5", "r_0_3_5") == pytest.approx(1 / 3)
    assert step_reward("r_0_3", "r_0_3_5") == pytest.approx(2 / 3)
    assert step_reward("r_0_3_5", "r_0_3_5") == 1.0


def test_multi_path_step_instruction_follows_the_page_depth():
    c, t = tiny_corpus(), tiny_task()
    app = c.apps["r"]

    class Recorder(ScriptAgent):
        seen: list

        def act(self, obs):
            self.seen.append((obs.page, obs.step_instruction))
            return super().act(obs)

    ag = Recorder(app, {"r": 0, "r_0": 3, "r_0_3": 5})
    ag.seen = []
    multi_path_episode(c, t, ag)
    assert ag.seen == [("r", "step 0"), ("r_0", "step 1"), ("r_0_3", "step 2")]
    ag.seen = []
    multi_path_episode(c, t, ag, step_instructions=False)
    assert [s for _, s in ag.seen] == [None, None, None]
