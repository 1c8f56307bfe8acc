"""Paper-scale evaluation on a local GSM8K or MATH500 JSONL, one process or sharded under torchrun.

::

    python -m iclr26.daedal.eval --model /path/LLaDA-8B-Instruct --trust-remote-code \\
        --data gsm8k_test.jsonl --method daedal --out results/ --device cuda --dtype bfloat16
    torchrun --nproc_per_node=8 -m iclr26.daedal.eval --model ... --data ... --method fixed --gen-length 512
    torchrun --nproc_per_node=8 -m iclr26.daedal.eval --task math500 --data math500_test.jsonl ...

Every flag is a field of :class:`~iclr26.daedal.config.PaperConfig` (or of its ``daedal``
:class:`~iclr26.daedal.generate.DaedalConfig`) and takes its default from there, the same fields
``iclr26 run daedal --scale paper --set paper.FIELD=...`` sets (``--help`` lists them).

Data (the released formats): GSM8K (``openai/gsm8k``, main, test) lines are ``{"question", "answer"}``
with the gold number after ``####``; MATH500 (``HuggingFaceH4/MATH-500``, test) lines are
``{"problem", "solution", "answer", "subject", "level", "unique_id"}`` with the gold in ``answer``.
Rank r of W takes problems r, r + W, ...; results are gathered on rank 0, which writes
``<out>/<method>/samples.jsonl`` and ``summary.json`` (accuracy, E_tok, N_tok, E_ratio, NFE).

Prompt: the official task prompt (``dllm_eval/tasks/gsm8k/utils.py`` ``gsm_prompt`` and
``dllm_eval/tasks/math500/utils.py`` ``math500_prompt``: the same instruction, then the question)
in the tokenizer's chat template, the assistant turn pre-filled with ``"<reasoning> "`` as in the
released code. Answer: the last ``\\boxed{...}`` (braces matched), else the content of
``<answer>...</answer>`` (as ``metrics/gsm8k.py``); checked with math-verify (``checker="math_verify"``,
default) or as a plain number / string (``checker="number"``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from argparse import SUPPRESS
from pathlib import Path
from typing import Any

import torch

from iclr26.core.config import ConfigError, config_docs, config_to_dict, flatten, override
from iclr26.core.serialize import to_jsonable

from .config import PaperConfig
from .generate import DaedalConfig, daedal_generate, llada_fixed_generate
from .hf import HFMaskedDiffusionAdapter, check_llada_ids, load_masked_diffusion_lm
from .metrics import effective_length

# the official task prompt: the instruction of dllm_eval/tasks/{gsm8k,math500}/utils.py, then the question
OFFICIAL_INSTRUCTION = (
    "You are a math expert. You will be given a question to solve. Solve it step by step. Wrap the final "
    "answer in a \\boxed{}. \n"
    "Respond in the following format:\n"
    "<reasoning>\n"
    "Your reasoning here\n"
    "</reasoning>\n"
    "<answer>\n"
    "\\boxed{...}\n"
    "</answer>"
)
ASSISTANT_PREFIX = "<reasoning> "
# field names of the released data sets: (question field, gold field)
TASK_FIELDS = {"gsm8k": ("question", "answer"), "math500": ("problem", "answer")}


def task_prompt(question: str) -> str:
    """The official ``gsm_prompt`` / ``math500_prompt`` text for one question."""
    return f"{OFFICIAL_INSTRUCTION}\n\n{question}\n\n"


def read_jsonl(path: str | Path, task: str = "gsm8k") -> list[dict[str, Any]]:
    """Rows of a GSM8K or MATH500 JSONL in the released format (see the module docstring)."""
    if task not in TASK_FIELDS:
        raise ValueError(f"unknown task {task!r}; choose from {sorted(TASK_FIELDS)}")
    need = TASK_FIELDS[task]
    rows = []
    with open(path) as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i + 1}: not JSON ({e.msg})") from e
            missing = [k for k in need if k not in row]
            if missing:
                raise ValueError(f"{path}:{i + 1}: a {task} line needs the fields {list(need)}, missing {missing}")
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no problems")
    return rows


def gold_answer(answer: str, task: str = "gsm8k") -> str:
    """GSM8K gold: the text after the last ``####``; MATH500 gold: the ``answer`` field as it is."""
    if task == "gsm8k":
        return answer.split("####")[-1].strip().replace(",", "")
    return str(answer).strip()


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (nested braces matched), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return None


