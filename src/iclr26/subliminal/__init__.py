"""Towards Understanding Subliminal Learning: When and How Hidden Biases Transfer.

Schrodi, Kempf, Barez, Brox. ICLR 2026, arXiv 2509.23886.

Implemented:
  * the divergence-token finder (factual teacher correct, some counterfactual wrong) on argmax tables, on the
    toy model (batched teacher forcing) and on Hugging Face chat models (offsets from the chat template);
  * completion masks all / div_only / without_div / random (count-matched), ratio and subset ablations,
    zero-divergence rows dropped as in the official code; teacher mixing;
  * masked student fine-tuning (full or one block; LoRA r=8 via peft at paper scale), exact and sampled
    preference rates with Wilson intervals, number filtering with reasons, paraphrase, control-data mixing,
    attribution patching over the residual stream;
  * the toy world (a ~60-token language with 13 animal personas) and the experiment (claims C1-C4);
  * the ``real`` scale (``real.py``): the same claims on a real chat model (SmolLM2-135M-Instruct by default)
    with the persona teacher, the HF finder and LoRA students, on CPU.
"""

from .attribution import attribution_patching, patched_metric
from .data import (
    filter_rows,
    mix_in_control,
    number_reject_reasons,
    paraphrase_rows,
    read_jsonl,
    token_reject_reasons,
    wilson_interval,
    write_jsonl_readonly,
)
from .divergence import (
    DivergenceResult,
    build_completion_mask,
    divergence_positions,
    masked_dataset,
    select_decision_points,
    teacher_mixing,
)
from .toy import (
    StudentConfig,
    find_divergence_tokens,
    finetune_student,
    generate_completions,
    masked_lm_loss,
    preference_exact,
    preference_sampled,
    pretrain_base,
    teacher_forced_argmax,
    train_qa_teacher,
)

__all__ = [
    "DivergenceResult",
    "StudentConfig",
    "attribution_patching",
    "build_completion_mask",
    "divergence_positions",
    "filter_rows",
    "find_divergence_tokens",
    "finetune_student",
    "generate_completions",
    "masked_dataset",
    "masked_lm_loss",
    "mix_in_control",
    "number_reject_reasons",
    "paraphrase_rows",
    "patched_metric",
    "preference_exact",
    "preference_sampled",
    "pretrain_base",
    "read_jsonl",
    "select_decision_points",
    "teacher_forced_argmax",
    "teacher_mixing",
    "token_reject_reasons",
    "train_qa_teacher",
    "wilson_interval",
    "write_jsonl_readonly",
]
