"""Paper-scale path (placeholder until the Hugging Face module lands)."""

from __future__ import annotations

from iclr26.core.experiment import ExperimentError, RunContext, RunOutput


def run_paper(ctx: RunContext) -> RunOutput:
    raise ExperimentError("subliminal: the paper-scale path is not implemented yet")
