"""Pixel-exact tool effects, parser cases, reward."""

import numpy as np
import pytest
from PIL import Image

from iclr26.vtool_r1 import tools
from iclr26.vtool_r1.charts import make_chart
from iclr26.vtool_r1.executor import ToolExecutor
from iclr26.vtool_r1.parser import ensure_display_call, parse_action, trim_to_action_end
from iclr26.vtool_r1.reward import exact_match_reward, extract_final_answer, heuristic_reward, refocus_score


def _img(seed=0, w=40, h=30):
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))


def _grey(w=24, h=20, v=100):
    return Image.new("RGB", (w, h), (v, v, v))


def _expect(img, regions, rgb):
    """The input's pixels with ``rgb`` written into the given (y-slice, x-slice) regions: an expected output
    written down by hand, not computed by the code under test."""
    out = np.asarray(img).copy()
    for ys, xs in regions:
        out[ys, xs] = rgb
    return out


def _rgb(im):
    return np.asarray(im.convert("RGB"))


# Boxes of the hand-computed tests (PIL convention: both corners inclusive).
A = {"x1": 4, "y1": 3, "x2": 9, "y2": 10}
B = {"x1": 13, "y1": 3, "x2": 18, "y2": 10}
TINTED = (130, 80, 80)  # (100, 100, 100) under (255, 0, 0, 50): 100 * 205 / 255 = 80.4 -> 80, + 50 -> 130


def test_highlight_v1_inset_2_and_v2_padded_2_hand_values():
    img = _grey()
    v1 = tools.apply_tool(img, ["A"], {"A": A, "B": B}, axis="columns", op="highlight", tools_version="v1")
    v2 = tools.apply_tool(img, ["A"], {"A": A, "B": B}, axis="columns", op="highlight", tools_version="v2")
    assert v1.mode == v2.mode == "RGBA"  # as the official tools return it
    # v1: x 4+2 .. 9-2 = 6..7, y 3+2 .. 10-2 = 5..8
    np.testing.assert_array_equal(_rgb(v1), _expect(img, [(slice(5, 9), slice(6, 8))], TINTED))
    # v2 (PAD_HIGHLIGHT = 2): x 2..11, y 1..12
    np.testing.assert_array_equal(_rgb(v2), _expect(img, [(slice(1, 13), slice(2, 12))], TINTED))
    assert tools.PAD_HIGHLIGHT == 2 and tools.V1_INSET == 2
    # other grey levels: 0 -> (50, 0, 0); 200 -> 200 * 205 / 255 = 160.8 -> 161, + 50 -> 211
    for v, want in ((0, (50, 0, 0)), (200, (211, 161, 161))):
        out = _rgb(tools.v2_focus_on_columns_with_highlight(_grey(v=v), ["A"], {"A": A}))
        assert tuple(out[5, 5]) == want and tuple(out[0, 0]) == (v, v, v)


def test_mask_v1_inset_2_and_v2_pad_1_hand_values():
    img = _grey()
    boxes = {"A": A, "B": B}
    v1 = tools.v1_focus_on_columns_with_mask(img, ["B"], boxes)
    v2 = tools.v2_focus_on_columns_with_mask(img, ["B"], boxes)
    np.testing.assert_array_equal(np.asarray(v1), _expect(img, [(slice(5, 9), slice(6, 8))], (255, 255, 255)))
    np.testing.assert_array_equal(np.asarray(v2), _expect(img, [(slice(2, 12), slice(3, 11))], (255, 255, 255)))
    np.testing.assert_array_equal(np.asarray(img), _expect(img, [], 0))  # the input is untouched


