"""``compat=True`` against values computed by hand from the released Mobile-Bench-v2 ``eval.py``
(``noise_data_test``, ``multi_path_test``, ``calculate_direction``) and ``utils.comput_f1``; the default
(corrected) scorer on the same inputs, to show where the two differ."""

import pytest
from sman_helpers import ScriptAgent, tiny_corpus, tiny_task

from iclr26.sman_bench.corpus import UIElement, swipe_direction
from iclr26.sman_bench.evaluate import (
    Action,
    char_f1,
    in_bounds,
    mean_metrics,
    multi_path_episode,
    noisy_episode,
    released_direction,
    score_noisy_step,
    scroll_matches,
)

BOX = ((100, 200), (300, 400))  # x1=100, y1=200, x2=300, y2=400
EL = [UIElement("click", "Close", BOX)]


class Clicker:
    def act(self, obs):
        return Action("click", 0)


def _episode(*gts):
    return {"task": tiny_task(), "screens": [{"elements": EL, "action": g} for g in gts]}


def _click(x, y):
    return {"type": "click", "point": [x, y]}


def test_back_screen_stays_in_the_released_denominator():
    # released: 2 screens counted, the back screen is never credited -> acc 1/2, success (1 == 2) false
    ep = _episode({"type": "back"}, _click(200, 350))
    c = noisy_episode(ep, Clicker(), compat=True)
    assert (c["n_correct"], c["n_steps"], c["n_type_ok"]) == (1, 2, 0)
    assert c["action_acc"] == 0.5 and c["success"] == 0.0 and c["type_acc"] == 0.0
    # ours: the back screen leaves the denominator -> 1/1, success
    assert noisy_episode(ep, Clicker()) == {"success": 1.0, "action_acc": 1.0, "type_acc": 1.0}


def test_noise_micro_vs_macro_average():
    # ep1: 1/1 correct; ep2: (200,350) in, (200,250) out by the y-bug, (50,350) out in x -> 1/3
    rows = [
        noisy_episode(_episode(_click(200, 350)), Clicker(), compat=True),
        noisy_episode(_episode(_click(200, 350), _click(200, 250), _click(50, 350)), Clicker(), compat=True),
    ]
    micro = mean_metrics(rows, micro=True)
    assert micro["action_acc"] == pytest.approx(2 / 4)  # released: (1 + 1) / (1 + 3)
    assert micro["success"] == pytest.approx(1 / 2)  # success_num / #episodes
    assert micro["type_acc"] == 0.0
    assert mean_metrics(rows)["action_acc"] == pytest.approx((1 + 1 / 3) / 2)  # the macro mean differs


def test_micro_needs_counts():
    rows = [noisy_episode(_episode(_click(200, 350)), Clicker())]  # default rows carry no counts
    with pytest.raises(ValueError, match="n_correct"):
        mean_metrics(rows, micro=True)
    assert mean_metrics(rows, micro=False) == {"success": 1.0, "action_acc": 1.0, "type_acc": 1.0}


def test_strict_bounds():
    # on the edges: released '<' rejects, ours '<=' accepts (the y lower bound of compat is x2 = 300)
    for point in ([100, 350], [300, 350], [200, 400]):
        assert in_bounds(point, BOX) and not in_bounds(point, BOX, compat=True), point
        assert score_noisy_step(Action("click", 0), EL, _click(*point), compat=True) == (False, True)
    assert in_bounds([101, 301], BOX, compat=True) and in_bounds([299, 399], BOX, compat=True)
    assert not in_bounds([200, 300], BOX, compat=True)  # y == x2: strict


def test_click_y_bug():
    # y between y1 = 200 and x2 = 300: inside the box, rejected by released (x2 < y < y2)
    assert in_bounds([200, 250], BOX) and not in_bounds([200, 250], BOX, compat=True)
    assert score_noisy_step(Action("click", 0), EL, _click(200, 250)) == (True, True)
    assert score_noisy_step(Action("click", 0), EL, _click(200, 250), compat=True) == (False, True)
    # and the other way: a box whose y1 = 500 lies below x2 = 300; y = 400 is above the box, released accepts
    tall = ((100, 500), (300, 900))
    assert not in_bounds([200, 400], tall) and in_bounds([200, 400], tall, compat=True)


def test_char_f1_released_spaces_and_substring_no_answer():
    # released counts the space: P = 7/8, R = 7/7 -> F1 = 2 * 7/8 / (15/8) = 14/15; ours drops spaces -> 1
    assert char_f1("red lamp", "redlamp", compat=True) == pytest.approx(14 / 15)
    assert char_f1("red lamp", "redlamp") == 1.0
    # "ab" + 4 spaces vs "ab": P = 2/6, R = 1 -> F1 = 0.5, not > 0.5 in released; ours 1.0
    pred, gt = "ab    ", {"type": "type", "text": "ab"}
    assert char_f1(pred, "ab", compat=True) == pytest.approx(0.5)
    assert score_noisy_step(Action("input", 0, text=pred), EL, gt) == (True, True)
    assert score_noisy_step(Action("input", 0, text=pred), EL, gt, compat=True) == (False, True)
    # "无人应答" inside a longer GT: released returns 1, ours only on an exact match
    assert char_f1("xyz", "答：无人应答。", compat=True) == 1.0
    assert char_f1("xyz", "答：无人应答。") == 0.0
    assert char_f1("xyz", "无人应答") == 1.0 and char_f1("xyz", "无人应答", compat=True) == 1.0
    assert char_f1("aab", "ab", compat=True) == pytest.approx(0.8)  # P = 2/3, R = 1


