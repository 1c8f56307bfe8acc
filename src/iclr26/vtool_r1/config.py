"""One typed config per run of VTool-R1 (printed by ``iclr26 run vtool_r1 --show-config``).

The class defaults of :class:`~.vtool.SFTConfig` and :class:`~.vtool.VToolConfig` are the full tiny
setting (SFT 2000+300 steps, RL 250 steps x 32 prompts x G=8); the tree below carries the budget that fits
two shared CPU cores (small scale), and ``config_for("smoke")`` shrinks it further.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .model import TinyVLMConfig
from .vtool import SFTConfig, VToolConfig


@dataclass(frozen=True)
class PaperConfig:
    """Paper scale: one local checkpoint evaluated on local ReFocus data (nothing downloads).

    model_path: local Qwen2.5-VL checkpoint folder (base model or a VTool-R1-trained one).
    data_path: local ReFocus chart split (.parquet needs pyarrow; .jsonl works without).
    limit: first N rows of the data file.
    judge_api_base: OpenAI-compatible endpoint of the LLM judge (empty: the ReFocus heuristic).
    judge_model_path: local causal LM folder (or a name from `iclr26 models`) as the judge instead of an endpoint.
    max_new_tokens: generation limit per round.
    batch_size: rows generated together (one batched generate call per round).
    """

    model_path: str = ""
    data_path: str = ""
    limit: int = 200
    judge_api_base: str = ""
    judge_model_path: str = ""
    max_new_tokens: int = 1024
    batch_size: int = 8


@dataclass(frozen=True)
class RunConfig:
    """Everything that changes a result of one VTool-R1 run (tiny scale; paper scale reads rl.version and paper).

    n_train: training charts per seed (question types as generated, not balanced).
    n_test: held-out test charts per seed (type-balanced).
    n_curve: first test charts used for the accuracy-vs-step curves.
    eval_every: RL steps between two curve evaluations.
    sft: the SFT initialisation (budget of the small scale).
    rl: GRPO of both RL arms (same budget; text-only GRPO is the same with use_tools=false).
    model: shape of TinyToolVLM.
    gate_min_pct: the gate in results.json: before RL the SFT model reads the tallest bar of a chart shown as
        the second image at >= this accuracy (%, mean over seeds).
    workers: seed worker processes (at most one per seed; the numbers do not depend on it).
    threads: torch threads per seed.
    paper: paper scale (local files).
    """

    n_train: int = 4000
    n_test: int = 600
    n_curve: int = 200
    eval_every: int = 25
    sft: SFTConfig = SFTConfig(pure_steps=400, tool_steps=800)
    rl: VToolConfig = VToolConfig(n_prompts=16, group_size=8, steps=136)
    model: TinyVLMConfig = TinyVLMConfig()
    gate_min_pct: float = 80.0
    workers: int = 3
    threads: int = 1
    paper: PaperConfig = PaperConfig()


def config_for(scale: str) -> RunConfig:
    """smoke: 400 train / 80 test charts, SFT 60+20 steps, RL 3 x 4 prompts x G=4; small and paper: the defaults."""
    base = RunConfig()
    if scale == "smoke":
        return replace(
            base,
            n_train=400,
            n_test=80,
            n_curve=40,
            eval_every=3,
            sft=replace(base.sft, pure_steps=60, tool_steps=20),
            rl=replace(base.rl, n_prompts=4, group_size=4, steps=3),
        )
    return base