def test_draw_v1_width_5_inset_2_and_v2_width_3_pad_2_hand_values():
    img = _grey()
    big = {"x1": 2, "y1": 2, "x2": 21, "y2": 17}
    red = (255, 0, 0)
    # v1: rectangle 4..19 x 4..15, a 5-px ring: the inside 9..14 x 9..10 keeps its grey
    v1 = np.asarray(tools.v1_focus_on_columns_with_draw(img, ["k"], {"k": big}))
    want = _expect(img, [(slice(4, 16), slice(4, 20))], red)
    want[9:11, 9:15] = 100
    np.testing.assert_array_equal(v1, want)
    # v2: rectangle 0..23 x 0..19 (pad 2, clipped to W = 24 / H = 20), a 3-px ring: inside 3..20 x 3..16
    v2 = np.asarray(tools.v2_focus_on_columns_with_draw(img, ["k"], {"k": big}))
    want = _expect(img, [(slice(0, 20), slice(0, 24))], red)
    want[3:17, 3:21] = 100
    np.testing.assert_array_equal(v2, want)
    # v2 clips x2 to W (not W - 1): the right edge at x = 24, 23, 22 shows only columns 22 and 23
    right = {"x1": 10, "y1": 2, "x2": 23, "y2": 17}
    v2r = np.asarray(tools.v2_focus_on_columns_with_draw(img, ["k"], {"k": right}))
    want = _expect(img, [(slice(0, 20), slice(8, 24))], red)
    want[3:17, 11:22] = 100
    np.testing.assert_array_equal(v2r, want)


def test_fractional_boxes_truncate():
    img = _grey()
    frac = {"x1": 3.7, "y1": 2.9, "x2": 9.9, "y2": 10.2}
    boxes = {"A": frac, "B": B}
    # v1: int(5.7), int(4.9), int(7.9), int(8.2) = 5, 4, 7, 8 (rounding would give 6, 5, 8, 8)
    v1 = np.asarray(tools.v1_focus_on_columns_with_mask(img, ["B"], boxes))
    np.testing.assert_array_equal(v1, _expect(img, [(slice(4, 9), slice(5, 8))], (255, 255, 255)))
    # v2 (pad 1): int(2.7), int(1.9), int(10.9), int(11.2) = 2, 1, 10, 11
    v2 = np.asarray(tools.v2_focus_on_columns_with_mask(img, ["B"], boxes))
    np.testing.assert_array_equal(v2, _expect(img, [(slice(1, 12), slice(2, 11))], (255, 255, 255)))


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_rows_mask_header_rules(version):
    img = _grey(v=90)
    rows = {
        "head": {"x1": 0, "y1": 0, "x2": 23, "y2": 5},
        "r1": {"x1": 0, "y1": 6, "x2": 23, "y2": 12},
        "r2": {"x1": 0, "y1": 13, "x2": 23, "y2": 19},
    }
    tool = getattr(tools, f"{version}_focus_on_rows_with_mask")
    for keys in (["head"], [], ["nope"], ["head", "r1", "r2"]):  # only the header, nothing, unknown, all
        np.testing.assert_array_equal(np.asarray(tool(img, keys, rows)), np.asarray(img))
    out = np.asarray(tool(img, ["r2"], rows))  # r1 goes; the header stays although not asked for
    ys, xs = (slice(8, 11), slice(2, 22)) if version == "v1" else (slice(5, 14), slice(0, 24))
    np.testing.assert_array_equal(out, _expect(img, [(ys, xs)], (255, 255, 255)))
    # columns do not keep a header: masking everything but r2 paints the first box too
    cols = np.asarray(getattr(tools, f"{version}_focus_on_columns_with_mask")(img, ["r2"], rows))
    assert (cols[3, 10] == 255).all() and (out[3, 10] == 90).all()


def test_unknown_label_fails_in_v1_only():
    img = _grey()
    boxes = {"A": A, "B": B}
    for op in ("draw", "highlight"):
        with pytest.raises(KeyError):
            tools.apply_tool(img, ["A", "zzz"], boxes, axis="columns", op=op, tools_version="v1")
        out = tools.apply_tool(img, ["zzz"], boxes, axis="columns", op=op, tools_version="v2")
        np.testing.assert_array_equal(_rgb(out), np.asarray(img))  # v2 drops it: nothing left, unchanged
    # v1's lenient pair skips the bad key, and its mask ignores unknown keys
    np.testing.assert_array_equal(_rgb(tools.v1_focus_on_x_values_with_highlight(img, ["zzz"], boxes)), np.asarray(img))
    np.testing.assert_array_equal(
        np.asarray(tools.v1_focus_on_y_values_with_draw(img, ["zzz"], boxes)), np.asarray(img)
    )
    np.testing.assert_array_equal(np.asarray(tools.v1_focus_on_columns_with_mask(img, ["zzz"], boxes)), np.asarray(img))
    # through the executor: a failed tool step in v1 (fast path and sandbox alike), a success in v2
    code = 'img = focus_on_columns_with_draw(image_1, ["zzz"], columns_bbox)\ndisplay(img)\n'
    assert not ToolExecutor("v1").execute(code, img, boxes).ok
    assert not ToolExecutor("v1", mode="sandbox").execute(code, img, boxes).ok
    res = ToolExecutor("v2").execute(code, img, boxes)
    assert res.ok and (res.image == np.asarray(img)).all()


