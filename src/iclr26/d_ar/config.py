"""Typed run configuration of the D-AR reproduction: one frozen dataclass tree, ``config_for(scale)``.

``iclr26 run d_ar --show-config`` prints it; ``--set tokenizer.num_query_groups=2`` changes a leaf.
The method presets (:class:`~iclr26.d_ar.tokenizer.TokenizerConfig`, :class:`~iclr26.d_ar.gpt.GPTConfig`)
default to the released configuration (configs/tokenizer_v1.yaml, GPT-L); ``small`` shrinks the sizes
to 8x8 digits and keeps every mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from iclr26.core.train import TrainConfig

from .gpt import GPTConfig
from .tokenizer import DiffDecoderConfig, TokenizerConfig


@dataclass(frozen=True)
class TokenizerTrain:
    """Tokenizer optimisation (official vq_train_accelerate.py: AdamW 2e-4, betas (0.9, 0.95), wd 0,
    constant lr after warmup, clip 1.0).

    train: the optimiser loop (core.train.TrainConfig; min_lr_ratio 1 = constant lr after warmup).
    batch: images per step.
    recon_mse_weight: weight of MSE(x1_hat, x), a stand-in for LPIPS (0 = official loss without LPIPS).
    lpips_weight: LPIPS weight at paper scale (needs local VGG-LPIPS weights; 0 at small).
    repa_weight: REPA weight at paper scale (needs local DINOv2 weights; 0 at small).
    """

    train: TrainConfig = TrainConfig(
        steps=1000,
        lr=1e-3,
        weight_decay=0.0,
        betas=(0.9, 0.95),
        warmup_steps=50,
        min_lr_ratio=1.0,
        grad_clip=1.0,
        progress=False,
        desc="tokenizer",
    )
    batch: int = 64
    recon_mse_weight: float = 0.0
    lpips_weight: float = 0.0
    repa_weight: float = 0.0


@dataclass(frozen=True)
class ARTrain:
    """AR optimisation (official train_c2i: AdamW 1e-4, betas (0.9, 0.95), wd 0.05, clip 1.0).

    train: the optimiser loop.
    batch: sequences per step (tokens extracted on the fly from shifted images).
    """

    train: TrainConfig = TrainConfig(
        steps=400,
        lr=1e-3,
        weight_decay=0.05,
        betas=(0.9, 0.95),
        warmup_steps=20,
        min_lr_ratio=0.1,
        grad_clip=1.0,
        progress=False,
        desc="ar",
    )
    batch: int = 128


@dataclass(frozen=True)
class DataConfig:
    """scikit-learn digits (8x8 grey, 10 classes) scaled to [-1, 1].

    n_train: stratified training images (the rest, 297, are the test split).
    max_shift: random translation of up to this many pixels per axis (background fill).
    split_seed: seed of the stratified split (fixed across run seeds).
    """

    n_train: int = 1500
    max_shift: int = 1
    split_seed: int = 0


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation of one seed.

    samples_per_class: generated samples per class for FD and class consistency.
    cfg_scale: guidance scale schedule (start, end) over the positions; (1, 1) = plain conditional sampling.
    temperature: AR sampling temperature (official FID setting: 1).
    sampler: pixel sampler, adams2 (official default) or euler.
    n_mechanism: test digits used for previews (C1), group swaps (C2) and reconstructions.
    n_layout: reference digits for layout control (C4).
    evaluator_hidden: hidden units of the scikit-learn MLP evaluator (its features for FD).
    evaluator_iters: maximum training iterations of the evaluator.
    """

    samples_per_class: int = 100
    cfg_scale: tuple[float, float] = (1.0, 1.0)
    temperature: float = 1.0
    sampler: str = "adams2"
    n_mechanism: int = 128
    n_layout: int = 100
    evaluator_hidden: int = 32
    evaluator_iters: int = 300


