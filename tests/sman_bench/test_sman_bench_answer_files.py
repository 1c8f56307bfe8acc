"""Released noisy answer files (``appagent_noisy.py`` writes one line per screen, each ended by a newline) scored
by the released reading (``noise_data_test``: ``text.split('\\n')[:-2]``, which drops the last screen on that
layout) and by ours (one line per screen, whichever layout), on both layouts."""

import pytest
from sman_helpers import tiny_task

from iclr26.sman_bench.corpus import UIElement
from iclr26.sman_bench.released import answer_lines, parse_answer_line, released_answer_lines, score_answer_file

EL = [UIElement("click", "Close", ((100, 200), (300, 400))), UIElement("click", "Buy", ((0, 500), (200, 600)))]


def _episode():
    gts = [
        {"type": "click", "point": [150, 350]},  # inside Close (also under the released y-bug)
        {"type": "type", "text": "shoes"},
        {"type": "click", "point": [50, 550]},  # inside Buy
    ]
    return {"task": tiny_task(), "screens": [{"elements": EL, "action": g} for g in gts]}


RUNNER = "click([100,200][300,400])\ninput(shoes)\nclick([0,500][200,600])\n"  # what the released runner writes
WITH_FINAL = RUNNER + "finish\n"  # the layout the released scorer assumes: one more line after the predictions


def test_line_readers_on_both_layouts():
    assert released_answer_lines(RUNNER) == ["click([100,200][300,400])", "input(shoes)"]  # last screen dropped
    assert released_answer_lines(WITH_FINAL) == RUNNER.split("\n")[:3]
    assert answer_lines(RUNNER, 3) == answer_lines(WITH_FINAL, 3) == RUNNER.split("\n")[:3]
    assert answer_lines("click([1,2][3,4])\n", 3) == ["click([1,2][3,4])", "error", "error"]


def test_released_reading_drops_the_last_screen_of_the_runners_layout():
    ep = _episode()
    compat = score_answer_file(RUNNER, ep, compat=True)
    # released: 2 lines read, both correct; the third (correct) prediction and its screen are never seen
    assert (compat["n_correct"], compat["n_steps"]) == (2, 2) and compat["success"] == 1.0
    compat_final = score_answer_file(WITH_FINAL, ep, compat=True)
    assert (compat_final["n_correct"], compat_final["n_steps"]) == (3, 3)
    ours = score_answer_file(RUNNER, ep)
    assert ours == score_answer_file(WITH_FINAL, ep) == {"success": 1.0, "action_acc": 1.0, "type_acc": 1.0}


def test_a_wrong_last_prediction_counts_only_in_our_reading():
    ep = _episode()
    wrong_last = "click([100,200][300,400])\ninput(shoes)\nclick([100,200][300,400])\n"
    assert score_answer_file(wrong_last, ep, compat=True)["success"] == 1.0  # released never sees it
    ours = score_answer_file(wrong_last, ep)
    assert ours["success"] == 0.0 and ours["action_acc"] == pytest.approx(2 / 3)


def test_line_parsing():
    act, els = parse_answer_line("scroll([0,0][100,900]up)", EL)
    assert act.kind == "scroll" and act.direction == "up" and els[act.index].bounds == ((0, 0), (100, 900))
    act, els = parse_answer_line("input(red shoes)", EL)
    assert act.kind == "input" and act.text == "red shoes" and els == EL
    for bad in ("click error", "no such act", "error", "click(", ""):
        assert parse_answer_line(bad, EL)[0].kind == "invalid"
