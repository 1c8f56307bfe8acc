"""Typed configuration of ViF (Visual Flow): one frozen dataclass tree per scale (``config_for``).

Method defaults are the paper's (Sec. 4, Appendix B; hyperparameter Tables 9-11: ω = 0.3, τ = 0.8,
α_mid = 0.1, α_deep = 0.3). The official code's config values differ (``configs/*.yaml``: α_mid 0.2,
α_deep 0.1, uniform redistribution over every non-collected key in the middle band, τ in the middle and
deep bands, key-norm selection, top-k relay by one aggregated key norm); they are the preset
:func:`official_code`. Fields marked *[ours]* are choices of this library where the paper
gives no value; they were fixed from the task design, never from claim results.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from iclr26.core.train import TrainConfig


@dataclass(frozen=True)
class ViFConfig:
    """The ViF method (paper defaults).

    omega (ω): minimum salience (peak prominence / peak) of a unimodal vision token (App. B.1).
    tau (τ): attention temperature, A = softmax(S/τ) = p^(1/τ) renormalised (Sec. 4.3).
    alpha_mid (α₁): share of the (inactive-vision ∪ instruction) mass moved to active vision in the middle band.
    alpha_deep (α₂): share of the vision mass moved to instruction tokens in the deep band.
    redistribute: receivers gain "proportional" to their mass (paper) or "uniform" (official reallocation.py).
    tau_bands: τ applies to the "middle" band (paper) or to "middle_deep" (official wrapper.py).
    mid_receivers: who gains the middle band's collected mass: "active_vision" tokens (paper Sec. 4.3) or
        every "non_collected" visible key, system and output tokens included (official
        utils/reallocation.py ``reallocate_middle``: ``active = ~(inactive | instr)``).
    selection: relay-token signal: per-layer "attention" column mass (paper) or per-layer "keynorm" ‖K_j‖.
    relay_rule: how relay tokens are picked: "morphology" (top-n unimodal tokens by salience x peak, paper
        Sec. 4.2 / App. B.1) or "keynorm_topk" (official utils/selection.py: one key norm per vision token,
        here the mean of ‖K_j‖ over the middle band, top-k with k = max(1, int(relay_ratio · m)), no
        morphology filter; ``relay_n`` is then unused).
    relay_ratio: share of the m vision tokens relayed under relay_rule="keynorm_topk" (official 0.02).
    curve_rows: query rows summed into a vision token's layer curve: "all" rows or only "text" rows [ours].
    relay_n (n): relay budget, the most relay tokens passed to the next agent (ratio·m in the paper).
    inactive_var: an inactive token's curve varies by at most this share of its peak across layers.
    mono_tol: allowed violation of monotonicity, as a share of the curve's peak [ours].
    relay: pass relay tokens R̂ to the next agent (False: reallocation-only / training-free).
    reallocate: apply temperature and reallocation (False: relay-only).
    random_relay: pick relay tokens uniformly at random instead of by morphology (ablation).
    f_layers: Transformer layers of the relay block f (official vif_block.py: 2).
    f_heads: attention heads of f (official: 8; the tiny model uses 4).
    """

    omega: float = 0.3
    tau: float = 0.8
    alpha_mid: float = 0.1
    alpha_deep: float = 0.3
    redistribute: Literal["proportional", "uniform"] = "proportional"
    tau_bands: Literal["middle", "middle_deep"] = "middle"
    mid_receivers: Literal["active_vision", "non_collected"] = "active_vision"
    selection: Literal["attention", "keynorm"] = "attention"
    relay_rule: Literal["morphology", "keynorm_topk"] = "morphology"
    relay_ratio: float = 0.02
    curve_rows: Literal["all", "text"] = "all"
    relay_n: int = 2
    inactive_var: float = 0.2
    mono_tol: float = 0.05
    relay: bool = True
    reallocate: bool = True
    random_relay: bool = False
    f_layers: int = 2
    f_heads: int = 4

    def __post_init__(self) -> None:
        if not self.tau > 0:
            raise ValueError(f"tau must be > 0, got {self.tau}")
        for name in ("alpha_mid", "alpha_deep"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.relay_n < 0:
            raise ValueError(f"relay_n must be >= 0, got {self.relay_n}")
        if self.mid_receivers not in ("active_vision", "non_collected"):
            raise ValueError(f"mid_receivers must be 'active_vision' or 'non_collected', got {self.mid_receivers!r}")
        if self.relay_rule not in ("morphology", "keynorm_topk"):
            raise ValueError(f"relay_rule must be 'morphology' or 'keynorm_topk', got {self.relay_rule!r}")
        if not 0.0 < self.relay_ratio <= 1.0:
            raise ValueError(f"relay_ratio must be in (0, 1], got {self.relay_ratio}")

    def relay_count(self, m: int) -> int:
        """Relay slots for m vision tokens: relay_n (morphology) or max(1, int(relay_ratio · m)) (official)."""
        if self.relay_rule == "keynorm_topk":
            return min(m, max(1, int(self.relay_ratio * m)))
        return self.relay_n


def official_code(cfg: ViFConfig = ViFConfig()) -> ViFConfig:
    """The official repository's values (configs/*.yaml, utils/reallocation.py, utils/selection.py,
    models/wrapper.py)."""
    return replace(
        cfg,
        alpha_mid=0.2,
        alpha_deep=0.1,
        redistribute="uniform",
        mid_receivers="non_collected",
        tau_bands="middle_deep",
        selection="keynorm",
        relay_rule="keynorm_topk",
        relay_ratio=0.02,
    )


@dataclass(frozen=True)
class ModelConfig:
    """The tiny VLM: patch encoder, LLaVA-style projector, causal RoPE LM [ours, sized by the task].

    d_model: residual width of the LM (and projector output).
    n_layers: LM blocks.
    n_heads: attention heads.
    shallow: LM layers of the shallow band (untouched by ViF).
    middle: LM layers of the middle band (temperature, vision-ward reallocation).
    deep: LM layers of the deep band (instruction-ward reallocation).
    enc_hidden: hidden width of the per-patch vision encoder MLP.
    """

    d_model: int = 48
    n_layers: int = 6
    n_heads: int = 4
    shallow: tuple[int, ...] = (0, 1)
    middle: tuple[int, ...] = (2, 3)
    deep: tuple[int, ...] = (4, 5)
    enc_hidden: int = 96

    def __post_init__(self) -> None:
        bands = list(self.shallow) + list(self.middle) + list(self.deep)
        if sorted(bands) != list(range(self.n_layers)):
            raise ValueError(f"bands {self.shallow}/{self.middle}/{self.deep} must partition 0..{self.n_layers - 1}")


@dataclass(frozen=True)
class DataConfig:
    """Synthetic scenes and EXIST questions (numpy) [ours].

    noise: std of Gaussian pixel noise on the [0, 1] image.
    max_shapes: 1..max_shapes shapes per scene, each in its own 8x8 cell.
    p_adversarial: share of negatives that are adversarial (right shape in another colour or vice versa).
    p_trust: probability an upstream message in the training data is correct.
    p_copy: probability that, in a training example, every message after the first wrong one repeats it.
    max_msgs: most upstream messages an agent reads (K ~ U{0..max_msgs} in training).
    occluded_share: share of the ViF / baseline finetuning data with occluded views.
    visible_cells: cells an agent sees in an occluded view (the rest are black).
    context: what an agent reads of the earlier turns: "window" (the last max_msgs answers in fixed,
        NONE-padded slots: the context never grows; the first design) or "transcript" (default: the
        full, growing transcript, one entry "question, answer" per earlier turn, as a multi-agent chain
        passes every response on; chosen by the README's pilot rule on seed 3).
    transcript_max: transcript context: training transcripts hold K ~ U{0..transcript_max} entries (one
        K per batch); must be at least eval.turns - 1.
    """

    noise: float = 0.35
    max_shapes: int = 3
    p_adversarial: float = 0.5
    p_trust: float = 0.9
    p_copy: float = 0.5
    max_msgs: int = 4
    occluded_share: float = 0.5
    visible_cells: int = 8
    context: Literal["window", "transcript"] = "transcript"
    transcript_max: int = 7

    def __post_init__(self) -> None:
        if self.context not in ("window", "transcript"):
            raise ValueError(f"context must be 'window' or 'transcript', got {self.context!r}")
        if self.transcript_max < 0 or self.max_msgs < 0:
            raise ValueError("max_msgs and transcript_max must be >= 0")


@dataclass(frozen=True)
class EvalConfig:
    """Multi-agent evaluation.

    episodes: episodes per split.
    turns (T): agent turns per episode.
    topology: "linear" chain (each agent reads the last max_msgs answers) or "circular" (4-agent rounds).
    batch: episodes per forward batch.
    ablations: also evaluate training-free / frozen-LLM / relay-only / reallocation-only / random relay
        (occluded views, seeded split).
    drop_examples: examples of the token-drop study by morphology and band (Table 1); 0 skips it.
    """

    episodes: int = 400
    turns: int = 8
    topology: Literal["linear", "circular"] = "linear"
    batch: int = 400
    ablations: bool = True
    drop_examples: int = 400


@dataclass(frozen=True)
class RunConfig:
    """Everything that changes a result of one run.

    vif: the ViF method (paper defaults; see official_code() for the repository's values).
    model: the tiny VLM.
    data: the synthetic task.
    pretrain: pretraining of the whole tiny VLM (full views, messages).
    stage1: ViF stage 1: projector + f trainable, LM frozen, vision encoder frozen.
    stage2: ViF stage 2: projector + f + LM trainable, vision encoder frozen.
    baseline: equal-budget text-flow baseline: projector + LM finetuned, no relay, no reallocation.
    eval: multi-agent evaluation.
    ground_weight: weight of the pretraining grounding loss (each vision token, after the last shallow LM
        block, predicts whether its cell shows the asked object) [ours]; 0 = none.
    vision_only_steps: the first pretraining steps see no upstream messages (curriculum) [ours].
    batch: training batch size.
    workers: processes for the seeds (1 thread each); 0 runs in this process.
    model_path: paper scale: local Hugging Face checkpoint folder (nothing downloads).
    data_path: paper scale: POPE-style JSONL file (question, answer, image) next to its image folder.
    image_root: paper scale: folder of the images named in the JSONL (default: the JSONL's folder).
    """

    vif: ViFConfig = ViFConfig()
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    pretrain: TrainConfig = TrainConfig(steps=1200, lr=3e-3, warmup_steps=30, weight_decay=0.05, desc="pretrain")
    stage1: TrainConfig = TrainConfig(steps=150, lr=1e-3, warmup_steps=8, weight_decay=0.05, desc="vif stage 1")
    stage2: TrainConfig = TrainConfig(steps=150, lr=5e-4, warmup_steps=3, weight_decay=0.05, desc="vif stage 2")
    baseline: TrainConfig = TrainConfig(steps=300, lr=5e-4, warmup_steps=6, weight_decay=0.05, desc="baseline")
    eval: EvalConfig = EvalConfig()
    ground_weight: float = 1.0
    vision_only_steps: int = 0
    batch: int = 64
    workers: int = 3
    model_path: str = ""
    data_path: str = ""
    image_root: str = ""

    def __post_init__(self) -> None:
        if self.data.context == "transcript" and self.eval.turns - 1 > self.data.transcript_max:
            raise ValueError(
                f"transcript context: eval.turns - 1 = {self.eval.turns - 1} earlier turns exceed "
                f"data.transcript_max = {self.data.transcript_max} (the longest training transcript)"
            )


def config_for(scale: str) -> RunConfig:
    """smoke: 4 layers, a few steps, 32 episodes of 4 turns; small: the issue's budget; paper: HF paths."""
    base = RunConfig()
    if scale == "smoke":

        def short(tc: TrainConfig, steps: int) -> TrainConfig:
            return replace(tc, steps=steps, warmup_steps=min(tc.warmup_steps, steps // 4), progress=False)

        return replace(
            base,
            model=replace(base.model, d_model=32, n_layers=4, shallow=(0,), middle=(1, 2), deep=(3,), enc_hidden=32),
            pretrain=short(base.pretrain, 40),
            stage1=short(base.stage1, 10),
            stage2=short(base.stage2, 10),
            baseline=short(base.baseline, 20),
            eval=replace(base.eval, episodes=32, turns=4, batch=32, drop_examples=32),
            batch=32,
            workers=0,
        )
    if scale == "paper":
        return replace(base, vif=replace(base.vif, relay_n=12, f_heads=8), workers=0)
    return base
