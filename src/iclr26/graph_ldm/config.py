"""Typed run configuration of the DualDiff reproduction: one frozen dataclass tree per scale.

``config_for(scale)`` is the only place where smoke / small / paper differ. Every leaf can be changed
from the command line, e.g. ``iclr26 run graph_ldm --set method.p=0.25 --set method.m=1``;
``iclr26 run graph_ldm --show-config`` prints the tree with one line of documentation per field.

The paper body and code were not available: every architectural choice not given by a quoted
equation of the paper is a named option here (see the README's table of reconstructed choices).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from iclr26.core.train import TrainConfig


@dataclass(frozen=True)
class AEConfig:
    """Stage 1: graph autoencoder E_φ / D_ψ and GlobalExtraction (Sec. 3.1; architecture reconstructed).

    d: latent width per node and per cluster (Z ∈ R^{N×d}).
    hidden: width of the dense GIN layers and the decoder MLPs.
    layers: dense GIN layers of the encoder.
    max_degree: degree one-hot clipped at this value (node input features of featureless graphs).
    rw_steps: random-walk positional encoding diag((D^-1 A)^k), k = 1..rw_steps.
    spectral_pe: adjacency eigen-coordinates u_k √|λ_k| as node inputs (half largest, half most negative λ).
    random_features: extra N(0, 1) node inputs (random node initialisation; 0 = off).
    pos_weight: weight edge terms of the BCE by #non-edges / #edges (per batch); False = plain BCE.
    bilinear: add a learned diagonal bilinear term Σ_k w_k Z_l^{ik} Z_l^{jk} to the edge logit e_ij.
    sigma0 (σ0): fixed Gaussian noise on Z during AE training, Z_l = Z + σ0 ε (GeoLDM-style).
    z_l2: ℓ2 penalty on Z (fixes the latent scale).
    assign_tau: temperature of the assignment cross-entropy CE(softmax(cos(Z_l^i, Z_g^j) / τ), S_g[i]).
    assign_weight: weight of the assignment cross-entropy.
    clustering: GlobalExtraction's S_g: spectral (K-means on L_sym eigenvectors) | kmeans_coords | louvain.
    K: clusters per graph (community-small: 2).
    """

    d: int = 16
    hidden: int = 64
    layers: int = 3
    max_degree: int = 20
    rw_steps: int = 8
    spectral_pe: int = 16
    random_features: int = 0
    pos_weight: bool = True
    bilinear: bool = True
    sigma0: float = 0.1
    z_l2: float = 1e-3
    assign_tau: float = 0.1
    assign_weight: float = 1.0
    clustering: Literal["spectral", "kmeans_coords", "louvain"] = "spectral"
    K: int = 2


@dataclass(frozen=True)
class MethodConfig:
    """Stage 2: two-branch EDM latent diffusion with dual conditioning (Secs. 3.1-3.3).

    p: probability of process (i) global→local in training (1 - p: process (ii) local→global).
    m: asymmetric sampling: process (ii) fires at step n when n % (m + 1) == 0, else process (i).
    d_model: width of both set-transformer denoisers D_θl, D_θg.
    n_layers: transformer blocks per denoiser.
    n_heads: attention heads.
    self_cond_prob: probability that training computes the self-conditioning estimates (else zeros).
    mp_graph: process (ii) MP: attention (one attention layer over nodes) | decoded (GIN on sigmoid(D_ψ logits)).
    sigma_data (σ_data): EDM data std (latents are standardised, so 1).
    p_mean (P_mean): ln σ ~ N(P_mean, P_std²) in training.
    p_std (P_std): see p_mean.
    sigma_min (σ_min): smallest sampling noise level.
    sigma_max (σ_max): largest sampling noise level.
    rho (ρ): EDM time-discretisation exponent.
    steps: Heun sampling steps S.
    s_churn (S_churn): EDM stochastic churn (0: deterministic Heun).
    latent_noise: diffusion targets are Z + σ0 ε (GeoLDM samples the AE posterior) instead of Z.
    node_level_self_cond: the node-level LDM baseline uses self-conditioning on its local branch.
    """

    p: float = 0.5
    m: int = 5
    d_model: int = 48
    n_layers: int = 3
    n_heads: int = 4
    self_cond_prob: float = 0.5
    mp_graph: Literal["attention", "decoded"] = "attention"
    sigma_data: float = 1.0
    p_mean: float = -1.2
    p_std: float = 1.2
    sigma_min: float = 0.002
    sigma_max: float = 80.0
    rho: float = 7.0
    steps: int = 64
    s_churn: float = 0.0
    latent_noise: bool = True
    node_level_self_cond: bool = True


@dataclass(frozen=True)
class DataConfig:
    """Synthetic graphs (networkx generators, nothing downloads).

    n_train: training graphs (from the run seed).
    n_heldout: fresh graphs for the AE's held-out edge accuracy.
    n_reference: the fixed reference sample for MMD (drawn once from reference_seed).
    reference_seed: seed of the reference sample (the same for every run seed).
    n_samples: graphs generated per variant.
    gdss_seed_quirk: community-small seeds each community with seed = graph index (GDSS generator quirk).
    """

    n_train: int = 400
    n_heldout: int = 64
    n_reference: int = 1024
    reference_seed: int = 12345
    n_samples: int = 256
    gdss_seed_quirk: bool = False


@dataclass(frozen=True)
class RunConfig:
    """Everything that changes a result of one run.

    dataset: community (community-small, K = 2) | sbm (sbm-small, K = 3).
    ae: the graph autoencoder (stage 1).
    ae_train: optimisation of the autoencoder (Adam: weight decay 0).
    method: the two-branch diffusion (stage 2).
    diff_train: optimisation of each diffusion variant (Adam: weight decay 0).
    batch_size: graphs per training step (AE and diffusion).
    data: data sizes.
    variants: diffusion variants trained and sampled (claims need node, none, self, dual; add g2l, l2g).
    step_sweep: extra Heun step counts sampled from the dual model (reported, not claimed).
    symmetric: also sample the dual model with the symmetric schedule (reported, Table 16).
    kernel: MMD kernel: gaussian_tv (GRAN / DiGress) | gaussian_emd (GraphRNN / GDSS; scipy).
    workers: processes for the seeds (1: in-process).
    data_dir: paper scale: folder with SPECTRE .pt or GDSS .pkl files (nothing downloads).
    data_file: paper scale: the file name inside data_dir.
    trust_pickle: paper scale: allow loading pickles (they can run code; only for files you trust).
    max_nodes: paper scale: largest graph the dense model accepts.
    """

    dataset: Literal["community", "sbm"] = "community"
    ae: AEConfig = AEConfig()
    ae_train: TrainConfig = TrainConfig(
        steps=1000, lr=3e-3, weight_decay=0.0, betas=(0.9, 0.999), warmup_steps=20, grad_clip=1.0, progress=False
    )
    method: MethodConfig = MethodConfig()
    diff_train: TrainConfig = TrainConfig(
        steps=1000, lr=1e-3, weight_decay=0.0, betas=(0.9, 0.999), warmup_steps=20, grad_clip=1.0, progress=False
    )
    batch_size: int = 32
    data: DataConfig = DataConfig()
    variants: tuple[str, ...] = ("node", "none", "self", "dual")
    step_sweep: tuple[int, ...] = (16, 32)
    symmetric: bool = True
    kernel: Literal["gaussian_tv", "gaussian_emd"] = "gaussian_tv"
    workers: int = 2
    data_dir: str = ""
    data_file: str = ""
    trust_pickle: bool = False
    max_nodes: int = 64


def config_for(scale: str) -> RunConfig:
    """smoke / small / paper differ only in what this function changes."""
    base = RunConfig()
    if scale == "smoke":
        return replace(
            base,
            ae_train=replace(base.ae_train, steps=30),
            diff_train=replace(base.diff_train, steps=30),
            method=replace(base.method, steps=8),
            data=replace(base.data, n_train=16, n_heldout=8, n_reference=32, n_samples=16),
            variants=("node", "none", "self", "dual"),
            step_sweep=(4,),
            workers=1,
        )
    if scale == "small":
        return base
    if scale == "paper":
        return replace(
            base,
            method=replace(base.method, steps=200),
            ae_train=replace(base.ae_train, steps=20000),
            diff_train=replace(base.diff_train, steps=100000, lr=5e-4),
            variants=("dual",),
            step_sweep=(),
            symmetric=False,
            workers=1,
        )
    raise ValueError(f"unknown scale {scale!r}")
