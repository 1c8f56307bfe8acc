"""Model-written code refuses python-only isolation unless the user allows it (``sandbox.allow_python_only``)."""

import json
import os
from dataclasses import dataclass

import numpy as np
import pytest

from iclr26.core import sandbox
from iclr26.core.config import ConfigError
from iclr26.core.experiment import Claim, Experiment, RunOutput, run_experiment
from iclr26.core.sandbox import (
    ALLOW_PYTHON_ONLY_ENV,
    PYTHON_ONLY_WARNING,
    IsolationRefused,
    model_code_isolation,
)


@pytest.fixture
def kernel(monkeypatch):
    """``kernel(why)``: pretend the kernel layer is available (None) or not (a reason); no allowance set."""
    monkeypatch.delenv(ALLOW_PYTHON_ONLY_ENV, raising=False)
    monkeypatch.delenv("ICLR26_SANDBOX_ISOLATION", raising=False)

    def set_(why):
        monkeypatch.setattr(sandbox, "_AVAILABLE", [why])

    return set_


def test_kernel_where_available_and_refusal_of_the_python_only_fallback(kernel, monkeypatch):
    kernel(None)
    assert model_code_isolation() == "kernel"
    kernel("IsolationUnavailable: no user namespaces")
    with pytest.raises(IsolationRefused) as info:
        model_code_isolation()
    msg = str(info.value)
    assert "\n" not in msg and "no user namespaces" in msg and "--set sandbox.allow_python_only=true" in msg
    assert "not a security boundary" in msg
    assert model_code_isolation(allow_python_only=True) == "python-only"
    monkeypatch.setenv(ALLOW_PYTHON_ONLY_ENV, "true")
    assert model_code_isolation() == "python-only"
    with pytest.raises(IsolationRefused):  # an explicit False wins over the environment
        model_code_isolation(allow_python_only=False)
    monkeypatch.setenv(ALLOW_PYTHON_ONLY_ENV, "0")
    with pytest.raises(IsolationRefused):
        model_code_isolation()


def test_python_only_named_is_refused_even_with_the_kernel_layer_available(kernel, monkeypatch):
    kernel(None)
    with pytest.raises(IsolationRefused, match="python-only sandbox isolation was requested"):
        model_code_isolation("python-only")
    monkeypatch.setenv("ICLR26_SANDBOX_ISOLATION", "python-only")
    with pytest.raises(IsolationRefused):
        model_code_isolation()
    assert model_code_isolation("kernel") == "kernel"
    monkeypatch.setenv(ALLOW_PYTHON_ONLY_ENV, "1")
    assert model_code_isolation() == "python-only"


