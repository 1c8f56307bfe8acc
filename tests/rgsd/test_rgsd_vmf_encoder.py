"""vMF utilities, InfoNCE and contrastive pretraining (RGSD Sec. 3.1-3.2, App. B/C)."""

import math

import pytest
import torch
import torch.nn.functional as F

from iclr26.rgsd.encoder import (
    RGSDEncoder,
    alignment_stats,
    contrastive_pretrain,
    info_nce,
    motion_embeddings,
    reward_auc,
    validate_motions,
)
from iclr26.rgsd.vmf import (
    mean_resultant_length,
    uniform_sphere,
    vmf_kl,
    vmf_log_normalizer,
    vmf_log_prob,
    vmf_sample,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("kappa", [0.5, 3.0, 20.0, 200.0])
def test_log_normalizer_k3_closed_form(kappa):
    # k = 3: C = κ / (4π sinh κ); log sinh κ = κ + log(1 − e^{−2κ}) − log 2 (no overflow)
    expected = math.log(kappa) - math.log(4 * math.pi) - (kappa + math.log1p(-math.exp(-2 * kappa)) - math.log(2))
    assert vmf_log_normalizer(3, kappa) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_density_integrates_to_one_on_s2():
    # ∫_{S²} q = 2π ∫_{-1}^{1} C e^{κ t} dt  (t = μᵀz), by the trapezoid rule
    kappa = 4.0
    t = torch.linspace(-1, 1, 20001, dtype=torch.float64)
    dens = torch.exp(vmf_log_normalizer(3, kappa) + kappa * t)
    assert float(2 * math.pi * torch.trapezoid(dens, t)) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("k,kappa", [(3, 2.0), (16, 10.0), (16, 100.0), (32, 20.0)])
def test_sampler_mean_resultant_length(k, kappa):
    mu = F.normalize(torch.randn(k), dim=0)
    z = vmf_sample(mu, kappa, n=20000, seed=1)
    assert torch.allclose(z.norm(dim=-1), torch.ones(len(z)), atol=1e-5)
    mrl = float((z @ mu).mean())
    assert mrl == pytest.approx(mean_resultant_length(k, kappa), rel=0.02)
    # the mean direction is μ (not just the right length)
    assert float(F.normalize(z.mean(0), dim=0) @ mu) > 0.99


def test_sampler_concentrates_and_handles_e1():
    mu = torch.zeros(8)
    mu[0] = 1.0  # Householder reflection degenerate case
    z = vmf_sample(mu, 1e5, n=100, seed=0)
    assert float((z @ mu).min()) > 0.999
    low = vmf_sample(mu, 1.0, n=2000, seed=0)
    assert float((low @ mu).mean()) < 0.3


def test_kl_closed_form_vs_monte_carlo():
    k, kappa = 16, 10.0
    mu1 = F.normalize(torch.randn(k), dim=0)
    mu2 = F.normalize(mu1 + 0.8 * torch.randn(k), dim=0)
    z = vmf_sample(mu1, kappa, n=200000, seed=3)
    mc = float((vmf_log_prob(z, mu1, kappa) - vmf_log_prob(z, mu2, kappa)).mean())
    assert float(vmf_kl(mu1, mu2, kappa)) == pytest.approx(mc, rel=0.02)
    assert float(vmf_kl(mu1, mu1, kappa)) == pytest.approx(0.0, abs=1e-6)
    assert float(vmf_kl(mu1, mu2, kappa)) > 0


def test_uniform_sphere_moments():
    z = uniform_sphere(50000, 16, torch.Generator().manual_seed(0))
    assert torch.allclose(z.norm(dim=-1), torch.ones(len(z)), atol=1e-5)
    assert float(z.mean(0).abs().max()) < 0.02
    # E[z zᵀ] = I / k
    cov = z.T @ z / len(z)
    assert torch.allclose(cov, torch.eye(16) / 16, atol=0.01)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_kappa_raises(bad):
    with pytest.raises(ValueError, match="kappa"):
        vmf_log_normalizer(16, bad)
    with pytest.raises(ValueError, match="kappa"):
        vmf_sample(torch.ones(4), bad, n=2)


def test_info_nce_is_cross_entropy_with_same_motion_mask():
    torch.manual_seed(0)
    za, zp = F.normalize(torch.randn(6, 4), dim=-1), F.normalize(torch.randn(6, 4), dim=-1)
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    kappa = 5.0
    # unmasked: plain CE over κ z_aᵀ z_p with the diagonal as target
    ce = F.cross_entropy(kappa * za @ zp.T, torch.arange(6))
    assert float(info_nce(za, zp, labels, kappa, mask_same_motion=False)) == pytest.approx(float(ce), rel=1e-6)
    # masked: by hand, the denominator of row i drops j ≠ i with the same label
    logits = kappa * za @ zp.T
    manual = []
    for i in range(6):
        keep = [j for j in range(6) if j == i or labels[j] != labels[i]]
        manual.append(-(logits[i, i] - torch.logsumexp(logits[i, keep], 0)))
    assert float(info_nce(za, zp, labels, kappa)) == pytest.approx(float(torch.stack(manual).mean()), rel=1e-6)
    # temperature T = 1/κ: doubling κ changes the loss
    assert float(info_nce(za, zp, labels, 2 * kappa)) != pytest.approx(float(info_nce(za, zp, labels, kappa)))


def test_info_nce_prefers_aligned_embeddings():
    k, n_per = 8, 4
    labels = torch.arange(4).repeat_interleave(n_per)
    aligned = torch.eye(k)[labels]  # identical per motion, orthogonal across motions
    shuffled = aligned[torch.randperm(len(labels))]
    kappa = 10.0
    assert float(info_nce(aligned, aligned, labels, kappa)) < float(info_nce(shuffled, shuffled, labels, kappa))
    # with the mask, perfect alignment is (near) zero loss; without, same-motion false negatives cost log n_per
    assert float(info_nce(aligned, aligned, labels, kappa)) < 1e-3
    assert float(info_nce(aligned, aligned, labels, kappa, mask_same_motion=False)) == pytest.approx(
        math.log(n_per), abs=1e-3
    )


def _synthetic_motions(n=4, frames=30, dim=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    centres = 2.0 * torch.randn(n, dim, generator=g)
    t = torch.linspace(0, 2 * math.pi, frames)
    out = []
    for c in centres:
        phase = torch.stack([torch.sin(t), torch.cos(t)], -1) @ torch.randn(2, dim, generator=g) * 0.5
        out.append(c + phase)
    return out


def test_pretraining_reaches_alignment_and_reward_auc():
    motions = _synthetic_motions()
    enc = RGSDEncoder(10, k=8, hidden=(64, 64))
    stats = contrastive_pretrain(enc, motions, kappa=10.0, steps=400, pairs_per_motion=16, lr=1e-3, seed=0)
    assert stats["intra_cos"] > 0.9
    assert stats["inter_cos"] < 0.5
    z = motion_embeddings(enc, motions)
    assert torch.allclose(z.norm(dim=-1), torch.ones(len(z)), atol=1e-5)
    auc = reward_auc(lambda s, zz: (enc(s) * zz).sum(-1), motions, z)
    assert auc > 0.95


def test_alignment_stats_by_hand():
    enc = RGSDEncoder(3, k=3, hidden=(4,))
    enc.net = torch.nn.Identity()  # μ(s) = s / ‖s‖
    m1 = torch.tensor([[1.0, 0, 0], [1.0, 0, 0]])
    m2 = torch.tensor([[0, 1.0, 0], [0, 0, 1.0]])
    st = alignment_stats(enc, [m1, m2])
    assert st["intra_cos"] == pytest.approx((1.0 + 0.0) / 2)
    assert st["inter_cos"] == pytest.approx(0.0)


@pytest.mark.parametrize(
    "motions,match",
    [
        ([torch.zeros(5, 3)], "at least two"),
        ([torch.zeros(5, 3), torch.zeros(1, 3)], "two frames"),
        ([torch.zeros(5, 3), torch.full((5, 3), float("nan"))], "NaN"),
        ([torch.zeros(5, 3), torch.zeros(5, 4)], "features"),
    ],
)
def test_bad_motions_raise_one_line(motions, match):
    with pytest.raises(ValueError, match=match) as info:
        validate_motions(motions)
    assert "\n" not in str(info.value)


def test_width_unlike_observation_raises():
    with pytest.raises(ValueError, match="observation has 7"):
        validate_motions([torch.zeros(5, 3), torch.zeros(5, 3)], obs_dim=7)
