"""Paper scale: a linear chain of agents over a POPE-style benchmark with a local Hugging Face VLM.

Every agent is the same VLM answering the row's yes/no question about the image, reading the upstream
agents' answers in its prompt. The answer is the sign of ``logit(yes) - logit(no)`` at the last prompt
position (one forward per agent, no sampling). Under ViF each agent runs a probe forward that records the
image tokens' layer curves (``"vif"`` attention, :mod:`iclr26.vif.hf`), classifies them (App. B.1) and
answers with the reallocation hook in the middle and deep bands (Sec. 4.3).

What runs here is the **training-free** variant (reallocation only): relay tokens need the stage-1
training of f on the real VLM, which is not implemented at this scale (the CPU scale trains it).
Episodes are sharded by rank under torchrun (``rows[rank::world]``); a row that cannot be used (bad
image, missing question or answer, image-token count at odds with the config) is a failed episode with
its error, and the run goes on.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from iclr26.core.experiment import ExperimentError, RunContext, RunOutput
from iclr26.vif.config import ViFConfig
from iclr26.vif.hf import (
    Row,
    ViFAttention,
    image_token_span,
    load_pope,
    processor_image_tokens,
    register_vif_attention,
    vif_attention,
)
from iclr26.vif.method import INACTIVE, Reallocation, classify, hs_score


def bands_for(n_layers: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Shallow / middle / deep layers: middle = about 35%-70% of depth (Fig. 2: layers 12-23 of 32)."""
    lo, hi = round(0.375 * n_layers), round(0.75 * n_layers)
    return tuple(range(lo)), tuple(range(lo, hi)), tuple(range(hi, n_layers))


def agent_prompt(question: str, upstream: list[str]) -> str:
    """The agent's text: upstream answers (oldest first), then the question [ours; the paper gives none]."""
    said = "".join(f"Agent {k + 1} answered: {a}.\n" for k, a in enumerate(upstream))
    return f"{said}{question} Answer yes or no."


@dataclass
class HFAgent:
    """A VLM as an agent. encode(prompt, image) -> model inputs (batch 1, with pixel_values);
    yes_id / no_id: answer token ids; image_token_id: the image placeholder id; n_image_tokens: the image-token
    count per prompt, a number or ``count(inputs)`` (the processor's rule, :func:`.hf.processor_image_tokens`:
    LLaVA-NeXT's anyres count depends on the image)."""

    model: torch.nn.Module
    encode: Callable[[str, object], dict]
    yes_id: int
    no_id: int
    image_token_id: int
    n_image_tokens: int | Callable[[dict], int]

    def expected_image_tokens(self, inputs: dict) -> int:
        n = self.n_image_tokens
        return int(n(inputs)) if callable(n) else int(n)

    @property
    def n_layers(self) -> int:
        cfg = self.model.config
        return getattr(cfg, "text_config", cfg).num_hidden_layers

    def logit(self, inputs: dict, state: ViFAttention | None = None) -> float:
        with torch.no_grad():
            if state is None:
                out = self.model(**inputs)
            else:
                with vif_attention(state):
                    out = self.model(**inputs)
        last = out.logits[0, -1].float()
        return float(last[self.yes_id] - last[self.no_id])


def vif_logit(agent: HFAgent, inputs: dict, vcfg: ViFConfig, row: int = -1) -> float:
    """Probe (layer curves of the image tokens) -> classify -> reallocated answer."""
    shallow, middle, deep = bands_for(agent.n_layers)
    ids = inputs["input_ids"][0]
    span = image_token_span(ids, agent.image_token_id, agent.expected_image_tokens(inputs), row)
    probe = ViFAttention(tuple(range(agent.n_layers)), None, record=True)
    agent.logit(inputs, probe)
    curves = torch.stack([probe.curves[layer][:, span] for layer in range(agent.n_layers)], -1).cpu()
    morph = classify(curves, tuple(middle), vcfg.omega, vcfg.inactive_var, vcfg.mono_tol)
    T = ids.shape[0]
    vision = torch.zeros(1, T, dtype=torch.bool)
    vision[:, span] = True
    active = torch.zeros_like(vision)
    active[:, span] = morph.kind != INACTIVE
    instruction = torch.zeros_like(vision)
    instruction[:, span.stop :] = True
    dev = ids.device
    hook = Reallocation.from_config(vcfg, middle, deep, vision.to(dev), active.to(dev), instruction.to(dev))
    return agent.logit(inputs, ViFAttention(middle + deep, hook))