def test_paper_callers_refuse_before_any_code_runs(kernel, monkeypatch):
    from PIL import Image

    from iclr26.acereason.paper import code_reward
    from iclr26.rosetta.smoke import SandboxedReward, SmokeRunner
    from iclr26.vtool_r1.executor import ToolExecutor

    kernel("IsolationUnavailable: test")
    started = []
    monkeypatch.setattr(sandbox._Child, "__init__", lambda *a, **k: started.append(a) or 1 / 0)
    funcs = {
        "evaluate": "def evaluate(state):\n    return {}",
        "compute_dense_reward": "def compute_dense_reward(s, a, i):\n    return 0",
    }
    with pytest.raises(IsolationRefused):
        SandboxedReward(funcs)
    with pytest.raises(IsolationRefused):
        SmokeRunner(steps=1)
    tests = [{"input": "1\n", "output": "1\n"}]
    with pytest.raises(IsolationRefused):
        code_reward("```python\nprint(input())\n```", tests)
    assert code_reward("no code", tests) == (0.0, "no_code")  # nothing to run: nothing refused
    image = Image.fromarray(np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(IsolationRefused):
        ToolExecutor(mode="sandbox").execute("display(image_1)", image, {})
    assert started == []


def test_allowed_python_only_runs_the_code(kernel, monkeypatch):
    from iclr26.acereason.paper import code_reward

    kernel("IsolationUnavailable: test")
    monkeypatch.setenv(ALLOW_PYTHON_ONLY_ENV, "1")
    seen = []
    real = sandbox.run_untrusted
    monkeypatch.setattr(
        "iclr26.acereason.paper.run_untrusted", lambda *a, **k: seen.append(k["isolation"]) or real(*a, **k)
    )
    tests = [{"input": "2 3\n", "output": "5\n"}]
    assert code_reward("```python\na, b = map(int, input().split())\nprint(a + b)\n```", tests) == (1.0, "passed")
    assert seen == ["python-only"]


@dataclass(frozen=True)
class _Cfg:
    """isolation: sandbox isolation ("" = default)."""

    isolation: str = ""


def _experiment(runs_model_code=True):
    def run(ctx):
        mode = model_code_isolation(ctx.cfg.isolation or None) if runs_model_code else None  # a paper's caller
        return RunOutput(metrics={"allow": os.environ.get(ALLOW_PYTHON_ONLY_ENV), "mode": mode}, measured={"C1": 1})

    return Experiment(
        slug="toy_model_code",
        title="toy",
        arxiv="0",
        claims=(Claim("C1", "s", 1, "r", lambda m: True),),
        run=run,
        config=lambda scale: _Cfg(),
        runs_model_code=runs_model_code,
    )


def test_runner_refuses_before_the_run_and_warns_in_the_results_when_allowed(kernel, tmp_path):
    kernel("IsolationUnavailable: test")
    with pytest.raises(IsolationRefused):
        run_experiment(_experiment(), "smoke", (0,), tmp_path, {}, show_progress=False)
    assert not any(tmp_path.iterdir())  # nothing ran, no run folder
    with pytest.raises(ConfigError, match="sandbox.allow_python_only=maybe"):
        run_experiment(_experiment(), "smoke", (0,), tmp_path, {"sandbox.allow_python_only": "maybe"})
    rec = run_experiment(
        _experiment(), "smoke", (0,), tmp_path, {"sandbox.allow_python_only": "true"}, show_progress=False
    )
    results = json.loads((rec.out_dir / "results.json").read_text())
    assert results["warnings"] == [PYTHON_ONLY_WARNING]
    assert results["metrics"] == {"allow": "1", "mode": "python-only"}  # the run's callers saw the allowance
    assert PYTHON_ONLY_WARNING in (rec.out_dir / "report.md").read_text()
    assert ALLOW_PYTHON_ONLY_ENV not in os.environ  # only for the run's duration


def test_runner_uses_the_papers_isolation_leaf_and_ignores_papers_without_model_code(kernel, tmp_path):
    kernel(None)
    rec = run_experiment(_experiment(), "smoke", (0,), tmp_path, {}, show_progress=False)
    assert "warnings" not in rec.results and rec.results["metrics"]["mode"] == "kernel"
    with pytest.raises(IsolationRefused):
        run_experiment(_experiment(), "smoke", (0,), tmp_path, {"isolation": "python-only"}, show_progress=False)
    kernel("IsolationUnavailable: test")
    rec = run_experiment(_experiment(False), "smoke", (0,), tmp_path, {}, show_progress=False)
    assert "warnings" not in rec.results


def test_cli_exits_2_for_python_only_model_code_without_the_allowance(tmp_path, capsys, monkeypatch):
    from iclr26.cli import main

    monkeypatch.delenv(ALLOW_PYTHON_ONLY_ENV, raising=False)
    monkeypatch.delenv("ICLR26_SANDBOX_ISOLATION", raising=False)
    out = ["--scale", "smoke", "--out", str(tmp_path), "--no-progress"]
    assert main(["run", "rosetta", *out, "--set", "pipeline.isolation=python-only"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--set sandbox.allow_python_only=true" in err
    monkeypatch.setenv("ICLR26_SANDBOX_ISOLATION", "python-only")
    assert main(["run", "vtool_r1", *out]) == 2
    assert "sandbox.allow_python_only" in capsys.readouterr().err
    assert main(["run", "vtool_r1", *out, "--set", "sandbox.allow_python_only=perhaps"]) == 2
    assert "expected a boolean" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
