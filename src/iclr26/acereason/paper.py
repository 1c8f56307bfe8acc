"""Paper scale: calibrate the RL temperature of a local checkpoint to H_T = 0.3 on local RL prompts,
emit the stage's verl overrides, and provide the rewards (math: math-verify; code: tests run in
:mod:`iclr26.core.sandbox`) as a verl ``custom_reward_function`` (:func:`compute_score`).

Data formats (the released files): ``nvidia/AceReason-1.1-SFT`` rows have ``category``, ``source``,
``input``, ``output``; ``nvidia/AceReason-Math`` rows have ``problem``, ``answer`` (json lines). A row
missing a field stops the run with an error naming the row and the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from iclr26.core.experiment import ExperimentError, RunContext, RunOutput
from iclr26.core.hf import pure_generation_kwargs
from iclr26.core.sandbox import SandboxLimits, model_code_isolation, run_untrusted

from .entropy import calibrate_temperature, temperature_adjusted_entropy
from .recipe import AceReasonRecipe, to_verl_overrides

__all__ = [
    "MATH_RL_FIELDS",
    "SFT_FIELDS",
    "check_rows",
    "code_reward",
    "compute_score",
    "extract_boxed",
    "hf_rollout_entropy",
    "math_reward",
    "read_rows",
    "run_paper",
]

SFT_FIELDS = ("category", "source", "input", "output")
MATH_RL_FIELDS = ("problem", "answer")


def read_rows(path: str | Path) -> list[dict]:
    """Rows of a local ``.jsonl`` / ``.json`` (list of objects) / ``.parquet`` file."""
    p = Path(path)
    if not p.is_file():
        raise ExperimentError(f"{p}: no such file (nothing is downloaded)")
    if p.suffix == ".parquet":
        import pandas as pd

        return pd.read_parquet(p).to_dict("records")
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".json":
        rows = json.loads(text)
        if not isinstance(rows, list):
            raise ExperimentError(f"{p}: expected a JSON list of objects")
        return rows
    rows = []
    for i, line in enumerate(text.splitlines()):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ExperimentError(f"{p}: line {i + 1} is not JSON ({e.msg})") from e
    return rows


def check_rows(rows: Sequence[dict], fields: Sequence[str], what: str) -> None:
    """Raise naming the first row (0-based) that is not an object or lacks one of ``fields``."""
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ExperimentError(f"{what}: row {i} is not an object")
        missing = [f for f in fields if f not in row or row[f] is None]
        if missing:
            raise ExperimentError(f"{what}: row {i} lacks field(s) {missing}")


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (nested braces matched), or None when there is none."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return None


def math_reward(response: str, answer: str) -> tuple[float, str]:
    """``(reward, reason)``: 1 if the last boxed answer is equivalent to ``answer`` (math-verify when
    installed, else normalised string equality); an answerless response gets 0 with reason "no_answer"."""
    pred = extract_boxed(response)
    if pred is None:
        return 0.0, "no_answer"
    try:
        from math_verify import parse, verify
    except ImportError:
        same = _norm(pred) == _norm(str(answer))
        return float(same), "correct" if same else "wrong"
    gold_p, pred_p = parse("$" + str(answer) + "$"), parse("$" + pred + "$")
    ok = bool(gold_p) and bool(pred_p) and verify(gold_p, pred_p)
    if not ok and _norm(pred) == _norm(str(answer)):
        ok = True
    return float(ok), "correct" if ok else "wrong"


def _norm(s: str) -> str:
    return re.sub(r"\s+|\\!|\\,|\$", "", s).rstrip(".")


CODE_LIMITS = SandboxLimits(timeout_s=5.0, memory_mb=1024)
_CODE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)

_STDIN_SHIM = "stdin_lines = iter(stdin_text.splitlines())\ndef input(prompt=''):\n    return next(stdin_lines)\n"


def code_reward(
    response: str,
    tests: Sequence[dict],
    limits: SandboxLimits = CODE_LIMITS,
    isolation: str | None = None,
) -> tuple[float, str]:
    """``(reward, reason)``: 1 if the last python block passes every ``{"input", "output"}`` stdin/stdout
    test. The code runs only in :func:`iclr26.core.sandbox.run_untrusted`; a loop, crash, memory blow-up
    or escape attempt gives 0 with the sandbox's error kind as the reason, never an exception. Where only
    python-only isolation is possible (or it is named) and ICLR26_SANDBOX_ALLOW_PYTHON_ONLY is not set,
    :class:`iclr26.core.sandbox.IsolationRefused` is raised before any code runs."""
    blocks = _CODE.findall(response)
    if not blocks:
        return 0.0, "no_code"
    isolation = model_code_isolation(isolation)
    source = _STDIN_SHIM + blocks[-1]
    for k, t in enumerate(tests):
        res = run_untrusted(
            source, {"stdin_text": str(t["input"])}, result_name=None, limits=limits, isolation=isolation
        )
        if not res.ok:
            return 0.0, f"test {k}: {res.error}"
        if res.stdout.strip().split() != str(t["output"]).strip().split():
            return 0.0, f"test {k}: wrong_output"
    return 1.0, "passed"


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> float:
    """verl ``custom_reward_function`` entry: math rows score the boxed answer, code rows (data_source
    starting with "code") run ``ground_truth`` tests (a list or its JSON string) in the sandbox."""
    if str(data_source).startswith("code"):
        tests = json.loads(ground_truth) if isinstance(ground_truth, str) else list(ground_truth)
        return code_reward(solution_str, tests)[0]
    return math_reward(solution_str, str(ground_truth))[0]


@torch.no_grad()
def hf_rollout_entropy(
    model: Any, tokenizer: Any, prompts: Sequence[str], temperature: float, n: int, max_new_tokens: int, seed: int
) -> float:
    """H_T of ``n`` sampled responses per prompt from a Hugging Face causal LM: sample at T (top-p 1),
    re-run the sequences teacher-forced, take the entropy of softmax(logits / T) over response tokens."""
    device = next(model.parameters()).device
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True).to(device)
    torch.manual_seed(seed)
    out = model.generate(
        **enc,
        **pure_generation_kwargs(do_sample=True, temperature=float(temperature)),  # nothing from the model's config
        max_new_tokens=max_new_tokens,
        num_return_sequences=n,
        pad_token_id=tokenizer.pad_token_id,
    )
    p_len = enc["input_ids"].shape[1]
    attn = enc["attention_mask"].repeat_interleave(n, 0)
    resp = out[:, p_len:]
    # response tokens up to and including the first EOS
    is_eos = resp == tokenizer.eos_token_id
    after = (is_eos.cumsum(1) - is_eos.long()) > 0
    resp_mask = (~after).long()
    full_mask = torch.cat([attn, resp_mask], 1)
    logits = model(input_ids=out, attention_mask=full_mask).logits[:, p_len - 1 : -1].float()
    return float(temperature_adjusted_entropy(logits, temperature, resp_mask))


def _prompt_text(tokenizer: Any, problem: str) -> str:
    msg = [
        {
            "role": "user",
            "content": problem + "\nPlease reason step by step, and put your final answer within \\boxed{}.",
        }
    ]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(msg, tokenize=False, add_generation_prompt=True)
    return msg[0]["content"]


def run_paper(ctx: RunContext) -> RunOutput:
    """Calibrate T for ``cfg.paper.stage`` on the local checkpoint and RL prompts; write the overrides."""
    from iclr26.core.hf import load_local

    pc = ctx.cfg.paper
    model_dir = ctx.require_path("paper.model_path")
    data = ctx.require_path("paper.rl_data")
    rows = read_rows(data)
    check_rows(rows, MATH_RL_FIELDS, str(data))
    if not rows:
        raise ExperimentError(f"{data}: no rows")
    recipe = AceReasonRecipe()
    stage = recipe.stage(pc.stage)
    dtype = getattr(torch, pc.dtype) if ctx.device != "cpu" else torch.float32
    model, tok = load_local(model_dir, dtype=dtype, device=ctx.device)
    prompts = [_prompt_text(tok, str(r["problem"])) for r in rows[: pc.calib_prompts]]
    res = calibrate_temperature(
        lambda t: hf_rollout_entropy(model, tok, prompts, t, pc.calib_samples, pc.max_new_tokens, 0),
        recipe.entropy_target,
    )
    overrides = to_verl_overrides(
        recipe,
        stage,
        res.temperature,
        model_path=str(model_dir),
        train_files=str(data),
        reward_path=str(Path(__file__).resolve()),
        nnodes=pc.nnodes,
        gpus_per_node=pc.gpus_per_node,
    )
    out = ctx.out_dir / f"verl_overrides_{stage.name}.txt"
    out.write_text("\n".join(overrides) + "\n", encoding="utf-8")
    metrics = {
        "stage": stage.name,
        "t_star": res.temperature,
        "h_t_star": res.entropy,
        "history": res.history,
        "clamped": res.clamped,
        "overrides_file": str(out),
    }
    notes = [f"python -m verl.trainer.main_ppo $(cat {out})  # overlong filter hook: {stage.overlong_filter}"]
    return RunOutput(metrics=metrics, measured={}, notes=notes)
