"""Paper scale (real VLMs from local checkpoints): placeholder entry point until the HF adapter lands."""

from __future__ import annotations

from iclr26.core.experiment import ExperimentError, RunContext, RunOutput


def run_paper(ctx: RunContext) -> RunOutput:
    """PLACEHOLDER: the paper-scale path (LLaVA / Qwen2.5-VL via transformers) is not implemented yet."""
    ctx.require_path("model_path")
    ctx.require_path("data_path")
    raise ExperimentError("vif paper scale is not implemented yet (placeholder); see the README")
