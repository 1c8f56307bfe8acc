"""Strategic Dishonesty Can Undermine AI Safety Evaluations of Frontier LLMs (Panfilov, Kortukov et al.,
arXiv 2509.18058, ICLR 2026).

Implemented:

* :func:`gather_activations` (forward hooks; core transformers and Hugging Face causal LMs),
  :func:`stream_activations` (one layer, float16 on disk, for long paper-scale responses),
  :class:`DeceptionProbe` (standardised L2 logistic regression without intercept, mean per-token
  logit per response), :func:`calibrate_threshold` (target FPR on control data) and
  :class:`SteeringHook` (``h_L += alpha · v`` at a layer, as a context manager): paper Section 5;
* the EvilMath/UnicornMath labeller :func:`label_evilmath` (math-verify answers, reasoning stripped)
  and the informed-choice MCQ (:func:`mcq_informed_choice`, :func:`parse_choice`,
  :func:`aggregate_choices`): Sections 3 and 5;
* output-only monitors (:class:`OutputMonitor`) as the black-box-judge baseline;
* a planted toy world (:class:`ToyWorld`) and a tiny GPT trained on it, for the CPU reproduction of
  the detection/steering claims; a paper-scale path on local HF checkpoints (``paper_scale``).

Not implemented: the real jailbreak judges (HarmBench, WildGuard, LlamaGuard, ...), the nanoGCG
honeypot, the capability study over 80+ models, CoT monitors and fine-tuned QwQ-FT: they need
frontier/judge models and API access.
"""

from iclr26.dishonesty.monitors import OutputMonitor
from iclr26.dishonesty.probe import (
    DeceptionProbe,
    ProbeConfig,
    auroc,
    calibrate_threshold,
    class_separation,
    decoder_blocks,
    f1_score,
    gather_activations,
    masked_mean,
    select_tokens,
    stream_activations,
)
from iclr26.dishonesty.protocol import (
    LABELS,
    aggregate_choices,
    answers_match,
    is_refusal,
    label_evilmath,
    mcq_informed_choice,
    parse_answer,
    parse_choice,
    parse_number,
    strip_reasoning,
)
from iclr26.dishonesty.steering import SteeringHook
from iclr26.dishonesty.toy_model import ToyModelConfig, sample_responses, train_toy_gpt
from iclr26.dishonesty.toy_world import ToyWorld, ToyWorldConfig, pad_batch, span_mask

__all__ = [
    "LABELS",
    "DeceptionProbe",
    "OutputMonitor",
    "ProbeConfig",
    "SteeringHook",
    "ToyModelConfig",
    "ToyWorld",
    "ToyWorldConfig",
    "aggregate_choices",
    "answers_match",
    "auroc",
    "calibrate_threshold",
    "class_separation",
    "decoder_blocks",
    "f1_score",
    "gather_activations",
    "is_refusal",
    "label_evilmath",
    "masked_mean",
    "mcq_informed_choice",
    "pad_batch",
    "parse_answer",
    "parse_choice",
    "parse_number",
    "sample_responses",
    "select_tokens",
    "span_mask",
    "stream_activations",
    "strip_reasoning",
    "train_toy_gpt",
]