def run_chain(
    agent: HFAgent, row: Row, turns: int, vcfg: ViFConfig, use_vif: bool, seeded: bool, max_msgs: int | None = None
) -> list[bool]:
    """One episode: per-turn correctness of ``turns`` agents (agent 1 forced wrong when seeded). Each agent reads
    the whole transcript of the earlier answers (``max_msgs`` None, as the paper's chains) or only the last
    ``max_msgs`` of them (``data.context=window``)."""
    if row.error:
        raise ValueError(row.error)
    truth = row.answer == "yes"
    said: list[str] = []
    correct = []
    for t in range(turns):
        upstream = said if max_msgs is None else said[max(0, len(said) - max_msgs) :]
        inputs = agent.encode(agent_prompt(row.question, upstream), row.image)
        logit = vif_logit(agent, inputs, vcfg, row.index) if use_vif else agent.logit(inputs)
        pred = logit > 0
        if seeded and t == 0:
            pred = not truth
        said.append("yes" if pred else "no")
        correct.append(pred == truth)
    return correct


def evaluate_rows(
    agent: HFAgent,
    rows: list[Row],
    turns: int,
    vcfg: ViFConfig,
    rank: int = 0,
    world: int = 1,
    max_msgs: int | None = None,
) -> dict:
    """Text-only and ViF chains on this rank's shard, seeded and natural; failed episodes listed. ``max_msgs``:
    see :func:`run_chain` (None: the whole transcript)."""
    out: dict = {"failed": []}
    for row in rows[rank::world]:
        for name, use_vif in (("text", False), ("vif", True)):
            for split in ("seeded", "natural"):
                try:
                    res = run_chain(agent, row, turns, vcfg, use_vif, split == "seeded", max_msgs)
                except Exception as exc:  # a bad row is a failed episode; the run continues
                    out["failed"].append(
                        {"row": row.index, "variant": f"{name}_{split}", "error": f"{type(exc).__name__}: {exc}"}
                    )
                    continue
                out.setdefault(f"{name}_{split}", []).append(res)
    return out


def summarise_rows(out: dict) -> dict:
    metrics: dict = {"failed": out["failed"]}
    for key, eps in out.items():
        if key == "failed" or not eps:
            continue
        c = torch.tensor(eps, dtype=torch.bool)
        metrics[key] = {
            "episodes": len(eps),
            "acc_turn": c.float().mean(0).tolist(),
            "final_acc": float(c[:, -1].float().mean()),
            "hs": float(hs_score(c).mean()),
        }
    return metrics


def _load_agent(model_path, device) -> HFAgent:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    register_vif_attention()
    model = AutoModelForImageTextToText.from_pretrained(
        model_path, local_files_only=True, attn_implementation="vif", torch_dtype="auto"
    )
    model = model.to(device).eval()
    proc = AutoProcessor.from_pretrained(model_path, local_files_only=True)
    tok = proc.tokenizer

    def encode(prompt: str, image) -> dict:
        msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        text = proc.apply_chat_template(msgs, add_generation_prompt=True)
        return {k: v.to(device) for k, v in proc(images=image, text=text, return_tensors="pt").items()}

    yes, no = tok.encode("Yes", add_special_tokens=False)[0], tok.encode("No", add_special_tokens=False)[0]
    image_token_id = getattr(model.config, "image_token_id", None)
    if image_token_id is None:
        image_token_id = model.config.image_token_index  # LLaVA-NeXT's name for it
    return HFAgent(
        model, encode, yes, no, int(image_token_id), lambda inputs: processor_image_tokens(proc, inputs, model.config)
    )


def run_paper(ctx: RunContext) -> RunOutput:
    """``iclr26 run vif --scale paper --set model_path=DIR --set data_path=FILE.jsonl [--set image_root=DIR]``."""
    cfg = ctx.cfg
    model_path, data_path = ctx.require_path("model_path"), ctx.require_path("data_path")
    try:
        agent = _load_agent(model_path, ctx.device)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]  # one line (transformers lists every VLM class)
        raise ExperimentError(f"cannot load a VLM from {model_path}: {type(exc).__name__}: {first}") from exc
    rows = load_pope(data_path, cfg.image_root or None)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    window = cfg.data.max_msgs if cfg.data.context == "window" else None  # transcript (default): every answer
    out = evaluate_rows(agent, rows, cfg.eval.turns, cfg.vif, rank, world, window)
    if world > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        parts: list = [None] * world
        dist.all_gather_object(parts, out)
        out = {"failed": [f for p in parts for f in p["failed"]]}
        for p in parts:
            for k, v in p.items():
                if k != "failed":
                    out.setdefault(k, []).extend(v)
    metrics = summarise_rows(out)
    return RunOutput(
        metrics=metrics,
        measured={},
        notes=[f"{len(metrics['failed'])} failed episodes (see metrics)", "paper scale: training-free ViF (no relay)"],
    )
