"""Paper-scale evaluation on a local GSM8K-format JSONL, one process or sharded under torchrun.

::

    python -m iclr26.daedal.eval --model /path/LLaDA-8B-Instruct --data gsm8k_test.jsonl \\
        --method daedal --out results/ --device cuda --dtype bfloat16
    torchrun --nproc_per_node=8 -m iclr26.daedal.eval --model ... --data ... --method fixed --gen-length 512

Each line of the JSONL is ``{"question": str, "answer": str}`` with the gold number after ``####``
(the GSM8K format). Rank r of W takes problems r, r + W, ...; results are gathered on rank 0,
which writes ``samples.jsonl`` and ``summary.json`` (accuracy, E_tok, N_tok, E_ratio, NFE).

Prompt: the tokenizer's chat template (when it has one) with the question, then the assistant turn
pre-filled with ``"<reasoning> "`` as in the released code. Answer: the last ``\\boxed{...}``, else
the content of ``<answer>...</answer>``, else the last number; compared as numbers.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import torch

from .generate import DaedalConfig, daedal_generate, llada_fixed_generate
from .hf import LLADA_EOS_ID, LLADA_MASK_ID, HFMaskedDiffusionAdapter, check_llada_ids, load_masked_diffusion_lm
from .metrics import effective_length

INSTRUCTION = (
    "Solve the following math problem. Reason inside <reasoning> </reasoning>, then write the "
    "final answer inside <answer> </answer> as \\boxed{{number}}.\n\n{question}"
)
ASSISTANT_PREFIX = "<reasoning> "


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    rows = []
    with open(path) as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i + 1}: not JSON ({e.msg})") from e
            if "question" not in row or "answer" not in row:
                raise ValueError(f"{path}:{i + 1}: needs 'question' and 'answer' fields")
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no problems")
    return rows


def gold_answer(answer: str) -> str:
    """GSM8K gold: the text after the last ``####``."""
    return answer.split("####")[-1].strip().replace(",", "")


def extract_prediction(text: str) -> str | None:
    """Last ``\\boxed{...}``, else ``<answer>...</answer>``, else the last number in the text."""
    boxed = re.findall(r"\\boxed\{([^{}]*)\}", text)
    if boxed:
        return boxed[-1].strip()
    ans = re.findall(r"<answer>(.*?)</answer>", text, flags=re.S)
    if ans:
        return ans[-1].strip()
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


