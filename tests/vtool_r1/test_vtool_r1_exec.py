"""Tool execution through the sandbox (spec 8.3): valid calls, hostile / malformed code, the namespace."""

import numpy as np
import pytest
from PIL import Image

from iclr26.core.sandbox import SandboxLimits
from iclr26.vtool_r1 import tools
from iclr26.vtool_r1.charts import make_chart
from iclr26.vtool_r1.executor import ToolExecutor, whitelist_form
from iclr26.vtool_r1.model import ID, detokenize_round1
from iclr26.vtool_r1.parser import parse_action

CHART = make_chart(np.random.default_rng(3), "CMP")
CALL = 'img = focus_on_columns_with_mask(image_1, ["{a}", "{b}"], columns_bbox)\ndisplay(img)\n'


def test_valid_call_fast_equals_sandbox_equals_direct_tool():
    code = CALL.format(a=CHART.args[0], b=CHART.args[1])
    assert whitelist_form(code) is not None
    fast = ToolExecutor(mode="auto").execute(code, CHART.image, CHART.bboxes)
    slow = ToolExecutor(mode="sandbox").execute(code, CHART.image, CHART.bboxes)
    want = np.asarray(tools.focus_on_columns_with_mask(Image.fromarray(CHART.image), list(CHART.args), CHART.bboxes))
    assert fast.ok and slow.ok and fast.path == "fast" and slow.path == "sandbox"
    np.testing.assert_array_equal(fast.image, want)
    np.testing.assert_array_equal(slow.image, want)


def test_whitelist_rejects_anything_else():
    ok = CALL.format(a="x", b="y")
    assert whitelist_form(ok) is not None
    for code in (
        "import os\n" + ok,
        ok + "x = 1\n",
        ok.replace("image_1", "open('f')"),
        ok.replace('["x", "y"]', "[k for k in 'ab']"),
        ok.replace("columns_bbox", "{}"),
        "img = focus_on_columns_with_mask(image_1, ['x'], columns_bbox)\n",  # no display
        "display(image_1.copy())\n",
        "print(1)\n",
    ):
        assert whitelist_form(code) is None, code


@pytest.mark.parametrize(
    "code,kind",
    [
        ("import os\ndisplay(image_1)\n", "ImportBlocked"),
        ("f = open('/etc/passwd')\ndisplay(image_1)\n", "SecurityViolation"),
        ("x = ().__class__.__bases__\ndisplay(image_1)\n", "SecurityViolation"),
        ("raise ValueError('boom')\n", "RuntimeError"),
        ("img = focus_on_columns_with_mask(image_1, [tok_7], columns_bbox)\ndisplay(img)\n", "RuntimeError"),
        ("display(3)\n", "NotAnImage"),
        ("img = focus_on_columns_with_mask(image_1, ['x'], columns_bbox)\n", "NoImage"),
        ("img = focus_on_columns_with_mask(image_1, ['x']\n", "SyntaxError"),
        ("while True:\n    pass\n", "Timeout"),
    ],
)
def test_hostile_or_malformed_code_is_a_failed_step(code, kind):
    ex = ToolExecutor(limits=SandboxLimits(timeout_s=1.0, memory_mb=1024))
    res = ex.execute(code, CHART.image, CHART.bboxes)
    assert not res.ok and res.image is None and res.error == kind, (res.error, res.message)


def test_namespace_is_tools_inputs_display_only_and_original_untouched():
    want = sorted(tools.TOOL_NAMES) + ["columns_bbox", "display", "image_1", "rows_bbox"]
    code = (
        "names = sorted(n for n in dir() if n[0] != '_')\n"
        f"ok = names == {sorted(want)!r}\n"
        "image_1.paste((0, 0, 0), (0, 0, 48, 48))\n"
        "if ok:\n    display(image_1)\n"
    )
    img = Image.fromarray(CHART.image)
    before = np.asarray(img).copy()
    res = ToolExecutor().execute(code, img, CHART.bboxes)
    assert res.ok and res.path == "sandbox" and (res.image == 0).all()
    np.testing.assert_array_equal(np.asarray(img), before)


def test_detokenized_calls_roundtrip_and_malformed_fail():
    a, b = CHART.args
    toks = [ID["CALL"], ID["MASK"], ID["COL"], ID[a], ID[b], ID["ENDCALL"]]
    text = detokenize_round1(toks)
    p = parse_action(text)
    assert p.kind == "tool" and whitelist_form(p.code) is not None
    res = ToolExecutor().execute(p.code, CHART.image, CHART.bboxes)
    assert res.ok
    # truncated call (no ENDCALL) -> code that does not compile
    assert parse_action(detokenize_round1(toks[:4])).kind == "failed"
    # missing op -> an unknown function: runs (in the sandbox) and fails
    p2 = parse_action(detokenize_round1([ID["CALL"], ID["COL"], ID[a], ID["ENDCALL"]]))
    assert p2.kind == "tool" and whitelist_form(p2.code) is None
    r2 = ToolExecutor().execute(p2.code, CHART.image, CHART.bboxes)
    assert not r2.ok and r2.error == "RuntimeError"
    assert parse_action(detokenize_round1([ID["DIRECT"], ID["7"], ID["EOS"]])).kind == "notool"


def test_execute_many_mixes_paths_in_order():
    a, b = CHART.args
    codes = [CALL.format(a=a, b=b), "display(3)\n", CALL.format(a=b, b=a)]
    ex = ToolExecutor()
    out = ex.execute_many(codes, [CHART.image] * 3, [CHART.bboxes] * 3)
    assert [r.ok for r in out] == [True, False, True] and [r.path for r in out] == ["fast", "sandbox", "fast"]
    assert ex.stats == {"fast": 2, "sandbox": 1}
