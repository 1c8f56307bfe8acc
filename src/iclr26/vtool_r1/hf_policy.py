"""Paper-scale path: a real VLM (Qwen2.5-VL-3B/7B/32B-Instruct from a LOCAL path) as the policy, the same
parser / tool executor / reward as the tiny reproduction, ReFocus chart data from local parquet or jsonl.

* :func:`load_refocus` reads rows with ``question`` / ``prompt``, ``answer``, ``metadata`` (JSON with
  ``type`` and bboxes; table bboxes normalised are scaled by the image size) and an image (``image`` /
  ``images`` bytes or ``figure_path``). Parquet is read with ``pyarrow`` (a clear error if it is missing).
* :class:`VToolEnv` is framework-agnostic: ``execute(y', image, metadata)``, ``round2_messages``,
  ``reward(y, gt)``.
* :class:`HFPolicy` wraps ``transformers``' image-text-to-text model + processor (loaded with
  ``local_files_only``; nothing downloads) and generates from chat messages.
* :func:`two_round_rollout` is the same two-round rollout as :mod:`.rollout`, on text.
* :func:`run_paper_scale` (``iclr26 run vtool_r1 --scale paper --set model_path=... --set data_path=...``)
  evaluates the pure run and the tool-use rollout of the given (base or VTool-R1-trained) checkpoint.

Training at paper scale is done with verl + Ray (see the README): multi-GPU FSDP2 actor/reference, vLLM
rollout, our executor inside the agent loop, v2 masking. Not run here (no GPU); the single-GPU sanity path is
:func:`two_round_rollout` + :mod:`iclr26.core.grpo` on the HF model.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from iclr26.core.paths import PathOutsideRoot, path_inside

from .executor import ToolExecutor, ToolResult
from .parser import parse_action
from .prompt import round1_messages, round2_messages
from .reward import JudgeClient, LocalJudge, extract_final_answer, heuristic_reward

__all__ = ["HFPolicy", "VToolEnv", "load_refocus", "run_paper_scale", "two_round_rollout", "two_round_rollout_batch"]


def _scaled_bboxes(meta: Mapping, key: str, w: int, h: int) -> dict:
    boxes = dict(meta.get(key) or {})
    out = {}
    for k, b in boxes.items():
        b = dict(b)
        if all(0.0 <= float(b[c]) <= 1.0 for c in ("x1", "y1", "x2", "y2")) and meta.get("type") == "table":
            b = {"x1": b["x1"] * w, "x2": b["x2"] * w, "y1": b["y1"] * h, "y2": b["y2"] * h}
        out[str(k)] = b
    return out


def _image(row: Mapping, root: Path) -> Image.Image:
    """The row's image: embedded bytes, or a file inside ``root`` (a path outside it is refused unopened)."""
    for key in ("image", "images"):
        v = row.get(key)
        if isinstance(v, list) and v:
            v = v[0]
        if isinstance(v, Mapping):
            v = v.get("bytes") or v.get("path")
        if isinstance(v, bytes | bytearray):
            return Image.open(io.BytesIO(v)).convert("RGB")
        if isinstance(v, str) and v:
            return Image.open(path_inside(root, v)).convert("RGB")
    if row.get("figure_path"):
        return Image.open(path_inside(root, row["figure_path"])).convert("RGB")
    raise ValueError(f"row has no image (keys: {sorted(row)})")


