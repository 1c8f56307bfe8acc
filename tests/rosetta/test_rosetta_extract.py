"""Function extraction, dict-update merge and error-line extraction (official extract_from_content.py,
iterative_error_correction.get_error_line)."""

from iclr26.rosetta.codegen import render_reward
from iclr26.rosetta.extract import assemble, error_line, extract_functions, function_at_line, merge_functions
from iclr26.rosetta.intent import Intent
from iclr26.rosetta.smoke import smoke_test

REPLY = """Here is the plan.
```python
import numpy as np

def evaluate(state):
    return {"success": state["x"] > 0}

def compute_dense_reward(state, action, info):
    return state["x"]
```
and a helper
```python
class Env:
    def helper(self):
        return 1
```
"""


def test_two_blocks_three_functions_exactly():
    funcs = extract_functions(REPLY)
    assert sorted(funcs) == ["compute_dense_reward", "evaluate", "helper"]
    assert funcs["helper"].startswith("def helper(self):")  # dedented method


def test_later_reply_updates_only_its_function():
    first = extract_functions(REPLY)
    later = extract_functions("```python\ndef evaluate(state):\n    return {'success': state['y'] > 1}\n```")
    merged = merge_functions(first, later)
    assert merged["evaluate"] != first["evaluate"] and "state['y']" in merged["evaluate"]
    assert merged["compute_dense_reward"] == first["compute_dense_reward"]
    assert merged["helper"] == first["helper"]
    assert extract_functions("no code here") == {}


def test_unparsable_block_still_yields_its_functions():
    funcs = extract_functions("```python\ndef evaluate(state):\n    return {'success': (\n```")
    assert list(funcs) == ["evaluate"]


def test_error_line_is_smallest_node_spanning_the_line():
    src = "def f(state):\n    a = 1\n    b = foo(\n        a,\n        2)\n    return b\n"
    # line 4 lies inside the 3-line statement `b = foo(...)`; the smallest spanning node is the Name `a`
    # on that line (span 0) -- as in the official visitor, which considers every node with a line range
    assert error_line({"f": src}, "f", 4) == "        a,\n"
    assert error_line({"f": src}, "f", 2) == "    a = 1\n"
    assert error_line({"f": src}, "f", 99) is None
    assert error_line({"f": src}, "g", 2) is None


def test_assemble_spans_map_lines_back():
    funcs = {"a": "def a():\n    return 1", "b": "def b():\n    x = 2\n    return x"}
    src, spans = assemble(funcs)
    lines = src.splitlines()
    assert lines[spans["b"][0] - 1] == "def b():" and lines[spans["b"][1] - 1] == "    return x"
    assert function_at_line(spans, spans["a"][0] + 1) == "a"
    assert function_at_line(spans, 1) is None


def test_sandbox_traceback_gives_the_failing_statement():
    intent = Intent((("red_cube", "bin2"),), speed_cap=0.03)
    for bug, text in (("clone", ".clone()"), ("key", '"tcp_velocity"'), ("scalar", "float(info")):
        res = smoke_test(render_reward(intent, True, (bug,)))
        assert not res.ok and res.kind == "RuntimeError"
        assert res.function == "compute_dense_reward"
        assert text in res.error_line and res.error_line.count("\n") == 1
