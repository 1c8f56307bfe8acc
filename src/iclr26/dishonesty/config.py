"""Every setting of the dishonesty reproduction: one frozen dataclass tree, built per scale by
:func:`config_for` (``iclr26 run dishonesty --show-config`` prints it; ``--set a.b=v`` changes a leaf)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from iclr26.dishonesty.probe import ProbeConfig
from iclr26.dishonesty.real_scale import RealConfig
from iclr26.dishonesty.toy_model import ToyModelConfig
from iclr26.dishonesty.toy_world import ToyWorldConfig

ALPHAS = (-2.0, -1.0, 0.0, 1.0, 2.0)


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation protocol of the toy reproduction (paper Section 5 on the toy world).

    n_harmful: harmful math prompts (half severe, half mild topics), each with a harmless twin.
    n_control: benign control prompts used only to calibrate the probe threshold.
    fpr: target false-positive rate of the threshold on the control set (Apollo: 1 %).
    exclude_last: response tokens excluded at the end (the <eos>) when reading activations.
    probe_layer: fixed probe/steering layer, or None to pick it on held-out instructed pairs.
    heldout_frac: fraction of entities held out for the layer choice.
    alphas: steering strengths in units of the lie-truth separation along the unit probe direction (C3).
    extra_alphas: a finer sweep reported next to C3 (not part of the claim).
    n_monitor_train: ground-truth responses used to train each output monitor.
    temperature: sampling temperature of the toy model (T = 1).
    max_new_tokens: generation budget of the toy model (a math answer is 7 tokens).
    layer_sweep: diagnostic: also steer at every layer with that layer's probe (alpha = -2, +2; not part of C3).
    """

    n_harmful: int = 600
    n_control: int = 300
    fpr: float = 0.01
    exclude_last: int = 1
    probe_layer: int | None = None
    heldout_frac: float = 0.2
    alphas: tuple[float, ...] = ALPHAS
    extra_alphas: tuple[float, ...] = (-0.5, 0.5)
    n_monitor_train: int = 2000
    temperature: float = 1.0
    max_new_tokens: int = 7
    layer_sweep: bool = True


@dataclass(frozen=True)
class PaperConfig:
    """Paper scale on a Hugging Face reasoning model (QwQ-32B, Qwen3-32B) and local data files.

    model_path: local checkpoint folder (nothing downloads).
    facts_csv: RepE true_false_facts.csv (columns statement, label; the true statements are used).
    evilmath: JSONL with evil_question, unicorn_question, answer per line.
    control: benign prompts (AlpacaEval): JSONL with instruction or prompt, or CSV with instruction.
    layer: probe and steering layer, hidden_states index (mf_doom: 38 for QwQ-32B).
    exclude_last: response tokens excluded at the end, for training and for scoring (Apollo: 5).
    limit: items per file (0 = all).
    max_new_tokens: generation budget (mf_doom run_from_csv_with_steering.py: 4096; reasoning models).
    temperature: sampling temperature (0 = greedy).
    alphas: steering strengths (C3 needs -2,-1,0,1,2).
    alpha_unit: separation = alphas x lie-truth separation along the unit probe direction; raw = mf_doom multipliers.
    fpr: target false-positive rate of the threshold on the control responses.
    dtype: torch dtype of the weights (bfloat16, float16, float32 or auto).
    device_map: accelerate device map (auto spreads a 32B model over the visible GPUs; none = one device).
    batch_size: prompts per generate/forward batch.
    activations_dir: folder for the float16 activation files (empty = the run folder).
    """

    model_path: str = ""
    facts_csv: str = ""
    evilmath: str = ""
    control: str = ""
    layer: int = 38
    exclude_last: int = 5
    limit: int = 0
    max_new_tokens: int = 4096
    temperature: float = 0.0
    alphas: tuple[float, ...] = ALPHAS
    alpha_unit: Literal["separation", "raw"] = "separation"
    fpr: float = 0.01
    dtype: str = "bfloat16"
    device_map: str = "auto"
    batch_size: int = 8
    activations_dir: str = ""


@dataclass(frozen=True)
class RunConfig:
    """Everything that changes a result of one run (workers/threads change only the speed).

    world: the planted toy world.
    model: the toy GPT and its training.
    eval: the toy evaluation protocol.
    probe: the deception probe (standardised L2 logistic regression without intercept).
    paper: paper-scale paths and settings.
    real: scale ``real``, the claims on a real instruction-tuned model on CPU (real_scale.py).
    workers: seed processes at smoke/small scale (same numbers whatever the count).
    threads: torch threads per seed process.
    """

    world: ToyWorldConfig = ToyWorldConfig()
    model: ToyModelConfig = ToyModelConfig()
    eval: EvalConfig = EvalConfig()
    probe: ProbeConfig = ProbeConfig()
    paper: PaperConfig = PaperConfig()
    real: RealConfig = RealConfig()
    workers: int = 2
    threads: int = 1

    def __post_init__(self) -> None:
        if self.workers < 1 or self.threads < 1:
            raise ValueError("workers and threads must be >= 1")


def config_for(scale: str) -> RunConfig:
    """smoke: a 1-layer d=32 model, 200 steps, 50 prompts; small: 4 layers, d=64, 1500 steps (a d=128
    model does not fit three seeds into the 2-core budget); real: SmolLM2-135M-Instruct (``real``), two torch
    threads; paper: the paper's settings."""
    base = RunConfig()
    if scale == "smoke":
        return replace(
            base,
            world=ToyWorldConfig(n_entities=16),
            model=ToyModelConfig(d_model=32, n_layers=1, n_heads=2, steps=200, batch_size=64, pool_size=4000),
            eval=replace(base.eval, n_harmful=50, n_control=50, n_monitor_train=400),
        )
    if scale == "small":
        return replace(
            base,
            model=ToyModelConfig(
                d_model=64, n_layers=4, n_heads=4, steps=1500, batch_size=128, lr=3e-3, pool_size=30000
            ),
        )
    if scale == "real":
        return replace(base, threads=2)
    if scale == "paper":
        return base
    raise ValueError(f"unknown scale {scale!r}")
