import importlib.util
import math
from pathlib import Path


def test_benchmark_functions_run_and_return_ratios():
    path = Path(__file__).parents[2] / "benchmarks" / "run_all.py"
    spec = importlib.util.spec_from_file_location("bench_run_all", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.B, mod.T = 2, 16  # tiny shapes: this checks the code runs, not the speed
    for ratio in (mod.bench_transformer(1, 1), mod.bench_fit(1, 2)):
        assert math.isfinite(ratio) and ratio > 0