def test_compat_text_step_is_keyed_on_the_predicted_name_only():
    gt = {"type": "type", "text": "ab"}
    # released: any predicted name other than click/scroll goes to the F1 branch
    assert score_noisy_step(Action("ask", text="ab"), EL, gt, compat=True)[0] is True
    assert score_noisy_step(Action("ask", text="ab"), EL, gt)[0] is False
    assert score_noisy_step(Action("invalid", text="ab"), EL, gt, compat=True)[0] is False  # 'error' lines
    assert score_noisy_step(Action("click", 0), EL, gt, compat=True)[0] is False


def test_released_swipe_direction():
    # 'up' = (0, 1): a downward swipe on screen (dy > 0) is 'up' in released, 'down' in ours
    assert released_direction((0, 0), (0, 10)) == "up" and swipe_direction((0, 0), (0, 10)) == "down"
    assert released_direction((0, 10), (0, 0)) == "down" and swipe_direction((0, 10), (0, 0)) == "up"
    assert released_direction((0, 0), (10, 0)) == "right" and released_direction((10, 0), (0, 0)) == "left"
    assert released_direction((0, 0), (3, 7)) == "up" and released_direction((0, 0), (7, 3)) == "right"
    # 45-degree ties: the first of up, down, left, right wins
    assert released_direction((0, 0), (5, 5)) == "up" and released_direction((0, 0), (5, -5)) == "down"
    assert released_direction((0, 0), (-5, 5)) == "up" and released_direction((0, 0), (-5, -5)) == "down"
    with pytest.raises(ValueError, match="zero-length"):
        released_direction((3, 3), (3, 3))


def test_scroll_matching_released_and_never_reached():
    area, s, e = ((0, 0), (100, 1000)), (50, 300), (50, 700)  # released y-range: 100 < y < 1000
    assert scroll_matches(area, "up", s, e, compat=True) and not scroll_matches(area, "down", s, e, compat=True)
    assert scroll_matches(area, "down", s, e) and not scroll_matches(area, "up", s, e)
    assert not scroll_matches(area, "up", (50, 50), e, compat=True)  # start above x2 = 100: the y-bug
    assert not scroll_matches(area, None, s, e)
    el = [UIElement("scroll", "list", area)]
    gt = {"type": "scroll", "start": list(s), "end": list(e)}
    assert score_noisy_step(Action("scroll", 0, direction="down"), el, gt) == (True, True)
    # released compares the GT name with 'swpie': no scroll is ever credited, whatever the direction
    for d in ("up", "down", "left", "right"):
        assert score_noisy_step(Action("scroll", 0, direction=d), el, gt, compat=True)[0] is False


def test_multi_path_micro_step_reward():
    c = tiny_corpus()
    app = c.apps["r"]
    # task A: gold [0, 3, 5], stuck on r_0_4 -> 1 positional match of 3
    a = multi_path_episode(c, tiny_task(), ScriptAgent(app, {"r": 0, "r_0": 4}), max_rounds=7, compat=True)
    # task B: gold [0, 3], reached -> 2 of 2
    b = multi_path_episode(c, tiny_task("r_0_3"), ScriptAgent(app, {"r": 0, "r_0": 3}), compat=True)
    # task C: gold [0], walks to r_1_6 (longer than gold) -> 0 of 1
    cc = multi_path_episode(c, tiny_task("r_0"), ScriptAgent(app, {"r": 1, "r_1": 6}), max_rounds=4, compat=True)
    assert (a["matched"], a["n_gold"], b["matched"], b["n_gold"], cc["matched"], cc["n_gold"]) == (1, 3, 2, 2, 0, 1)
    assert cc["final_page"] == "r_1_6" and cc["success"] == 0.0
    m = mean_metrics([a, b, cc], micro=True)
    assert m["step_reward"] == pytest.approx(3 / 6)  # released: (1 + 2 + 0) / (3 + 2 + 1)
    assert m["success"] == pytest.approx(1 / 3)
    assert m["n_actions"] == pytest.approx((7 + 2 + 4) / 3)  # logged lines / tasks
    assert mean_metrics([a, b, cc])["step_reward"] == pytest.approx((1 / 3 + 1 + 0) / 3)  # macro differs
    # default rows are unchanged: no counts, per-episode ratio
    d = multi_path_episode(c, tiny_task(), ScriptAgent(app, {"r": 0, "r_0": 4}), max_rounds=7)
    assert "matched" not in d and d["step_reward"] == pytest.approx(1 / 3)