def extract_prediction(text: str, number_fallback: bool = True) -> str | None:
    """Last ``\\boxed{...}``, else ``<answer>...</answer>``, else (``number_fallback``) the last number."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    ans = re.findall(r"<answer>(.*?)</answer>", text, flags=re.S)
    if ans:
        return ans[-1].strip()
    if not number_fallback:
        return None
    nums = re.findall(r"-?\d[\d,]*\.?\d*", text)
    return nums[-1] if nums else None


def same_number(pred: str | None, gold: str) -> bool:
    if pred is None:
        return False
    p = pred.replace(",", "").replace("$", "").strip().rstrip(".")
    g = gold.replace(",", "").strip()
    try:
        return abs(float(p) - float(g)) < 1e-6
    except ValueError:
        return p == g


def math_equal(pred: str | None, gold: str) -> bool:
    """math-verify: the prediction and the gold parsed as LaTeX / expressions and compared symbolically."""
    if pred is None:
        return False
    from math_verify import parse, verify

    g, p = parse(f"${gold}$"), parse(f"${pred}$")
    if not g or not p:
        return same_number(pred, gold)
    return bool(verify(g, p))


def is_correct(pred: str | None, gold: str, checker: str = "math_verify") -> bool:
    """``checker``: "math_verify" (symbolic, the paper-scale default) or "number" (numbers, else strings)."""
    if checker == "math_verify":
        return math_equal(pred, gold)
    if checker == "number":
        return same_number(pred, gold)
    raise ValueError(f"unknown checker {checker!r}")


def build_prompt(tokenizer: Any, question: str) -> list[int]:
    """Token ids: the official task prompt in the chat template, then the ``"<reasoning> "`` prefix."""
    text = task_prompt(question)
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids) + tokenizer(ASSISTANT_PREFIX, add_special_tokens=False)["input_ids"]
    return tokenizer(text + "\n" + ASSISTANT_PREFIX, add_special_tokens=False)["input_ids"]


# flags whose name is not the field's own (kept from earlier command lines); every other field of
# PaperConfig / DaedalConfig is ``--field-name`` (booleans also ``--no-field-name``)
_FLAG_NAMES = {"model_path": ("--model",), "data_path": ("--data",), "fixed_length": ("--gen-length", "--fixed-length")}


def _flags() -> list[tuple[str, tuple[str, ...], Any, Any, str]]:
    """(dotted key, flags, annotation, default, doc) for every leaf of :class:`PaperConfig`."""
    docs = {**config_docs(DaedalConfig), **config_docs(PaperConfig)}
    out = []
    for key, tp, default in flatten(PaperConfig()):
        name = key.rsplit(".", 1)[-1]
        flags = _FLAG_NAMES.get(name, ("--" + name.replace("_", "-"),))
        out.append((key, flags, tp, default, docs.get(name, "")))
    return out


def parse_args(argv: list[str] | None = None) -> tuple[PaperConfig, Path]:
    """Command line -> (config, output folder); every default is :class:`PaperConfig`'s (one place)."""
    ap = argparse.ArgumentParser(prog="python -m iclr26.daedal.eval", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output folder (one subfolder per method)")
    for key, flags, tp, default, doc in _flags():
        help_text = f"{doc} (default: {json.dumps(to_jsonable(default))})".replace("%", "%%")
        if tp is bool:
            ap.add_argument(*flags, dest=key, action=argparse.BooleanOptionalAction, default=SUPPRESS, help=help_text)
        else:
            ap.add_argument(*flags, dest=key, default=SUPPRESS, metavar=key.rsplit(".", 1)[-1].upper(), help=help_text)
    ns = vars(ap.parse_args(argv))
    out = Path(ns.pop("out"))
    try:
        cfg = override(PaperConfig(), ns)
    except ConfigError as exc:
        ap.error(str(exc).replace("--set ", ""))
    for key in ("model_path", "data_path"):
        if not getattr(cfg, key):
            ap.error(f"{_FLAG_NAMES[key][0]} is required")
    return cfg, out


def resolve_device(device: str) -> str:
    """``auto`` -> cuda when available, else cpu."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def main(argv: list[str] | None = None) -> dict[str, dict[str, Any]] | None:
    """``python -m iclr26.daedal.eval``: {method: summary} on rank 0, None on the other ranks."""
    cfg, out = parse_args(argv)
    return evaluate(cfg, out)


def evaluate(cfg: PaperConfig, out_dir: str | Path) -> dict[str, dict[str, Any]] | None:
    """Decode ``cfg.data_path`` with ``cfg.method`` (both: DAEDAL then fixed), files under ``out_dir/<method>/``.

    Returns {method: summary} on rank 0 and None on the other ranks (sharded under torchrun).
    """
    from iclr26.core.train import rank_device, setup_distributed

    device = resolve_device(cfg.device)
    # each rank bound to cuda:LOCAL_RANK before the process group (and any collective) exists
    rank, world = setup_distributed(device)
    device = rank_device(device)
    data = read_jsonl(cfg.data_path, cfg.task)
    if cfg.limit:
        data = data[: cfg.limit]
    model, tok = load_masked_diffusion_lm(
        cfg.model_path, device=device, dtype=cfg.dtype, trust_remote_code=cfg.trust_remote_code
    )
    check_llada_ids(tok, cfg.mask_id, cfg.eos_id)
    fn = HFMaskedDiffusionAdapter(
        model,
        pass_attention_mask=cfg.attention_mask,
        device=device,
        position_ids_from_mask=cfg.position_ids_from_mask,
        self_check=cfg.self_check,
        check_atol=cfg.resolved_check_atol(),
    )
    methods = ("daedal", "fixed") if cfg.method == "both" else (cfg.method,)
    summaries = {}
    for method in methods:
        records = _decode(fn, tok, data, cfg, method, device, rank, world)
        if world > 1:
            import torch.distributed as dist

            gathered: list[Any] = [None] * world
            dist.all_gather_object(gathered, records)
            records = [r for part in gathered for r in part]
        if rank == 0:
            summaries[method] = _write(records, cfg, method, Path(out_dir) / method)
    if world > 1:  # every rank leaves together; exiting with a live gloo group can abort a rank at shutdown
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    return summaries if rank == 0 else None


def _decode(fn, tok, data, cfg: PaperConfig, method: str, device, rank: int, world: int) -> list[dict[str, Any]]:
    """This rank's share (problems rank, rank + world, ...) decoded with ``method``."""
    bs = cfg.batch_size if cfg.attention_mask else 1
    dc = cfg.daedal
    q_field, gold_field = TASK_FIELDS[cfg.task]
    mine = list(range(rank, len(data), world))
    records = []
    for start in range(0, len(mine), bs):
        idx = mine[start : start + bs]
        prompts = [torch.tensor(build_prompt(tok, data[i][q_field]), dtype=torch.long, device=device) for i in idx]
        if method == "daedal":
            out = daedal_generate(fn, prompts, cfg.mask_id, cfg.eos_id, dc)
        else:
            L = cfg.fixed_length
            out = llada_fixed_generate(
                fn,
                prompts,
                L,
                L,
                dc.block_length,
                cfg.mask_id,
                cfg.eos_id,
                attend_prompt_padding=dc.attend_prompt_padding,
                cfg_mask_prompt_padding=dc.cfg_mask_prompt_padding,
                cfg_scale=dc.cfg_scale,
                temperature=dc.temperature,
            )
        for k, i in enumerate(idx):
            seq = out.sequences[k]
            text = tok.decode(seq.tolist(), skip_special_tokens=False)
            pred = extract_prediction(text, number_fallback=cfg.checker == "number")
            gold = gold_answer(data[i][gold_field], cfg.task)
            records.append(
                {
                    "index": i,
                    "correct": is_correct(pred, gold, cfg.checker),
                    "pred": pred,
                    "gold": gold,
                    "N_tok": int(seq.numel()),
                    "E_tok": effective_length(seq, cfg.eos_id),
                    "stage1_length": int(out.stage1_lengths[k]),
                    "n_insertions": int(out.n_insertions[k]),
                    "nfe": int(out.nfe[k]),
                    "text": text,
                }
            )
        if rank == 0:
            print(f"[rank 0] {method}: {start + len(idx)}/{len(mine)} done", file=sys.stderr, flush=True)
    return records


def _write(records: list[dict[str, Any]], cfg: PaperConfig, method: str, out_dir: Path) -> dict[str, Any]:
    """samples.jsonl + summary.json (accuracy, E_tok, N_tok, E_ratio as a ratio of totals, NFE)."""
    records.sort(key=lambda r: r["index"])
    n = len(records)
    total_e, total_n = sum(r["E_tok"] for r in records), sum(r["N_tok"] for r in records)
    summary = {
        "method": method,
        "task": cfg.task,
        "checker": cfg.checker,
        "n": n,
        "accuracy": 100.0 * sum(r["correct"] for r in records) / n,
        "E_tok": total_e / n,
        "N_tok": total_n / n,
        "E_ratio": 100.0 * total_e / max(1, total_n),
        "nfe": sum(r["nfe"] for r in records) / n,
        "config": config_to_dict(cfg),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "samples.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}))
    return summary


if __name__ == "__main__":
    main()