def load_refocus(path: str | Path, limit: int | None = None) -> list[dict]:
    """Rows ``{"image", "question", "answer", "metadata": {"type", "columns_bbox", "rows_bbox"}, "error"}``.

    Image paths are relative to the data file's folder and must stay inside it (no absolute path, no
    ``..``, no symlink out). A row whose image is outside it, missing or undecodable, or whose metadata does
    not parse, comes back with ``image`` None and a one-line ``error`` ("row N: ..."); ``error`` is None
    otherwise."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"ReFocus data not found: {path}")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            raise ImportError("reading parquet needs pyarrow (pip install pyarrow), or convert to .jsonl") from e
        rows = pq.read_table(path).to_pylist()
    else:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [_refocus_row(i, row, path.parent) for i, row in enumerate(rows[:limit])]


def _refocus_row(index: int, row: object, root: Path) -> dict:
    if not isinstance(row, Mapping):
        return {"image": None, "question": "", "answer": "", "metadata": {}, "error": f"row {index}: not an object"}
    question = row.get("question") or row.get("prompt") or ""
    if isinstance(question, list):
        question = " ".join(m.get("content", "") if isinstance(m, Mapping) else str(m) for m in question)
    out = {"image": None, "question": str(question), "answer": str(row.get("answer", "")), "metadata": {}}
    try:
        img = _image(row, root)
        meta = row.get("metadata") or {}
        meta = json.loads(meta) if isinstance(meta, str) else dict(meta)
        w, h = img.size
        cols = _scaled_bboxes(meta, "columns_bbox" if "columns_bbox" in meta else "x_values_bbox", w, h)
        rws = _scaled_bboxes(meta, "rows_bbox" if "rows_bbox" in meta else "y_values_bbox", w, h)
    except PathOutsideRoot as e:  # the data file is input, not a licence to open any file of the machine
        return {**out, "error": f"row {index}: image {e}"}
    except Exception as e:  # missing or undecodable image, malformed metadata: the row fails, the run continues
        return {**out, "error": f"row {index}: {type(e).__name__}: {e}"[:300]}
    if meta.get("type", "v_bar") != "table":  # charts: both names point at the label boxes
        cols = rws = cols or rws
    meta_out = {"type": meta.get("type", "v_bar"), "columns_bbox": cols, "rows_bbox": rws}
    return {**out, "image": img, "metadata": meta_out, "error": None}


@dataclass
class VToolEnv:
    """Tools, prompt and reward of VTool-R1, independent of the training framework."""

    version: str = "v2"
    """Official semantics ("v1" / "v2")."""
    executor: ToolExecutor = field(default_factory=lambda: ToolExecutor(mode="sandbox"))
    """Free-form model code: always the sandbox at paper scale."""
    judge: Callable | None = None
    """``judge(question, gt, answer) -> 0/1`` (e.g. :class:`JudgeClient`); None = the ReFocus heuristic."""

    def execute(self, y1: str, image: Image.Image, metadata: Mapping) -> tuple[str, ToolResult | None]:
        """Parse y' and run its code: (kind, result) with kind notool / tool / failed."""
        p = parse_action(y1, self.version)
        if p.kind == "notool":
            return "notool", None
        if p.kind == "failed":
            return "failed", ToolResult(False, error="SyntaxError", message=p.error, path="parse")
        boxes = metadata.get("columns_bbox") or {}
        res = (
            self.executor.execute(p.code, image, boxes)
            if boxes == metadata.get("rows_bbox", boxes)
            else self._execute_table(p.code, image, metadata)
        )
        return "tool", res

    def _execute_table(self, code: str, image: Image.Image, metadata: Mapping) -> ToolResult:
        from iclr26.core.sandbox import model_code_isolation, run_untrusted

        from .executor import _from_displayed
        from .tools import tool_specs

        res = run_untrusted(
            code,
            {
                "image_1": image.copy(),
                "columns_bbox": dict(metadata["columns_bbox"]),
                "rows_bbox": dict(metadata["rows_bbox"]),
            },
            tools=tool_specs(self.version),
            result_name=None,
            limits=self.executor.limits,
            isolation=model_code_isolation(),
        )
        return _from_displayed(res.displayed) if res.ok else ToolResult(False, error=res.error, message=res.message)

    def reward(self, question: str, y: str, gt: str) -> float:
        ans = extract_final_answer(y, self.version)
        if self.judge is not None:
            return float(self.judge(question, gt, ans))
        return heuristic_reward(ans, gt)