def build_prompt(tokenizer: Any, question: str) -> list[int]:
    text = INSTRUCTION.format(question=question)
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids) + tokenizer(ASSISTANT_PREFIX, add_special_tokens=False)["input_ids"]
    return tokenizer(text + "\n" + ASSISTANT_PREFIX, add_special_tokens=False)["input_ids"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m iclr26.daedal.eval", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="local model directory (nothing is downloaded)")
    ap.add_argument("--data", required=True, help="local GSM8K-format JSONL")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--method", choices=("daedal", "fixed"), default="daedal")
    ap.add_argument("--gen-length", type=int, default=256, help="fixed: canvas length (steps = length)")
    ap.add_argument("--initial-length", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=2048)
    ap.add_argument("--block-length", type=int, default=32)
    ap.add_argument("--expansion-factor", type=int, default=8)
    ap.add_argument("--eos-window", type=int, default=32)
    ap.add_argument("--eos-anchor", type=int, default=None, help="default eos_window // 2 (released code)")
    ap.add_argument("--eos-conf-mode", choices=("code", "window_mean"), default="code")
    ap.add_argument("--mask-id", type=int, default=LLADA_MASK_ID)
    ap.add_argument("--eos-id", type=int, default=LLADA_EOS_ID)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--limit", type=int, default=0, help="first N problems only (0 = all)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument(
        "--no-attention-mask", action="store_true", help="the model rejects attention_mask: forces batch size 1"
    )
    ap.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run the modelling file in the model directory (LLaDA needs it; off unless asked for)",
    )
    ap.add_argument(
        "--check-atol",
        type=float,
        default=None,
        help="tolerance of the padded-vs-alone logits self-check (default 1e-3 in float32, 0.25 in 16-bit)",
    )
    ap.add_argument(
        "--position-ids-from-mask",
        action="store_true",
        help="pass position ids that ignore left padding (BERT-style models; not LLaDA)",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    args = parse_args(argv)
    from iclr26.core.train import setup_distributed

    rank, world = setup_distributed()
    device = args.device
    if device.startswith("cuda") and world > 1:
        device = f"cuda:{rank % max(1, torch.cuda.device_count())}"
    data = read_jsonl(args.data)
    if args.limit:
        data = data[: args.limit]
    model, tok = load_masked_diffusion_lm(
        args.model, device=device, dtype=args.dtype, trust_remote_code=args.trust_remote_code
    )
    check_llada_ids(tok, args.mask_id, args.eos_id)
    fn = HFMaskedDiffusionAdapter(
        model,
        pass_attention_mask=not args.no_attention_mask,
        device=device,
        position_ids_from_mask=args.position_ids_from_mask,
        check_atol=args.check_atol if args.check_atol is not None else (1e-3 if args.dtype == "float32" else 0.25),
    )
    bs = 1 if args.no_attention_mask else args.batch_size
    cfg = DaedalConfig(
        initial_length=args.initial_length,
        max_length=args.max_length,
        block_length=args.block_length,
        expansion_factor=args.expansion_factor,
        eos_window=args.eos_window,
        eos_anchor=args.eos_window // 2 if args.eos_anchor is None else args.eos_anchor,
        eos_conf_mode=args.eos_conf_mode,
    )
    mine = list(range(rank, len(data), world))
    records = []
    for start in range(0, len(mine), bs):
        idx = mine[start : start + bs]
        prompts = [torch.tensor(build_prompt(tok, data[i]["question"]), dtype=torch.long, device=device) for i in idx]
        if args.method == "daedal":
            out = daedal_generate(fn, prompts, args.mask_id, args.eos_id, cfg)
        else:
            out = llada_fixed_generate(
                fn, prompts, args.gen_length, args.gen_length, args.block_length, args.mask_id, args.eos_id
            )
        for k, i in enumerate(idx):
            seq = out.sequences[k]
            text = tok.decode(seq.tolist(), skip_special_tokens=False)
            pred = extract_prediction(text)
            gold = gold_answer(data[i]["answer"])
            records.append(
                {
                    "index": i,
                    "correct": same_number(pred, gold),
                    "pred": pred,
                    "gold": gold,
                    "N_tok": int(seq.numel()),
                    "E_tok": effective_length(seq, args.eos_id),
                    "stage1_length": int(out.stage1_lengths[k]),
                    "n_insertions": int(out.n_insertions[k]),
                    "nfe": int(out.nfe[k]),
                    "text": text,
                }
            )
        if rank == 0:
            print(f"[rank 0] {start + len(idx)}/{len(mine)} done", file=sys.stderr, flush=True)
    if world > 1:
        import torch.distributed as dist

        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, records)
        records = [r for part in gathered for r in part]
    if rank != 0:
        return None
    records.sort(key=lambda r: r["index"])
    n = len(records)
    total_e, total_n = sum(r["E_tok"] for r in records), sum(r["N_tok"] for r in records)
    summary = {
        "method": args.method,
        "n": n,
        "accuracy": 100.0 * sum(r["correct"] for r in records) / n,
        "E_tok": total_e / n,
        "N_tok": total_n / n,
        "E_ratio": 100.0 * total_e / max(1, total_n),
        "nfe": sum(r["nfe"] for r in records) / n,
        "config": vars(args),
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "samples.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "config"}))
    return summary


if __name__ == "__main__":
    main()
