"""VTool-R1: VLMs Learn to Think with Images via Reinforcement Learning on Multimodal Tool Use.

Wu, Yang, Jiang, Li, Yan, Yu, Zhang, Zhai, Nahrstedt -- arXiv 2505.19255, ICLR 2026.

Implemented:

* :mod:`.tools` -- the twelve ReFocus image tools (mask / draw / highlight x columns / rows / x / y values),
  v1 and v2 geometry.
* :mod:`.parser` -- extracting the tool call from a response (notool / tool / failed), ``ensure_display_call``,
  ``trim_to_action_end``.
* :mod:`.executor` -- running tool code through :mod:`iclr26.core.sandbox` (a trusted in-process fast path
  only for the library's own whitelisted call form).
* :mod:`.reward` -- outcome reward (FINAL ANSWER extraction, exact match, the ReFocus heuristic, an
  OpenAI-compatible LLM-judge client) and the process-reward ablation.
* :mod:`.charts` -- synthetic bar-chart QA rendered with PIL (VAL / CMP / CNT / MAX questions, bbox metadata).
* :mod:`.model` -- ``TinyToolVLM`` (patch encoder + :class:`iclr26.core.transformer.Transformer`), its token
  language and the detokeniser that turns its calls into real Python.
* :mod:`.rollout` -- the two-round multimodal rollout with v1 / v2 trainable masks.
* :mod:`.vtool` -- ``VToolConfig`` (v2 default, v1 preset), SFT initialisation and GRPO training.
* :mod:`.prompt` and :mod:`.hf_policy` -- the paper-scale path (Qwen2.5-VL from a local path through
  transformers, ReFocus chart data from local parquet / jsonl).

Not implemented: the verl + Ray multi-GPU trainer itself (documented in the README), vision-tower training
details of Qwen2.5-VL beyond what transformers provides, the table split.

Submodules are imported lazily so that a sandbox child importing :mod:`.tools` does not load torch.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "tools": ("TOOL_NAMES", "PROMPT_TOOL_NAMES", "V1_TOOLS", "V2_TOOLS", "apply_tool", "tool_specs"),
    "parser": ("ParsedAction", "parse_action", "trim_to_action_end", "ensure_display_call"),
    "executor": ("ToolExecutor", "ToolResult", "whitelist_form"),
    "reward": ("extract_final_answer", "exact_match_reward", "refocus_score", "JudgeClient", "process_reward"),
    "charts": ("ChartSample", "make_chart", "make_dataset", "QUESTION_TYPES"),
    "model": ("TinyToolVLM", "TinyVLMConfig", "VOCAB", "detokenize_call"),
    "rollout": ("Rollout", "rollout_tools", "rollout_pure", "evaluate"),
    "vtool": ("VToolConfig", "PRESETS", "sft_init", "SFTConfig", "train_grpo", "vtool_loss"),
}
_WHERE = {name: mod for mod, names in _LAZY.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