def two_round_rollout(generate: Callable[[list[dict]], str], row: Mapping, env: VToolEnv) -> dict:
    """y' = generate(round 1); run the tool; y = generate(round 2) when a tool was called (v1: on success)."""
    msgs = round1_messages(row["image"], row["question"], row["metadata"])
    y1 = generate(msgs)
    kind, res = env.execute(y1, row["image"], row["metadata"])
    ok = bool(res is not None and res.ok)
    if kind == "notool" or (env.version == "v1" and not ok):
        y, y2 = y1, None
    else:
        edited = Image.fromarray(res.image) if ok else None
        y2 = generate(round2_messages(row["image"], edited, row["question"], row["metadata"], y1, ok, env.version))
        y = y2
    return {"y1": y1, "y2": y2, "kind": kind, "tool_ok": ok, "reward": env.reward(row["question"], y, row["answer"])}


def two_round_rollout_batch(
    generate_batch: Callable[[list[list[dict]]], list[str]], rows: list[Mapping], env: VToolEnv
) -> list[dict]:
    """:func:`two_round_rollout` for many rows with one batched generation per round."""
    y1s = generate_batch([round1_messages(r["image"], r["question"], r["metadata"]) for r in rows])
    steps = [env.execute(y1, r["image"], r["metadata"]) for y1, r in zip(y1s, rows, strict=True)]
    oks = [bool(res is not None and res.ok) for _, res in steps]
    second = [i for i, (kind, _) in enumerate(steps) if kind != "notool" and (env.version == "v2" or oks[i])]
    chats = []
    for i in second:
        r, res = rows[i], steps[i][1]
        edited = Image.fromarray(res.image) if oks[i] else None
        chats.append(round2_messages(r["image"], edited, r["question"], r["metadata"], y1s[i], oks[i], env.version))
    y2s = dict(zip(second, generate_batch(chats) if chats else [], strict=True))
    out = []
    for i, r in enumerate(rows):
        y = y2s.get(i, y1s[i])
        out.append(
            {
                "y1": y1s[i],
                "y2": y2s.get(i),
                "kind": steps[i][0],
                "tool_ok": oks[i],
                "reward": env.reward(r["question"], y, r["answer"]),
            }
        )
    return out


class HFPolicy:
    """A local Hugging Face image-text-to-text model (e.g. Qwen2.5-VL-7B-Instruct) as ``generate(messages)``."""

    def __init__(
        self, model_path: str | Path, device: str = "cpu", max_new_tokens: int = 1024, temperature: float = 0.0
    ):
        import transformers

        from iclr26.core.hf import _check_dir, _offline

        path = _check_dir(model_path, "model")
        with _offline():
            self.processor = transformers.AutoProcessor.from_pretrained(path, local_files_only=True)
            cls = getattr(transformers, "AutoModelForImageTextToText", None) or transformers.AutoModelForVision2Seq
            self.model = cls.from_pretrained(path, local_files_only=True, torch_dtype="auto").to(device).eval()
        self.device, self.max_new_tokens, self.temperature = device, max_new_tokens, temperature

    def __call__(self, messages: list[dict]) -> str:
        import torch

        prefix = messages[-1]["role"] == "assistant"  # v1 round 2: continue the assistant turn
        inputs = self.processor.apply_chat_template(
            messages,
            add_generation_prompt=not prefix,
            continue_final_message=prefix,
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
        ).to(self.device)
        kw = {"do_sample": self.temperature > 0, "max_new_tokens": self.max_new_tokens}
        if self.temperature > 0:
            kw.update(temperature=self.temperature, top_p=0.99)
        with torch.no_grad():
            out = self.model.generate(**inputs, **kw)
        return self.processor.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)[0]

    def batch(self, chats: list[list[dict]]) -> list[str]:
        """Generate for many chats at once (left padding; see :func:`.hf_train.generate_batch`)."""
        from .hf_train import VLChatEncoder, generate_batch

        enc = VLChatEncoder.from_processor(self.processor)
        return generate_batch(self.model, enc, chats, self.max_new_tokens, self.temperature, self.device)


