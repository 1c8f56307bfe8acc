"""One typed config per run of the MeSH reproduction (``iclr26 run mesh --scale S --show-config``)."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class PaperTrainConfig:
    """One paper-scale training run (the paper's recipe, Appendix B).

    tokens: local token-id file (.npy or raw uint16 .bin).
    val_tokens: size of the validation tail of the token file.
    seq_len: training sequence length (paper 4096; Pythia checkpoints allow at most 2048 positions).
    batch: global batch in sequences (paper 512).
    grad_accum: micro-batches per optimiser step (the global batch is split into them on each rank).
    steps: optimiser steps.
    lr: peak learning rate.
    warmup_frac: share of the steps spent in linear warm-up.
    min_lr_ratio: cosine decay floor as a share of the peak.
    weight_decay: AdamW weight decay.
    eval_every: steps between validation evals (0: end only).
    eval_batches: validation window-batches per eval.
    bf16: autocast to bfloat16 on CUDA.
    seed: model init and batch order (set from the run's seed by iclr26 run).
    """

    tokens: str = ""
    val_tokens: int = 1_000_000
    seq_len: int = 4096
    batch: int = 512
    grad_accum: int = 1
    steps: int = 120_818
    lr: float = 2e-4
    warmup_frac: float = 0.01
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    eval_every: int = 1000
    eval_batches: int = 8
    bf16: bool = True
    seed: int = 0


@dataclass(frozen=True)
class PaperConfig:
    """Paper scale: recursive Pythia-shaped models trained on a local token file (nothing downloads).

    pythia: local GPT-NeoX config.json or checkpoint folder giving the model shape (required).
    layout: P+CRK+S layout of the recursive arms ("" = the paper's for that shape).
    arms: arms to train (must include vanilla, base, anchor and mesh: the claims compare them).
    init_from: local Hugging Face checkpoint folder to initialise from ("" = train from scratch).
    max_seq_len: the models' position limit. 0 = from scratch: max(the config's max_position_embeddings,
        train.seq_len), so the paper's 4096 runs on a Pythia config that says 2048 (RoPE has no position
        table); with init_from: the checkpoint config's. Any positive value overrides both.
    train: the training recipe.
    """

    pythia: str = ""
    layout: str = ""
    arms: tuple[str, ...] = ("vanilla", "base", "anchor", "mesh")
    init_from: str = ""
    max_seq_len: int = 0
    train: PaperTrainConfig = PaperTrainConfig()


@dataclass(frozen=True)
class RunConfig:
    """The CPU reproduction: one model, data and training budget, identical for every arm.

    Defaults: the second small-scale design (README), picked by a vanilla-vs-base pilot on seed 100 before
    the claim runs: ``1+1R6+1`` vs 8 layers at d=32, 1200 steps, peak LR 3e-3.

    d_model: width of every arm.
    n_heads: attention heads of every arm.
    vanilla_layers: depth of the vanilla arm (must equal the recursive layout's unrolled depth).
    recursive_layout: the P+CRK+S layout of the recursive arms.
    arms: arms trained (vanilla, base, residual, anchor, anchor_emb, mesh).
    router_init: MeSH router init, "normal" (near-uniform softmax) or "passthrough" (starts near the base
        recursion); the paper does not state it (see ``MeshConfig.router_init``).
    seq_len: training sequence length in bytes.
    batch: sequences per step.
    steps: optimiser steps per arm.
    lr: peak learning rate.
    warmup: warm-up steps.
    corpus_bytes: size of the byte corpus (95/5 split).
    val_windows: validation windows of seq_len bytes.
    eval_every: steps between validation evals.
    diag_samples: validation sequences used for the loop diagnostics.
    bench_steps: training steps timed per arm for the mesh/base step-time ratio (0 = skip).
    threads: torch threads per worker (one is fastest for these tiny models on a shared 2-core machine).
    workers: processes that train the (seed, arm) jobs in parallel (1 = in this process).
    gate_nats: competence gate: mean vanilla loss must be below mean base loss by at least this much,
        else there is no recursion gap for mesh to close and C1-C3 are untestable at this budget.
    paper: paper scale (local files).
    """

    d_model: int = 32
    n_heads: int = 2
    vanilla_layers: int = 8
    recursive_layout: str = "1+1R6+1"
    arms: tuple[str, ...] = ("vanilla", "base", "anchor", "mesh")
    router_init: str = "normal"
    seq_len: int = 64
    batch: int = 16
    steps: int = 1200
    lr: float = 3e-3
    warmup: int = 20
    corpus_bytes: int = 2_000_000
    val_windows: int = 128
    eval_every: int = 100
    diag_samples: int = 16
    bench_steps: int = 10
    threads: int = 1
    workers: int = 2
    gate_nats: float = 0.02
    paper: PaperConfig = PaperConfig()


def config_for(scale: str) -> RunConfig:
    """small and paper: the defaults; smoke: a tiny model, every arm, 30 steps."""
    base = RunConfig()
    if scale == "smoke":
        return replace(
            base,
            d_model=32,
            n_heads=2,
            vanilla_layers=4,
            recursive_layout="1+1R2+1",
            arms=("vanilla", "base", "residual", "anchor", "anchor_emb", "mesh"),
            seq_len=32,
            batch=8,
            steps=30,
            lr=1e-3,
            warmup=3,
            corpus_bytes=200_000,
            val_windows=32,
            eval_every=15,
            diag_samples=4,
            bench_steps=3,
            workers=1,
        )
    return base
