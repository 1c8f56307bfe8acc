"""AceReason-Nemotron 1.1: Advancing Math and Code Reasoning through SFT and RL Synergy.

Liu, Yang, Chen, Lee, Shoeybi, Catanzaro, Ping (NVIDIA). ICLR 2026, arXiv 2506.13284.

Implemented:
  * the temperature-adjusted entropy H_T (entropy of softmax(z/T), token mean over response tokens,
    as verl logs it) and the temperature rule: bisection calibrator to H_T = 0.3 and the grid
    selection (``entropy``);
  * strict on-policy GRPO (one update per rollout batch, log-probs from logits / T, token mean, no KL,
    no entropy bonus) on top of ``iclr26.core.grpo``, overlong filtering, the pass-rate (<= 6/16) and
    solved-by-all prompt filters (``rl``);
  * the SFT scaling regression z = a std(log2 N) + b std(log2 R) + c (``scaling``);
  * the stage-wise RL recipe as data and its verl Hydra overrides (``recipe``);
  * the toy reproduction (ordered modular sums with a branching chain of thought, a tiny causal LM,
    SFT, KV-cached sampling (``core.transformer.generate``), RL at temperature T; ``task``, ``toy``,
    ``pipeline``, ``experiment``);
  * the paper-scale path: temperature calibration of a local Hugging Face checkpoint on local RL
    prompts, math (math-verify) and sandboxed code rewards, data-row checks, per-stage overrides
    (``paper``).

Not implemented: the SFT and RL training at 7B scale themselves (they run in torchrun/FSDP and verl
with the emitted settings); no training code of the paper is public.
"""

from .config import RunConfig, config_for
from .entropy import CalibrationResult, calibrate_temperature, select_from_grid, temperature_adjusted_entropy
from .recipe import VERL_KEYS, AceReasonRecipe, Stage, to_verl_overrides
from .rl import (
    OnPolicyGRPOConfig,
    apply_overlong_filter,
    onpolicy_grpo_loss,
    overlong_filter_mask,
    pass_rate_filter,
    solved_by_all_filter,
    zero_advantage_fraction,
)
from .scaling import ScalingFit, sft_scaling_regression
from .task import ToyTask, response_reward

__all__ = [
    "VERL_KEYS",
    "AceReasonRecipe",
    "CalibrationResult",
    "OnPolicyGRPOConfig",
    "RunConfig",
    "ScalingFit",
    "Stage",
    "ToyTask",
    "apply_overlong_filter",
    "calibrate_temperature",
    "config_for",
    "onpolicy_grpo_loss",
    "overlong_filter_mask",
    "pass_rate_filter",
    "response_reward",
    "select_from_grid",
    "sft_scaling_regression",
    "solved_by_all_filter",
    "temperature_adjusted_entropy",
    "to_verl_overrides",
    "zero_advantage_fraction",
]