def test_a_4px_chart_box_fails_in_v1():
    img = _grey(w=30)
    boxes = {"a": {"x1": 6, "y1": 2, "x2": 9, "y2": 17}, "b": {"x1": 16, "y1": 2, "x2": 21, "y2": 17}}  # a: 4 px
    with pytest.raises(ValueError):  # 6 + 2 = 8 > 9 - 2 = 7: nothing left after the inset
        tools.v1_focus_on_columns_with_mask(img, ["b"], boxes)
    code = 'img = focus_on_columns_with_mask(image_1, ["b"], columns_bbox)\ndisplay(img)\n'
    assert not ToolExecutor("v1").execute(code, img, boxes).ok
    assert ToolExecutor("v2").execute(code, img, boxes).ok
    # a 5-px box leaves a 1-px column: fine in v1
    boxes["a"]["x2"] = 10
    out = np.asarray(tools.v1_focus_on_columns_with_mask(img, ["b"], boxes))
    np.testing.assert_array_equal(out, _expect(img, [(slice(4, 16), slice(8, 9))], (255, 255, 255)))
    # the charts use the 6-px slot as the box, so the v1 tools work on them
    s = make_chart(np.random.default_rng(0), "VAL")
    assert all(b["x2"] - b["x1"] == 5 for b in s.bboxes.values())


def test_mask_random_image_keeps_focus_and_whitens_others():
    img = _img()
    old = np.asarray(img)
    boxes = {"a": {"x1": 2, "y1": 3, "x2": 9, "y2": 12}, "b": {"x1": 14, "y1": 3, "x2": 21, "y2": 12}}
    new = np.asarray(tools.v2_focus_on_columns_with_mask(img, ["a"], boxes))
    assert (new[2:14, 13:23] == 255).all()
    keep = np.ones(old.shape[:2], bool)
    keep[2:14, 13:23] = False
    np.testing.assert_array_equal(new[keep], old[keep])


def test_fuzzy_match_in_y_values_draw():
    img = Image.new("RGB", (40, 30), (0, 0, 0))
    boxes = {"Total sales": {"x1": 2, "y1": 3, "x2": 12, "y2": 14}, "b": {"x1": 20, "y1": 3, "x2": 30, "y2": 14}}
    for version in ("v1", "v2"):  # both official versions match keys by substring in this one tool
        out = np.asarray(getattr(tools, f"{version}_focus_on_y_values_with_draw")(img, ["sales"], boxes))
        assert (out[:, :15] != 0).any() and (out[:, 16:] == 0).all()
    # the x-values draw matches exactly: v1 fails on the unknown key, v2 drops it
    with pytest.raises(KeyError):
        tools.v1_focus_on_x_values_with_draw(img, ["sales"], boxes)
    assert (np.asarray(tools.v2_focus_on_x_values_with_draw(img, ["sales"], boxes)) == 0).all()


def test_tools_on_a_chart_and_specs():
    s = make_chart(np.random.default_rng(0), "VAL")
    out = np.asarray(tools.focus_on_columns_with_mask(Image.fromarray(s.image), list(s.args), s.bboxes))
    # only one bar left: every grey bar pixel is inside the focused column
    grey = (out == [110, 110, 110]).all(-1)
    b = s.bboxes[s.args[0]]
    assert grey.any() and grey[:, : b["x1"]].sum() == 0 and grey[:, b["x2"] + 1 :].sum() == 0
    assert set(tools.V2_TOOLS) == set(tools.TOOL_NAMES) and len(tools.TOOL_NAMES) == 12
    with pytest.raises(ValueError):
        tools.tool_specs("v3")