def run_paper_scale(ctx):
    """Evaluate a local checkpoint on local ReFocus data: pure run and tool-use accuracy, tool-call rate."""
    from iclr26.core.experiment import ExperimentError, RunOutput, mean_std
    from iclr26.core.report import markdown_table

    pc, version = ctx.cfg.paper, ctx.cfg.rl.version
    model_path = ctx.require_path("paper.model_path")
    data_path = ctx.require_path("paper.data_path")
    if pc.judge_api_base and pc.judge_model_path:
        raise ExperimentError("set one judge: paper.judge_api_base (an endpoint) or paper.judge_model_path (local)")
    judge = JudgeClient(pc.judge_api_base) if pc.judge_api_base else None
    if pc.judge_model_path:
        judge = LocalJudge(str(ctx.require_path("paper.judge_model_path")), device=ctx.device)
    try:
        rows = load_refocus(data_path, pc.limit)
        policy = HFPolicy(model_path, ctx.device, pc.max_new_tokens)
    except (ImportError, ValueError, OSError) as e:
        raise ExperimentError(f"vtool_r1 paper scale: {e}") from e
    row_errors = [r["error"] for r in rows if r["error"]]
    rows = [r for r in rows if not r["error"]]
    if not rows:
        raise ExperimentError(f"vtool_r1 paper scale: no usable row in {data_path} (first error: {row_errors[:1]})")
    env = VToolEnv(version=version, judge=judge)
    pure, tool, called = [], [], []
    chunks = [rows[b : b + pc.batch_size] for b in range(0, len(rows), pc.batch_size)]
    for chunk in ctx.progress(chunks, desc="eval"):
        ys = policy.batch([round1_messages(r["image"], r["question"], r["metadata"], tools=False) for r in chunk])
        pure += [env.reward(r["question"], y, r["answer"]) for r, y in zip(chunk, ys, strict=True)]
        for r in two_round_rollout_batch(policy.batch, chunk, env):
            tool.append(r["reward"])
            called.append(float(r["kind"] != "notool"))
    acc = {
        "pure_run": mean_std([100 * x for x in pure]),
        "tool_use": mean_std([100 * x for x in tool]),
        "tool_call_rate": mean_std([100 * x for x in called]),
    }
    m = {"vtool_acc": acc["tool_use"]["mean"], "text_grpo_acc": float("nan"), "diff": float("nan")}
    return RunOutput(
        metrics={
            "accuracy_pct": acc,
            "n": len(rows),
            "row_errors": len(row_errors),
            "judge_failures": len(judge.failures) if judge is not None else None,
        },
        measured={
            "C1": m,
            "C2": {"text_grpo_acc": float("nan"), "pure_acc": acc["pure_run"]["mean"], "diff": float("nan")},
            "C3": {"vtool_acc": acc["tool_use"]["mean"], "prompted_acc": float("nan"), "diff": float("nan")},
            "C4": {"gap": float("nan")},
        },
        tables={
            "Paper-scale evaluation": markdown_table(
                ["setting", "acc %"], [[k, f"{v['mean']:.1f}"] for k, v in acc.items()]
            )
        },
        notes=[
            "Paper scale evaluates one checkpoint; the claims need the base and the trained checkpoint "
            "(run twice) and are reported as not measured here."
        ]
        + (
            [
                f"{len(judge.failures)} judge calls failed and were scored by the heuristic instead; first: "
                f"{judge.failures[0][:200]}"
            ]
            if judge is not None and judge.failures
            else []
        )
        + ([f"{len(row_errors)} data rows failed and were left out; first: {row_errors[0]}"] if row_errors else []),
    )
