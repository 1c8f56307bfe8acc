"""Pixel-exact tool effects, parser cases, reward."""

import numpy as np
import pytest
from PIL import Image

from iclr26.vtool_r1 import tools
from iclr26.vtool_r1.charts import make_chart
from iclr26.vtool_r1.parser import ensure_display_call, parse_action, trim_to_action_end
from iclr26.vtool_r1.reward import exact_match_reward, extract_final_answer, refocus_score


def _img(seed=0, w=40, h=30):
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))


BOXES = {
    "a": {"x1": 2, "y1": 3, "x2": 9, "y2": 12},
    "b": {"x1": 14, "y1": 3, "x2": 21, "y2": 12},
    "c": {"x1": 26, "y1": 16, "x2": 35, "y2": 26},
}


def _region(b, pad, w=40, h=30):
    m = np.zeros((h, w), bool)
    m[max(0, b["y1"] - pad) : min(h, b["y2"] + pad + 1), max(0, b["x1"] - pad) : min(w, b["x2"] + pad + 1)] = True
    return m


@pytest.mark.parametrize("version,pad", [("v2", 1), ("v1", -2)])
def test_mask_keeps_focus_and_whitens_others(version, pad):
    img = _img()
    old = np.asarray(img)
    new = np.asarray(tools.apply_tool(img, ["a"], BOXES, axis="columns", op="mask", version=version))
    np.testing.assert_array_equal(np.asarray(img), old)  # input untouched
    white = _region(BOXES["b"], pad) | _region(BOXES["c"], pad)
    assert (new[white] == 255).all()
    np.testing.assert_array_equal(new[~white], old[~white])  # focused box and everything else identical


def test_mask_empty_or_all_keys_unchanged_and_rows_keep_header():
    img = _img(1)
    old = np.asarray(img)
    for keys in ([], ["zzz"]):
        np.testing.assert_array_equal(np.asarray(tools.focus_on_columns_with_mask(img, keys, BOXES)), old)
    # rows: the first box ("a") is the header and is never masked
    new = np.asarray(tools.focus_on_rows_with_mask(img, ["c"], BOXES))
    head = _region(BOXES["a"], 1)
    np.testing.assert_array_equal(new[head], old[head])
    assert (new[_region(BOXES["b"], 1)] == 255).all()
    # columns: the same call masks the first box
    assert (np.asarray(tools.focus_on_columns_with_mask(img, ["c"], BOXES))[_region(BOXES["a"], 1)] == 255).all()


@pytest.mark.parametrize("version,pad,width", [("v2", 2, 3), ("v1", -2, 5)])
def test_draw_changes_only_the_ring_to_red(version, pad, width):
    img = Image.new("RGB", (40, 30), (10, 200, 30))
    new = np.asarray(tools.apply_tool(img, ["b"], BOXES, axis="columns", op="draw", version=version))
    outer = _region(BOXES["b"], pad)
    inner = _region(BOXES["b"], pad - width)
    ring = outer & ~inner
    changed = (new != np.asarray(img)).any(-1)
    assert (changed == ring).all()
    assert (new[ring] == [255, 0, 0]).all()


def test_highlight_is_alpha_blend_inside_only():
    img = _img(2)
    old = np.asarray(img).astype(float)
    new = np.asarray(tools.focus_on_columns_with_highlight(img, ["a", "c"], BOXES)).astype(float)
    inside = _region(BOXES["a"], 0) | _region(BOXES["c"], 0)
    expect = old * (1 - 50 / 255) + np.array([255, 0, 0]) * (50 / 255)
    assert np.abs(new[inside] - expect[inside]).max() <= 1.0
    np.testing.assert_array_equal(new[~inside], old[~inside])


def test_fuzzy_match_only_in_v2_y_values_draw():
    img = Image.new("RGB", (40, 30), (0, 0, 0))
    boxes = {"Total sales": BOXES["a"], "b": BOXES["b"]}
    v2 = np.asarray(tools.v2_focus_on_y_values_with_draw(img, ["sales"], boxes))
    v1 = np.asarray(tools.v1_focus_on_y_values_with_draw(img, ["sales"], boxes))
    assert (v2 != 0).any() and (v1 == 0).all()


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
    assert refocus_score("8", "10") == pytest.approx(0.8)
    assert refocus_score("Spain||7", "7|||spain") == pytest.approx(1.0)
