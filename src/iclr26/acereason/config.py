"""Typed run configuration of the AceReason reproduction: one frozen dataclass tree per scale."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = [
    "E1Config",
    "E2Config",
    "E3Config",
    "E4Config",
    "ModelConfig",
    "PretrainConfig",
    "PaperConfig",
    "RLConfig",
    "RealConfig",
    "RunConfig",
    "SFTConfig",
    "TaskConfig",
    "config_for",
]


@dataclass(frozen=True)
class TaskConfig:
    """The toy ordered-sum task.

    k_min: fewest items per prompt.
    k_max: most items per prompt.
    hard_k_min: the hard split has k in [hard_k_min, k_max].
    easy_k_max: the easy split (competence gate) has k in [k_min, easy_k_max].
    p_leftmost: teacher's probability of taking the leftmost unused item (the entropy knob).
    distinct: the items of a prompt are distinct digits.
    n_eval: held-out prompts per evaluation split.
    eval_samples: n of avg@n at evaluation.
    eval_temperature: inference temperature (paper: 0.6).
    """

    k_min: int = 2
    k_max: int = 6
    hard_k_min: int = 5
    easy_k_max: int = 4
    p_leftmost: float = 0.5
    distinct: bool = True
    n_eval: int = 300
    eval_samples: int = 8
    eval_temperature: float = 0.6


@dataclass(frozen=True)
class ModelConfig:
    """The tiny causal LM (core.transformer).

    d_model: residual width.
    n_layers: blocks.
    n_heads: attention heads.
    max_len: longest sequence (prompt 8 + response 15 fit).
    """

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    max_len: int = 32


@dataclass(frozen=True)
class PretrainConfig:
    """The "base model" stage before SFT (ours; the paper starts SFT from the math base Qwen2.5-Math-7B):
    running-sum chains and in-order copies of prompts, not the task itself.

    steps: optimiser steps.
    batch_size: sequences per step.
    lr: peak AdamW learning rate (warmup then cosine).
    """

    steps: int = 800
    batch_size: int = 64
    lr: float = 1e-3


@dataclass(frozen=True)
class SFTConfig:
    """Supervised fine-tuning on teacher responses (paper: 5-6 epochs; the rest is ours).

    epochs: passes over each SFT dataset (compute grows with data, as in the paper).
    batch_size: sequences per step.
    lr: peak AdamW learning rate (warmup then cosine).
    warmup_frac: warmup steps as a fraction of all steps.
    weight_decay: AdamW weight decay.
    """

    epochs: int = 6
    batch_size: int = 8
    lr: float = 1e-3
    warmup_frac: float = 0.05
    weight_decay: float = 0.01


@dataclass(frozen=True)
class E1Config:
    """E1, SFT scaling (the paper's v1..v7): datasets of N prompts x R responses.

    n_prompts: N per dataset.
    n_responses: R per dataset (same length as n_prompts).
    """

    n_prompts: tuple[int, ...] = (200, 400, 800, 1600, 800, 1600, 1600)
    n_responses: tuple[int, ...] = (1, 1, 1, 1, 2, 2, 4)


@dataclass(frozen=True)
class RLConfig:
    """Strict on-policy GRPO (AceReason 1.0 recipe at toy size).

    steps: RL steps (one update per rollout batch).
    prompts_per_step: prompts per batch (paper: 128).
    group_size (G): rollouts per prompt (paper: 8 at the first stage).
    lr: AdamW learning rate (paper 1e-6 for a 7B model; toy value).
    grad_clip: max gradient norm (verl default 1.0).
    k_min: RL prompts have k in [k_min, task.k_max] (hard prompts, as in the later math stages).
    overlong_filter: truncated responses masked out of the loss (on in stages 1-3).
    budget: response token budget; 0 = the teacher length for k_max.
    adv_eps (ε): added to the group std.
    """

    steps: int = 80
    prompts_per_step: int = 16
    group_size: int = 8
    lr: float = 1e-4
    grad_clip: float = 1.0
    k_min: int = 5
    overlong_filter: bool = True
    budget: int = 0
    adv_eps: float = 1e-6


@dataclass(frozen=True)
class E2Config:
    """E2, RL temperature and the entropy rule.

    init: index into E1's datasets of the SFT init RL starts from.
    temperatures: the fixed-T grid (paper: 0.6, 0.85, 1.0).
    entropy_target: H_T the calibrator aims at (paper: 0.3 nats).
    t_min: lower end of the calibration range.
    t_max: upper end of the calibration range.
    tol: calibration tolerance on |H_T - target|.
    calib_prompts: prompts (x G rollouts) per entropy measurement.
    """

    init: int = 5
    temperatures: tuple[float, ...] = (0.6, 0.85, 1.0, 1.3)
    entropy_target: float = 0.3
    t_min: float = 0.3
    t_max: float = 1.5
    tol: float = 0.01
    calib_prompts: int = 64


@dataclass(frozen=True)
class E3Config:
    """E3, stronger SFT gives stronger RL: the same RL at the calibrated T* from a weak and a strong init.

    weak: (N, R) index into E1's datasets of the weak init.
    strong: (N, R) index into E1's datasets of the strong init.
    """

    weak: int = 1
    strong: int = 6


@dataclass(frozen=True)
class E4Config:
    """E4 (reported, not claimed): overlong filtering on/off at a tight budget.

    enabled: run it.
    budget_frac: budget as a fraction of the teacher length for k_max.
    """

    enabled: bool = False
    budget_frac: float = 0.6


@dataclass(frozen=True)
class PaperConfig:
    """Paper scale: calibrate the RL temperature of a local checkpoint and emit verl overrides per stage.

    model_path: local Hugging Face checkpoint folder (e.g. Qwen2.5-Math-7B after SFT).
    rl_data: local math RL file (jsonl/parquet rows with problem, answer).
    stage: stage of the recipe to calibrate for (math-8k, ..., math-32k).
    calib_prompts: prompts used by the calibrator.
    calib_samples: rollouts per prompt in each entropy measurement.
    max_new_tokens: rollout length cap during calibration (the stage budget is used for training).
    nnodes: verl trainer.nnodes.
    gpus_per_node: verl trainer.n_gpus_per_node.
    dtype: model dtype for calibration ("bfloat16" on GPU).
    """

    model_path: str = ""
    rl_data: str = ""
    stage: str = "math-8k"
    calib_prompts: int = 64
    calib_samples: int = 4
    max_new_tokens: int = 2048
    nnodes: int = 1
    gpus_per_node: int = 8
    dtype: str = "bfloat16"


@dataclass(frozen=True)
class RealConfig:
    """Real scale (:mod:`.real`): the temperature rule on a real instruction-tuned causal LM, CPU-sized.

    Values fixed before the first real run (sizes cut to fit the shared 2-core machine; the paper uses
    128 prompts x 8 rollouts per step and thousands of steps). ``n_eval``, ``max_iter``, ``calib_prompts`` and
    ``steps`` were then set by the README's budget rule (committed before any claim run) from a timing pilot on
    dev seed 5: 16 -> 8, 6 -> 5, 4 -> 2, 4 -> 2.

    model: registered checkpoint name or local Hugging Face folder.
    level: steps of the arithmetic word problems. Difficulty rule (fixed before any pilot): on pilot seed 5
        (neither a default nor a held-out seed) try levels 1..4 and keep the one whose init pass@8 is in
        [0.1, 0.9] and nearest 0.5. Pilot (4 problems x 8 samples, 40 tokens, "Reply with only the final
        number."): pass@8 0.50 / 0.00 / 0.00 at levels 1 / 2 / 3, so level 1.
    n_eval: held-out problems for avg@k / pass@k.
    eval_samples: k (samples per held-out problem).
    eval_chunk: problems per generation batch at evaluation.
    eval_temperature: inference temperature (paper: 0.6).
    temperatures: the H_T grid (as at small).
    rl_temperatures: fixed temperatures GRPO is run at (a subset of the grid; C1 needs 0.6 and 1.0).
    entropy_target: the paper's H_T target.
    t_min: lower end of T* search (target below H(t_min) -> untestable).
    t_max: upper end of T* search (target above H(t_max) -> untestable).
    tol: bisection tolerance on |H_T - target|.
    max_iter: bisection evaluations at most.
    calib_prompts: problems per H_T measurement (x group_size rollouts); the same count of fresh problems
        for H_T at T*.
    group_size (G): rollouts per prompt (paper: 8 at the first stage).
    max_new_tokens: response budget (truncated responses are overlong).
    overlong_filter: mask truncated responses out of the loss.
    steps: GRPO steps per arm.
    prompts_per_step: prompts per GRPO step.
    lr: AdamW learning rate of the LoRA adapters.
    grad_clip: max gradient norm.
    lora_rank: LoRA rank (alpha = 2 x rank).
    lora_targets: module names LoRA wraps.
    gate_pass_lo: competence gate: init pass@k (mean over seeds) at least this ...
    gate_pass_hi: ... and at most this (a task where groups can carry a signal).
    """

    model: str = "smollm2-135m-instruct"
    level: int = 1
    n_eval: int = 8
    eval_samples: int = 8
    eval_chunk: int = 4
    eval_temperature: float = 0.6
    temperatures: tuple[float, ...] = (0.6, 0.85, 1.0, 1.3)
    rl_temperatures: tuple[float, ...] = (0.6, 1.0)
    entropy_target: float = 0.3
    t_min: float = 0.3
    t_max: float = 1.5
    tol: float = 0.02
    max_iter: int = 5
    calib_prompts: int = 2
    group_size: int = 8
    max_new_tokens: int = 40
    overlong_filter: bool = True
    steps: int = 2
    prompts_per_step: int = 2
    lr: float = 2e-4
    grad_clip: float = 1.0
    lora_rank: int = 8
    lora_targets: tuple[str, ...] = ("q_proj", "v_proj")
    gate_pass_lo: float = 0.1
    gate_pass_hi: float = 0.9


@dataclass(frozen=True)
class RunConfig:
    """Everything that changes a result of one run.

    task: the toy task.
    model: the tiny causal LM.
    pretrain: the base-model stage every SFT run starts from.
    sft: supervised fine-tuning.
    e1: SFT scaling datasets.
    rl: GRPO settings shared by E2-E4.
    e2: temperature grid and calibrator.
    e3: weak / strong inits.
    e4: overlong filtering study.
    workers: processes running jobs in parallel (one torch thread each).
    paper: paper-scale settings.
    real: real-scale settings (:mod:`.real`).
    """

    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    e1: E1Config = field(default_factory=E1Config)
    rl: RLConfig = field(default_factory=RLConfig)
    e2: E2Config = field(default_factory=E2Config)
    e3: E3Config = field(default_factory=E3Config)
    e4: E4Config = field(default_factory=E4Config)
    workers: int = 2
    paper: PaperConfig = field(default_factory=PaperConfig)
    real: RealConfig = field(default_factory=RealConfig)


def config_for(scale: str) -> RunConfig:
    """small = the defaults; smoke shrinks every size; paper keeps the defaults and reads ``paper``; real reads
    ``real`` (the toy sections are unused there)."""
    base = RunConfig()
    if scale == "smoke":
        return replace(
            base,
            task=replace(base.task, n_eval=24, eval_samples=2),
            model=replace(base.model, d_model=32),
            pretrain=replace(base.pretrain, steps=10, batch_size=16),
            sft=replace(base.sft, epochs=1, batch_size=16),
            e1=E1Config(n_prompts=(40, 80, 40, 80), n_responses=(1, 1, 2, 2)),
            rl=replace(base.rl, steps=3, prompts_per_step=4, group_size=4),
            e2=replace(base.e2, init=1, temperatures=(0.6, 1.0), calib_prompts=8, tol=0.05),
            e3=E3Config(weak=0, strong=3),
            e4=replace(base.e4, enabled=True),
            workers=1,
        )
    return base
