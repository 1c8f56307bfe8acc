"""benchmarks/apt_step_time.py runs and reports what it says (ratios and parameter counts, never a time)."""

import importlib.util
import math
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _bench():
    path = Path(__file__).parents[2] / "benchmarks" / "apt_step_time.py"
    spec = importlib.util.spec_from_file_location("apt_step_time", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_step_ratio_runs_on_both_shapes_and_counts_added_parameters():
    mod = _bench()
    for shape in (None, (20, 8, 32, 16)):
        b0, apt, ratio, added = mod.bench_apt(shape, repeats=1, steps=1, batch=8)
        assert b0 > 0 and apt > 0 and math.isfinite(ratio) and ratio == pytest.approx(apt / b0)
        assert added > 0
    # per-class prompts (12 + 16 classes, L 6, D 384) + φ (73·384 + 384) + f_θ (3·384·64 + 64 + 64·384 + 384), x2
    _, _, _, added = mod.bench_apt(None, repeats=1, steps=1, batch=8)
    assert added == 12 * 6 * 384 + 64 * 384 + 384 + 3 * 384 * 64 + 64 + 64 * 384 + 384 + (
        16 * 6 * 384 + 73 * 384 + 384 + 3 * 384 * 64 + 64 + 64 * 384 + 384
    )


def test_parameter_budget_matches_the_spec_figures():
    budget = _bench().parameter_budget()
    values = list(budget.values())
    assert values[0] == 1_232_912  # official code sizes: about 1.23 M
    assert values[1] == 1_589_912  # paper's per-class prompts: 150·6·300 + 50·6·300 more
    assert values[2] < 500_000  # the only one of the three under "< 0.5 M"