@dataclass(frozen=True)
class PaperConfig:
    """Paper scale: released checkpoints and data from local paths (nothing downloads).

    tokenizer_ckpt: D-AR-tokenizer_v1.pt (dict with 'config' and 'ema' / 'model').
    gpt_ckpt: D-AR-L-360K.pt or D-AR-XL-360K.pt (dict with 'model' / 'ema' / 'module').
    gpt_model: GPT preset of gpt_ckpt (GPT-B / GPT-L / GPT-XL / GPT-XXL), or "custom" for the gpt tree.
    out_dir: where per-rank sample shards go ('' = the run folder).
    num_samples: images to generate (50k for FID-50k).
    per_rank_batch: images per generation batch on each rank.
    shard_size: images per saved shard (a crash loses at most one unfinished shard per rank).
    fid_ref: ADM reference batch (.npz with mu / sigma or ref activations) or an image folder.
    inception_weights: local Inception-v3 FID weights file (torch-fidelity format).
    imagenet_dir: ImageNet folder (class sub-folders) for tokenizer reconstructions (optional).
    n_recon: images of imagenet_dir to reconstruct (0 = skip).
    tokenizer_config: official tokenizer yaml, used instead of the config embedded in the checkpoint.
    allow_pickle: load checkpoints that pickle Python objects with the full unpickler (trusted files only).
        Without it, objects of classes that are not importable here (the official training checkpoints'
        config object) are read as plain records and nothing is called.
    state_entry: which weights of a file that holds both ``model`` and ``ema``: "model" (the official
        evaluation scripts load ``model`` first) or "ema".
    """

    tokenizer_ckpt: str = ""
    gpt_ckpt: str = ""
    gpt_model: str = "GPT-L"
    out_dir: str = ""
    num_samples: int = 50000
    per_rank_batch: int = 32
    shard_size: int = 1000
    fid_ref: str = ""
    inception_weights: str = ""
    imagenet_dir: str = ""
    n_recon: int = 0
    tokenizer_config: str = ""
    allow_pickle: bool = False
    state_entry: Literal["model", "ema"] = "model"


@dataclass(frozen=True)
class RunConfig:
    """Everything that changes a result of one D-AR run.

    tokenizer: the sequential diffusion tokenizer (released: tokenizer_v1).
    gpt: the vanilla AR model (released: GPT-L, vocab 16384, 256 tokens).
    tok_train: tokenizer optimisation.
    ar_train: AR optimisation (the same for both token orders).
    data: the digits.
    eval: sampling and metrics.
    paper: paper-scale paths.
    workers: seed-parallel processes (one torch thread each).
    """

    tokenizer: TokenizerConfig = TokenizerConfig()
    gpt: GPTConfig = GPTConfig()
    tok_train: TokenizerTrain = TokenizerTrain()
    ar_train: ARTrain = ARTrain()
    data: DataConfig = DataConfig()
    eval: EvalConfig = EvalConfig()
    paper: PaperConfig = PaperConfig()
    workers: int = 2


def small_tokenizer() -> TokenizerConfig:
    """8x8 digits: 2x2 patches, N = 16 tokens in K = 4 groups, codebook 64 x 4, width 48."""
    dec = DiffDecoderConfig(
        in_dim=1, out_dim=1, dim=48, cond_dim=48, patch_size=2, depth=2, data_std=0.6, time_shift=2.0, repa=False
    )
    return TokenizerConfig(
        encoder_patch_size=2,
        num_encoder_layers=2,
        num_decoder_layers=2,
        encoder_dim=48,
        decoder_dim=48,
        vq_dim=4,
        vq_codebook_size=64,
        num_denoising_steps=4,
        num_query_groups=4,
        num_all_queries=16,
        queries_per_step=4,
        image_size=8,
        head_dim=16,
        diff_decoder=dec,
    )


def small_gpt(tok: TokenizerConfig) -> GPTConfig:
    """2 layers, width 64, 4 heads; SwiGLU hidden rounded to a multiple of 32."""
    return GPTConfig(
        dim=64,
        n_layer=2,
        n_head=4,
        multiple_of=32,
        num_classes=10,
        vocab_size=tok.vq_codebook_size,
        block_size=tok.num_all_queries,
    )


def config_for(scale: str) -> RunConfig:
    """smoke / small / paper differ only here."""
    if scale == "paper":
        return RunConfig(eval=EvalConfig(cfg_scale=(1.2, 8.0)), workers=1)
    tok = small_tokenizer()
    # LPIPS needs pretrained VGG weights: its small-scale stand-in is 0.5 * MSE(x1_hat, x) on the same jump estimate.
    base = RunConfig(tokenizer=tok, gpt=small_gpt(tok), tok_train=TokenizerTrain(recon_mse_weight=0.5))
    if scale == "small":
        return base
    if scale == "smoke":
        tt, at = base.tok_train, base.ar_train
        return replace(
            base,
            tok_train=replace(tt, train=replace(tt.train, steps=20, warmup_steps=5), batch=32),
            ar_train=replace(at, train=replace(at.train, steps=20, warmup_steps=5), batch=32),
            data=replace(base.data, n_train=300),
            eval=replace(base.eval, samples_per_class=4, n_mechanism=16, n_layout=8, evaluator_iters=30),
            workers=1,
        )
    raise ValueError(f"unknown scale {scale!r}")
