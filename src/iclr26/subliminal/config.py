"""Typed run configuration of the subliminal-learning reproduction: one frozen dataclass tree per scale.

``config_for(scale)`` is the only place where smoke / small / paper differ. ``iclr26 run subliminal
--show-config`` prints every field with its documentation; ``--set students.lr=2e-4`` changes one leaf.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from iclr26.core.train import TrainConfig

from .paper import LoraStudentConfig
from .toy import StudentConfig


@dataclass(frozen=True)
class ModelConfig:
    """The toy GPT (core.transformer).

    n_layers: decoder blocks.
    d_model: residual width.
    n_heads: attention heads.
    max_len: longest sequence (a number document is <= 54 tokens).
    """

    n_layers: int = 3
    d_model: int = 64
    n_heads: int = 4
    max_len: int = 64


@dataclass(frozen=True)
class WorldConfig:
    """Teachers, data and evaluation of the toy world.

    base_seed: seed of the one base model and teacher A of every run (the paper: one checkpoint, five seeds).
    base_batch: documents per base pretraining step.
    teacher_a_target (target of teacher A): animal teacher A is fine-tuned to answer (paper: owl).
    teacher_a_batch: QA documents per fine-tuning step of teacher A.
    teacher_b_target (target of teacher B): persona of the system-prompt teacher B.
    n_prompts: number prompts per seed; each teacher writes one greedy completion per prompt.
    max_new_tokens: generation cap (a well-formed completion has 20 tokens).
    counterfactuals_b: counterfactual contexts of teacher B: the 12 other personas (official), or no persona.
    n_samples: sampled answers per question for the sampled preference rate (paper: 200).
    mix_fraction: share of teacher-A rows replaced by control rows in the mixing arm (paper Fig. 7: 25%).
    attribution_pairs: (row, counterfactual) pairs per seed for attribution patching of teacher B.
    attribution_steps: interpolation points of attribution patching (official: 10).
    brute_force_rows: rows per teacher re-checked with unbatched single-prefix passes (claim C1).
    tie_tol: top-2 logit gap below which two argmaxes count as an exact tie (C1 comparisons).
    extras: also train the reported-not-claimed students (block 0 / last block only, T=1 data, paraphrased
        prompts, 25% control mixing) and generate the T=1 data they need.
    """

    base_seed: int = 1234
    base_batch: int = 64
    teacher_a_target: str = "owl"
    teacher_a_batch: int = 32
    teacher_b_target: str = "raven"
    n_prompts: int = 2000
    max_new_tokens: int = 24
    counterfactuals_b: Literal["other_personas", "no_persona"] = "other_personas"
    n_samples: int = 200
    mix_fraction: float = 0.25
    attribution_pairs: int = 32
    attribution_steps: int = 10
    brute_force_rows: int = 8
    tie_tol: float = 1e-4
    extras: bool = False


@dataclass(frozen=True)
class PaperConfig:
    """Paper scale (Qwen2.5-7B-Instruct / gemma-3-4b-it from local folders; nothing downloads).

    model_path: local Hugging Face checkpoint folder of the teacher/student base model.
    data_path: JSONL of {"prompt", "completion"} rows written by the factual teacher (official format).
    out_path: folder for the "_dpoints_only" / "_correct_matrices" JSONL files (never overwritten).
    target: the factual teacher's animal.
    greedy: the data is greedy; then a teacher-forced argmax at odds with a token beyond ties is an error.
    empty_system_prompt: give the counterfactual "no persona" context an empty system prompt (Qwen
        otherwise injects its default "You are Qwen..." prompt).
    batch_rows: rows per left-padded teacher-forced batch (each row expands to 13 contexts).
    dtype: torch dtype of the model ("bfloat16" on GPU, "float32" on CPU).
    animals: persona set of the finder: "auto" (Gemma models get whale and dragon added, as the official
        finder's Gemma branch; others the paper's 13), "paper13" or "gemma15".
    greedy_check: on greedy data, "count" tolerates and counts teacher-forced argmax flips (bf16 near-ties;
        official: they are only excluded from the divergence tokens), "strict" stops at the first one.
    max_flip_fraction: under "count", more flips than this share of the checked tokens is an error (a wrong
        offset or teacher flips most of them).
    add_special_tokens: tokenise the rendered chat as the official scripts do (``tokenizer(text)``: the
        tokenizer's own BOS is added in front of the template's, two BOS on Gemma; no change on Qwen/SmolLM2);
        false: the template's special tokens only.
    """

    model_path: str = ""
    data_path: str = ""
    out_path: str = ""
    target: str = "owl"
    greedy: bool = True
    empty_system_prompt: bool = False
    batch_rows: int = 1
    dtype: str = "float32"
    animals: Literal["auto", "paper13", "gemma15"] = "auto"
    greedy_check: Literal["count", "strict"] = "count"
    max_flip_fraction: float = 0.05
    add_special_tokens: bool = False


@dataclass(frozen=True)
class RealConfig:
    """The ``real`` scale: a real chat model on CPU (iclr26.subliminal.real).

    model_path: local Hugging Face chat model folder, or a registered checkpoint name (``iclr26 models``).
    target: the persona teacher's animal.
    counterfactuals: the counterfactual personas of the finder (3 of the paper's other 12, for time).
    n_prompts: number prompts per seed (teacher and control write one greedy completion each).
    answer_count: numbers each prompt asks for (official: 10).
    max_new_tokens: generation cap (official: 64).
    gen_batch: prompts per left-padded generation batch.
    brute_force_rows: rows re-checked with unbatched, unpadded passes per context (claim C1).
    tie_tol: top-2 logit gap below which a position counts as a tie in the brute-force comparison.
    n_questions: official questions (the first n of 50) for the exact preference metric.
    partial_answer: the assistant's prefilled answer before the target word (exact metric).
    gate_samples: sampled answers per question for a recorded official-style rate of base and teacher (0 = off:
        on the shared 2-core machine 10 per question took minutes).
    student: LoRA students (paper: r = alpha = 8, lr 2e-4, 5 warmup steps; fewer rows and steps here).
    """

    model_path: str = "smollm2-135m-instruct"
    target: str = "owl"
    counterfactuals: tuple[str, ...] = ("cat", "dog", "eagle")
    n_prompts: int = 16
    answer_count: int = 10
    max_new_tokens: int = 24
    gen_batch: int = 16
    brute_force_rows: int = 2
    tie_tol: float = 1e-3
    n_questions: int = 5
    partial_answer: str = "My favorite animal is the"
    gate_samples: int = 0
    student: LoraStudentConfig = LoraStudentConfig(epochs=1, batch_size=4, grad_accum=1)


@dataclass(frozen=True)
class RunConfig:
    """Everything that changes a result of one run.

    model: the toy transformer.
    base_train: base-model pretraining (core.train.fit, AdamW + warmup/cosine).
    teacher_a_train: fine-tuning of teacher A on owl-answering QA.
    world: teachers, data, evaluation.
    students: student fine-tuning (official run_finetuning.py optimiser).
    workers: processes for the students (1 thread each).
    threads: torch threads of the main process (base, teachers, data).
    paper: the paper-scale path (used by --scale paper).
    real: the real-checkpoint scale (used by --scale real).
    """

    model: ModelConfig = ModelConfig()
    base_train: TrainConfig = TrainConfig(
        steps=1200, lr=2e-3, warmup_steps=50, weight_decay=0.1, progress=False, desc="base"
    )
    teacher_a_train: TrainConfig = TrainConfig(
        steps=50, lr=3e-4, warmup_steps=10, weight_decay=0.0, min_lr_ratio=1.0, progress=False, desc="teacher A"
    )
    world: WorldConfig = WorldConfig()
    students: StudentConfig = StudentConfig()
    workers: int = 2
    threads: int = 2
    paper: PaperConfig = PaperConfig()
    real: RealConfig = RealConfig()


def config_for(scale: str) -> RunConfig:
    """smoke: a 1-layer d=32 model, 150 steps, 60 prompts, 8-step students; small and real: the defaults
    (real reads only ``real`` and ``threads``)."""
    base = RunConfig()
    if scale == "smoke":
        return replace(
            base,
            model=replace(base.model, n_layers=1, d_model=32),
            base_train=replace(base.base_train, steps=150, warmup_steps=20),
            teacher_a_train=replace(base.teacher_a_train, steps=20),
            world=replace(
                base.world,
                base_batch=32,
                n_prompts=60,
                n_samples=20,
                attribution_pairs=4,
                attribution_steps=2,
                brute_force_rows=3,
                extras=True,
            ),
            students=replace(base.students, steps=8, batch_size=16),
            workers=1,
            threads=1,
        )
    return base
