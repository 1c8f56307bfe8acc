"""Paper-scale path: released row formats, rewards (math-verify, sandboxed code), HF calibration, overrides."""

import json

import pytest
import torch

from iclr26.acereason.entropy import temperature_adjusted_entropy
from iclr26.acereason.paper import (
    MATH_RL_FIELDS,
    SFT_FIELDS,
    check_rows,
    code_reward,
    compute_score,
    extract_boxed,
    hf_rollout_entropy,
    math_reward,
    read_rows,
)
from iclr26.acereason.recipe import VERL_KEYS
from iclr26.core.experiment import ExperimentError, run_experiment


@pytest.fixture
def python_only(monkeypatch):
    monkeypatch.setenv("ICLR26_SANDBOX_ISOLATION", "python-only")
    monkeypatch.setenv("ICLR26_SANDBOX_ALLOW_PYTHON_ONLY", "1")


def test_released_row_formats_load_and_missing_fields_are_named(tmp_path):
    sft = tmp_path / "sft.jsonl"
    sft.write_text(json.dumps({"category": "math", "source": "numina", "input": "1+1?", "output": "<think>2"}) + "\n")
    check_rows(read_rows(sft), SFT_FIELDS, "sft")
    bad = tmp_path / "rl.jsonl"
    bad.write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n" + json.dumps({"problem": "x"}) + "\n")
    with pytest.raises(ExperimentError, match=r"row 1 lacks field\(s\) \['answer'\]"):
        check_rows(read_rows(bad), MATH_RL_FIELDS, "rl")
    with pytest.raises(ExperimentError, match="no such file"):
        read_rows(tmp_path / "missing.jsonl")


def test_math_reward_boxed_and_answerless():
    assert extract_boxed(r"so \boxed{\frac{1}{2}} and finally \boxed{\frac{3}{4}}") == r"\frac{3}{4}"
    assert math_reward(r"... the answer is \boxed{\frac{1}{2}}", "0.5")[0] == 1.0
    assert math_reward(r"\boxed{7}", "8") == (0.0, "wrong")
    assert math_reward("I think it is 8", "8") == (0.0, "no_answer")
    assert compute_score("math", r"\boxed{12}", "12") == 1.0


def test_code_reward_runs_in_the_sandbox(python_only):
    tests = [{"input": "2 3\n", "output": "5\n"}, {"input": "10 -4\n", "output": "6"}]
    good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert code_reward(good, tests) == (1.0, "passed")
    wrong = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
    assert code_reward(wrong, tests) == (0.0, "test 0: wrong_output")
    assert code_reward("no code here", tests) == (0.0, "no_code")
    assert compute_score("code_lcb", good, json.dumps(tests)) == 1.0


def test_policy_code_that_loops_crashes_or_escapes_gets_zero(python_only):
    from iclr26.core.sandbox import SandboxLimits

    fast = SandboxLimits(timeout_s=2.0)
    tests = [{"input": "1\n", "output": "1"}]
    r, why = code_reward("```python\nwhile True:\n    pass\n```", tests, fast)
    assert r == 0.0 and "Timeout" in why
    r, why = code_reward("```python\nraise ValueError('x')\n```", tests, fast)
    assert r == 0.0 and why.startswith("test 0:") and why != "test 0: wrong_output"
    r, why = code_reward("```python\nimport os\nos.system('echo hi')\n```", tests, fast)
    assert r == 0.0 and why.startswith("test 0:") and why != "test 0: wrong_output"


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory):
    from iclr26.core.hf import tiny_random_causal_lm

    d = tmp_path_factory.mktemp("tiny_lm")
    model, tok = tiny_random_causal_lm(d, hidden=32, layers=1, heads=2, arch="llama", max_positions=256)
    return d, model, tok


def test_hf_rollout_entropy_is_the_temperature_adjusted_entropy(tiny_hf):
    _, model, tok = tiny_hf
    h_low = hf_rollout_entropy(model, tok, ["abc", "de"], 0.5, 2, 6, seed=0)
    h_high = hf_rollout_entropy(model, tok, ["abc", "de"], 2.0, 2, 6, seed=0)
    assert 0.0 < h_low < h_high <= torch.log(torch.tensor(float(model.config.vocab_size))).item() + 1e-5
    # a random tiny model is near-uniform: at T = 2, H_T is close to log V, far above a T = 0.5 value
    z = torch.randn(1, 1, model.config.vocab_size)
    assert float(temperature_adjusted_entropy(z, 2.0)) > float(temperature_adjusted_entropy(z, 0.5))


def test_paper_scale_run_writes_overrides(tiny_hf, tmp_path):
    d, _, _ = tiny_hf
    data = tmp_path / "AceReason-Math.jsonl"
    data.write_text("\n".join(json.dumps({"problem": f"What is {i}+{i}?", "answer": str(2 * i)}) for i in range(3)))
    opts = {
        "paper.model_path": str(d),
        "paper.rl_data": str(data),
        "paper.calib_prompts": "2",
        "paper.calib_samples": "2",
        "paper.max_new_tokens": "4",
        "paper.stage": "math-16k",
    }
    rec = run_experiment(
        __import__("iclr26.acereason.experiment", fromlist=["EXPERIMENT"]).EXPERIMENT,
        "paper",
        out_root=tmp_path / "runs",
        options=opts,
        show_progress=False,
    )
    m = rec.results["metrics"]
    assert 0.3 <= m["t_star"] <= 1.5 and m["stage"] == "math-16k"
    lines = (rec.out_dir / "verl_overrides_math-16k.txt").read_text().split()
    kv = dict(x.split("=", 1) for x in lines)
    assert set(kv) <= set(VERL_KEYS) and float(kv["actor_rollout_ref.rollout.temperature"]) == pytest.approx(
        m["t_star"], abs=1e-4
    )
    assert kv["actor_rollout_ref.rollout.n"] == "16"


def test_paper_scale_errors_are_clear(tmp_path, tiny_hf):
    from iclr26.acereason.experiment import EXPERIMENT

    with pytest.raises(ExperimentError, match="paper.model_path"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path, show_progress=False)
    d, _, _ = tiny_hf
    bad = tmp_path / "rl.jsonl"
    bad.write_text(json.dumps({"question": "1+1"}) + "\n")
    with pytest.raises(ExperimentError, match="row 0 lacks"):
        run_experiment(
            EXPERIMENT,
            "paper",
            out_root=tmp_path,
            show_progress=False,
            options={"paper.model_path": str(d), "paper.rl_data": str(bad)},
        )