# ------------------------------------------------------------------------------------- parser
def test_parser_cases():
    assert parse_action("ANSWER: 3. FINAL ANSWER: 3. TERMINATE").kind == "notool"
    bad = parse_action("ACTION 0:\n```python\nimg = focus_on_columns_with_mask(image_1, [\n```")
    assert bad.kind == "failed" and "SyntaxError" in bad.error
    # v2: a python block that is not tool code counts as a direct answer; v1 runs it
    plain = "```python\nx = 1 + 1\n```"
    assert parse_action(plain, "v2").kind == "notool"
    assert parse_action(plain, "v1").kind == "tool"
    ok = parse_action("```python\nimg = focus_on_columns_with_mask(image_1, ['a'], columns_bbox)\n```", "v2")
    assert ok.kind == "tool" and ok.code.rstrip().endswith("display(img)")
    ok1 = parse_action("```python\nimg = focus_on_columns_with_mask(image_1, ['a'], columns_bbox)\n```", "v1")
    assert "display" not in ok1.code
    # an opened but never closed fence is broken tool code
    assert parse_action("```python\nimg = focus_on_columns_with_mask(image_1, ['a'", "v2").kind == "failed"


def test_trim_and_ensure_display():
    t = "THOUGHT\n```python\na = 1\n```\nmore text ```python\nb = 2\n``` trailing words"
    assert trim_to_action_end(t) == t[: t.rindex("```") + 3]
    assert trim_to_action_end("no fence") == "no fence"
    assert ensure_display_call("a = 1\nb = f(a)\n").endswith("display(b)\n")
    assert ensure_display_call("display(x)\n") == "display(x)\n"


# ------------------------------------------------------------------------------------- reward
def test_reward_extraction_and_matching():
    assert extract_final_answer("bla ANSWER: x. FINAL ANSWER: 3. TERMINATE") == "3"
    assert extract_final_answer("FINAL ANSWER: 3.5") == "3.5"
    assert extract_final_answer("no final here", "v1") is None
    assert extract_final_answer("ANSWER: 7. TERMINATE", "v2") == "7"
    assert exact_match_reward("a||b", "b|||a") == 1.0
    assert exact_match_reward("a", "b|||a") == 0.0
    assert exact_match_reward(extract_final_answer("nothing", "v1"), "3") == 0.0
    assert refocus_score("FINAL ANSWER: 8. TERMINATE", "10") == pytest.approx(0.8)
    assert refocus_score("FINAL ANSWER: Spain||7. TERMINATE", "7|||Spain") == pytest.approx(1.0)


@pytest.mark.parametrize(
    "response,gt,score",
    [
        ("FINAL ANSWER: 3\nTERMINATE", "3", 0.0),  # no DOTALL: a newline before any period, no match
        ("FINAL ANSWER: 3.\nTERMINATE", "3", 1.0),  # ". " with a newline as the blank
        ("FINAL ANSWER: Yes. TERMINATE", "yes", 0.0),  # strings: case-sensitive
        ("FINAL ANSWER: yes. TERMINATE", "yes", 1.0),
        ("FINAL ANSWER: 1,000. TERMINATE", "1000", 0.0),  # float("1,000") fails: string compare
        ("FINAL ANSWER: 1,000. TERMINATE", "1,000", 1.0),
        ("FINAL ANSWER: 12%. TERMINATE", "12", 0.0),  # float("12%") fails too
        ("FINAL ANSWER: 12%. TERMINATE", "12%", 1.0),
        ("FINAL ANSWER: 5||5. TERMINATE", "5", 2.0),  # the sum over answers, divided by #gt
        ("FINAL ANSWER: 5||6. TERMINATE", "5|||6", 1.0),
        ("FINAL ANSWER: 0. TERMINATE", "0", 1.0),  # equal numbers first, then "a zero scores 0"
        ("FINAL ANSWER: 0. TERMINATE", "4", 0.0),
        ("FINAL ANSWER: -5. TERMINATE", "5", -1.0),  # 1 - 10 / 5: not clipped
        ("FINAL ANSWER: 4. TERMINATE", "5|||x", 0.4),  # 0.8 / 2
        ("no final answer", "3", 0.0),
    ],
)
def test_refocus_score_follows_the_official_function(response, gt, score):
    assert refocus_score(response, gt) == pytest.approx(score)


def test_heuristic_reward_is_0_1_and_not_fooled_by_repeats():
    assert heuristic_reward("Yes", "yes") == 1.0  # exact match after normalising
    assert heuristic_reward("9.6", "10") == 1.0 and heuristic_reward("9", "10") == 0.0  # ReFocus score 0.96 / 0.9
    assert heuristic_reward("5||5", "5") == 0.0  # the official score is 2 here; one answer was asked for
    assert heuristic_reward(None, "5") == 0.0
