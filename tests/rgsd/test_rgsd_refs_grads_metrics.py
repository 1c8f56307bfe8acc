"""RGSD: which tensor feeds which term, where gradients flow and stop, and the diagnostics on asymmetric inputs.

Gradient table (RGSD Sec. 3.2-3.3; METRA, Park et al. 2024, Eq. for L_φ and L_λ):

| loss term                         | nonzero gradient               | exactly zero / none          |
|-----------------------------------|--------------------------------|------------------------------|
| InfoNCE (phase 1)                 | encoder via anchors AND positives | --                        |
| disc_loss nll  −κ μ_φ'(s)ᵀz       | q_φ' (disc copy)               | q_φ (frozen): no grad        |
| disc_loss KL(q_φ' ‖ q_φ)          | q_φ' through μ_φ'              | q_φ (frozen, under no_grad)  |
| imitation / discovery reward      | none (no_grad)                 | every parameter              |
| METRA L_φ = −(gain + sg(λ)·cst)   | φ                              | log λ                        |
| METRA L_λ = λ · sg(cst)           | log λ                          | φ                            |
"""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from iclr26.rgsd.encoder import RGSDEncoder, _auc, _pair_batch, alignment_stats, contrastive_pretrain, info_nce
from iclr26.rgsd.metrics import metra_cycle_ratio, pairwise_diversity, skill_realisation
from iclr26.rgsd.reward import METRA, RGSDLatentSampler, RGSDReward
from iclr26.rgsd.trainer import _reward
from iclr26.rgsd.vmf import vmf_kl

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _perturbed_reward(kappa=5.0, beta=2.0):
    torch.manual_seed(1)
    enc = RGSDEncoder(6, k=4, hidden=(16,))
    rew = RGSDReward(enc, kappa=kappa, beta=beta, offset=0.0, scale=1.0)
    with torch.no_grad():  # move the trainable copy away from the grounded encoder
        for p in rew.disc.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return rew


# ---------------------------------------------------------------- references


def test_imitation_reward_reads_frozen_encoder_and_discovery_reads_copy():
    rew = _perturbed_reward()
    s = torch.randn(20, 6)
    z = F.normalize(torch.randn(20, 4), dim=-1)
    with torch.no_grad():
        mu, mu_d = rew.frozen(s), rew.disc(s)
    assert (mu - mu_d).abs().max() > 0.05  # the two encoders differ on these states
    assert torch.allclose(rew.imitation_reward(s, z), 5.0 * (mu * z).sum(-1), atol=1e-5)
    assert torch.allclose(rew.discovery_reward(s, z), 5.0 * (mu_d * z).sum(-1), atol=1e-5)


def test_reward_of_a_transition_reads_the_next_state():
    """r(s_t, a_t) is scored on s_{t+1} (the state the action reached), for RGSD, imitation and DIAYN arms."""
    rew = _perturbed_reward()
    s, s2 = torch.randn(8, 6), torch.randn(8, 6)
    z = F.normalize(torch.randn(8, 4), dim=-1)
    imit = torch.tensor([True, False] * 4)
    got = _reward("rgsd", rew, s, s2, z, imit)
    assert torch.allclose(got, rew.reward(s2, z, imit))
    assert not torch.allclose(got, rew.reward(s, z, imit), atol=1e-3)


def test_kl_anchor_uses_the_anchor_states_not_the_discovery_states():
    rew = _perturbed_reward(beta=3.0)
    s, s_anchor = torch.randn(16, 6), 3.0 * torch.randn(16, 6) + 1.0
    z = F.normalize(torch.randn(16, 4), dim=-1)
    loss, st = rew.disc_loss(s, z, s_anchor)
    with torch.no_grad():
        nll = -5.0 * (rew.disc(s) * z).sum(-1).mean()
        kl_anchor = vmf_kl(rew.disc(s_anchor), rew.frozen(s_anchor), 5.0).mean()
        kl_s = vmf_kl(rew.disc(s), rew.frozen(s), 5.0).mean()
    assert abs(float(kl_anchor) - float(kl_s)) > 1e-3
    assert float(loss.detach()) == pytest.approx(float(nll + 3.0 * kl_anchor), abs=1e-5)
    assert st["disc_kl"] == pytest.approx(float(kl_anchor), abs=1e-5)


def test_metra_reward_is_phi_next_minus_phi_now():
    torch.manual_seed(0)
    m = METRA(3, 3, hidden=(8,))
    m.phi = nn.Identity()
    s = torch.tensor([[0.0, 1.0, 2.0]])
    s2 = torch.tensor([[1.0, 3.0, 2.0]])
    z = torch.tensor([[1.0, 0.0, 0.0]])
    assert float(m.reward(s, s2, z)) == pytest.approx(1.0)
    assert float(m.reward(s2, s, z)) == pytest.approx(-1.0)


# ---------------------------------------------------------------- gradient flow


def _grads(loss, params):
    g = torch.autograd.grad(loss, params, allow_unused=True)
    return [torch.zeros_like(p) if gi is None else gi for p, gi in zip(params, g)]


def test_disc_loss_gradients_reach_only_the_copy_and_match_the_formula():
    rew = _perturbed_reward(beta=4.0)
    s, s_anchor = torch.randn(12, 6), torch.randn(12, 6)
    z = F.normalize(torch.randn(12, 4), dim=-1)
    disc_params = list(rew.disc.parameters())
    assert all(not p.requires_grad for p in rew.frozen.parameters())
    # nll alone (β = 0 path of the same function): gradient equals that of −κ μ_φ'(s)ᵀz
    rew.beta = 0.0
    loss0, _ = rew.disc_loss(s, z, s_anchor)
    g0 = _grads(loss0, disc_params)
    ref0 = _grads(-5.0 * (rew.disc(s) * z).sum(-1).mean(), disc_params)
    assert sum(float(g.abs().sum()) for g in g0) > 1e-3
    for a, b in zip(g0, ref0):
        assert torch.allclose(a, b, atol=1e-6)
    # KL term alone: the gradient flows through μ_φ' with μ_φ held fixed
    kl = rew.kl_to_grounded(s_anchor).mean()
    gk = _grads(kl, disc_params)
    with torch.no_grad():
        mu = rew.frozen(s_anchor)
    refk = _grads(-(rew.disc(s_anchor) * mu).sum(-1).mean() * 5.0 * rew.a_k, disc_params)
    assert sum(float(g.abs().sum()) for g in gk) > 1e-4
    for a, b in zip(gk, refk):
        assert torch.allclose(a, b, atol=1e-6)
    # full loss: backward leaves the frozen encoder without gradients
    rew.beta = 4.0
    loss, _ = rew.disc_loss(s, z, s_anchor)
    loss.backward()
    assert all(p.grad is None for p in rew.frozen.parameters())
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in rew.disc.parameters())


def test_rewards_carry_no_gradient():
    rew = _perturbed_reward()
    s = torch.randn(4, 6, requires_grad=True)
    z = F.normalize(torch.randn(4, 4), dim=-1)
    assert not rew.imitation_reward(s, z).requires_grad
    assert not rew.discovery_reward(s, z).requires_grad


def test_metra_dual_and_phi_gradients_are_separated():
    torch.manual_seed(3)
    m = METRA(5, 3, hidden=(8,), eps=1e-3, lam_init=30.0)
    with torch.no_grad():  # large steps so the constraint is active (cst < eps, nonzero)
        m.phi[-1].weight.mul_(10.0)
    s, s2 = torch.randn(16, 5), torch.randn(16, 5)
    z = F.normalize(torch.randn(16, 3), dim=-1)
    loss, st = m.loss(s, s2, z)
    phi_params = list(m.phi.parameters())
    g_lam = torch.autograd.grad(loss, [m.log_lam], retain_graph=True)[0]
    g_phi = _grads(loss, phi_params)
    d = m.phi(s2) - m.phi(s)
    cst = torch.clamp(1.0 - (d**2).sum(-1), max=m.eps).mean()
    assert abs(float(cst.detach())) > 1e-2
    # d/dlogλ of λ·sg(cst) = λ·cst; the φ loss carries sg(λ), so adds nothing
    assert float(g_lam) == pytest.approx(float((m.lam * cst).detach()), rel=1e-5)
    # φ's gradient is that of −(gain + sg(λ)·cst) only; L_λ uses sg(cst)
    gain = (d * z).sum(-1).mean()
    ref_phi = _grads(-(gain + m.lam.detach() * cst), phi_params)
    for a, b in zip(g_phi, ref_phi):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5)


def test_infonce_pretraining_updates_through_anchor_and_positive():
    """One Adam step of contrastive_pretrain equals one step on InfoNCE with gradients through both views."""
    torch.manual_seed(0)
    motions = [torch.randn(10, 6) + i for i in range(3)]
    enc = RGSDEncoder(6, k=4, hidden=(8,))
    ref = copy.deepcopy(enc)
    contrastive_pretrain(enc, motions, kappa=4.0, steps=1, motions_per_batch=3, pairs_per_motion=4, lr=1e-2, seed=5)
    gen = torch.Generator().manual_seed(5)
    za, zp, labels = _pair_batch(motions, 3, 4, gen)
    opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    ref.train()
    info_nce(ref(za), ref(zp), labels, 4.0).backward()
    opt.step()
    for a, b in zip(enc.parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    # and the detached-positive variant is a different update (the test can tell them apart)
    ref2 = copy.deepcopy(ref)
    g_both = _grads(info_nce(ref2(za), ref2(zp), labels, 4.0), list(ref2.parameters()))
    g_anchor = _grads(info_nce(ref2(za), ref2(zp).detach(), labels, 4.0), list(ref2.parameters()))
    assert max(float((a - b).abs().max()) for a, b in zip(g_both, g_anchor)) > 1e-4


# ---------------------------------------------------------------- metrics on asymmetric, hand-computed inputs


def test_metra_cycle_ratio_hand_computed():
    m = METRA(2, 2, hidden=(4,))
    m.phi = nn.Identity()
    obs = torch.tensor([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0], [2.0, 0.0], [10.0, 0.0], [-5.0, 0.0]])
    z = torch.tensor([[1.0, 0.0]])
    # period 3: r = (1, 2, −1) → |Σr| / Σ|r| = 2 / 4
    assert metra_cycle_ratio(m, obs, 3, z) == pytest.approx(0.5)
    # two skills: z = −e1 gives the same ratio; z = e2 gives 0/0 → 0 (clamped); mean (0.5 + 0) / 2
    assert metra_cycle_ratio(m, obs, 3, torch.tensor([[-1.0, 0.0], [0.0, 1.0]])) == pytest.approx(0.25)


def test_pairwise_diversity_hand_computed():
    kp = torch.zeros(3, 2, 1, 3)
    kp[1, :, 0, 0] = 1.0  # rollout 1 sits 1 away from rollout 0 at both frames
    kp[2, 0, 0, 1] = 4.0  # rollout 2: 4 away at frame 0, 0 at frame 1
    # pairs: d01 = 1, d02 = mean(4, 0) = 2, d12 = mean(sqrt(17), 1)
    expect = (1.0 + 2.0 + (17**0.5 + 1.0) / 2) / 3
    assert pairwise_diversity(kp) == pytest.approx(expect, rel=1e-6)


def test_alignment_stats_hand_computed():
    enc = RGSDEncoder(2, k=2, hidden=(2,))
    enc.net = nn.Identity()  # μ(s) = s / ‖s‖
    m0 = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])  # pair cosines 1, 0, 0 → 1/3
    m1 = torch.tensor([[0.0, 1.0], [0.0, 2.0]])  # cosine 1
    st = alignment_stats(enc, [m0, m1])
    assert st["intra_cos"] == pytest.approx((1 / 3 + 1.0) / 2, abs=1e-6)
    # inter: mean vectors (2/3, 1/3) and (0, 1) → dot 1/3
    assert st["inter_cos"] == pytest.approx(1 / 3, abs=1e-6)


def test_auc_with_ties_hand_computed():
    # pairs (pos, neg): (1,2) 0, (1,0) 1, (2,2) ½, (2,0) 1 → 2.5 / 4
    assert _auc([1.0, 2.0], [2.0, 0.0]) == pytest.approx(0.625)
    assert _auc([3.0, 3.0, 0.0], [3.0]) == pytest.approx(1.0 / 3.0)


def test_skill_realisation_mean_then_normalise():
    class Enc:
        def __call__(self, x):
            return F.normalize(x, dim=-1)

    obs = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]])  # mean μ = (1/3, 2/3)
    z = torch.tensor([[1.0, 0.0]])
    assert float(skill_realisation(Enc(), obs, z)[0]) == pytest.approx(1.0 / 5**0.5, abs=1e-6)


# ---------------------------------------------------------------- trainer / evaluation plumbing (which tensor where)


def _smoke_bank():
    from dataclasses import replace

    from iclr26.rgsd.config import config_for
    from iclr26.rgsd.puppet import make_references
    from iclr26.rgsd.trainer import RefBank

    cfg = config_for("smoke")
    cfg = replace(cfg, puppet=replace(cfg.puppet, references=cfg.puppet.references[:3]))
    return cfg, RefBank(make_references(cfg.puppet))


def _fake_roll(n_t=16, n_e=4, d=None, k=4):
    g = torch.Generator().manual_seed(0)
    s = torch.randn(n_t, n_e, d, generator=g)
    return {
        "s": s,
        "s2": s + 100.0,  # next states are far from current ones: a swap is visible
        "z": F.normalize(torch.randn(n_t, n_e, k, generator=g), dim=-1),
        "imit": torch.tensor([[True, True, True, False]] * n_t),
    }


@pytest.mark.parametrize("kl_states", ["visited", "reference"])
def test_rgsd_copy_update_reads_next_states_of_discovery_transitions(kl_states):
    from dataclasses import replace

    from iclr26.rgsd.trainer import _update_module

    cfg, bank = _smoke_bank()
    cfg = replace(cfg, method=replace(cfg.method, kl_states=kl_states, disc_minibatches=2))
    d = bank.obs.shape[-1]
    roll = _fake_roll(d=d)
    calls = []

    class Rec(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(()))

        def disc_loss(self, s, z, s_anchor):
            calls.append((s, z, s_anchor))
            return self.w * 0.0 + (s.sum() * 0.0), {}

    mod = Rec()
    _update_module("rgsd", mod, torch.optim.SGD(mod.parameters(), lr=0.1), roll, bank, cfg, torch.Generator())
    s2, z, imit = roll["s2"].reshape(-1, d), roll["z"].reshape(-1, 4), roll["imit"].reshape(-1)
    got_s = torch.cat([c[0] for c in calls])
    got_z = torch.cat([c[1] for c in calls])
    assert len(got_s) == int((~imit).sum())
    disc_rows = {tuple(r.tolist()) for r in s2[~imit]}
    assert {tuple(r.tolist()) for r in got_s} == disc_rows  # next states, discovery stream only
    # each state keeps its own skill
    pair = {tuple(a.tolist()): tuple(b.tolist()) for a, b in zip(s2[~imit], z[~imit])}
    assert all(pair[tuple(a.tolist())] == tuple(b.tolist()) for a, b in zip(got_s, got_z))
    anchors = torch.cat([c[2] for c in calls])
    if kl_states == "visited":  # every visited next state, imitation ones included, may anchor the KL
        pool = {tuple(r.tolist()) for r in s2}
        imitation_states = {tuple(r.tolist()) for r in s2[imit]}
        assert any(tuple(r.tolist()) in imitation_states for r in anchors)  # 3/4 of the pool: P(miss) ~ 4^-16
    else:
        pool = {tuple(r.tolist()) for r in bank.obs.reshape(-1, d)}
    assert all(tuple(r.tolist()) in pool for r in anchors)


def test_baselines_update_on_their_own_inputs():
    from iclr26.rgsd.trainer import _update_module

    cfg, bank = _smoke_bank()
    d = bank.obs.shape[-1]
    roll = _fake_roll(d=d)
    seen = {}

    class Diayn(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(()))

        def loss(self, s, z):
            seen.setdefault("diayn", []).append(s)
            return self.w * 0.0

    class Metra(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(()))

        def loss(self, s, s2, z):
            seen.setdefault("metra", []).append((s, s2))
            return self.w * 0.0, {}

    for arm, m in (("diayn", Diayn()), ("metra", Metra())):
        _update_module(arm, m, torch.optim.SGD(m.parameters(), lr=0.1), roll, bank, cfg, torch.Generator())
    assert bool((torch.cat(seen["diayn"]) > 50).all())  # DIAYN scores s_{t+1}, over every transition
    assert len(torch.cat(seen["diayn"])) == roll["s"].numel() // d
    for s, s2 in seen["metra"]:
        assert torch.allclose(s2, s + 100.0)  # METRA's pairs stay (s_t, s_{t+1})


def test_reset_starts_each_env_at_its_reference_frame():
    from iclr26.rgsd.trainer import _Envs

    cfg, bank = _smoke_bank()
    z_refs = F.normalize(torch.randn(len(bank.refs), cfg.method.k), dim=-1)
    smp = RGSDLatentSampler(z_refs, [bank.T] * len(bank.refs), p=0.5, seed=3)
    envs = _Envs(cfg, bank, smp)
    assert bool((envs.t > 0).any())  # RSI draws frames beyond the first
    assert torch.allclose(envs.env.q, bank.q[envs.ref, envs.t])
    assert torch.allclose(envs.env.root, bank.root[envs.ref, envs.t])
    assert float(envs.track_err().abs().max()) < 1e-5  # at reset the puppet is on its reference frame
    # imitation envs carry their reference's motion embedding
    im = envs.imitate
    assert torch.allclose(envs.z[im], z_refs[envs.ref[im]])


def test_imitation_error_pairs_each_reference_with_its_embedding(monkeypatch):
    import importlib

    from iclr26.rgsd.trainer import TrainedArm

    ev = importlib.import_module("iclr26.rgsd.evaluate")
    cfg, bank = _smoke_bank()
    K, h = len(bank.refs), min(cfg.eval.horizon, bank.T - 1)
    z_refs = torch.eye(K, cfg.method.k)

    def fake_rollout(ac, cfg_, bank_, ids, z, horizon, hold_pose=False):
        # a rollout lands 1 away from reference ids[i] per unit of distance between z[i] and that reference's z_m
        gap = (z - z_refs[ids]).norm(dim=-1) + 0.1 * torch.arange(len(ids))
        kp = bank_.kp_world[ids, : horizon + 1].clone()
        kp[..., 0] += gap[:, None, None]
        return {"kp": kp}

    monkeypatch.setattr(ev, "rollout_from_first_frame", fake_rollout)
    arm = TrainedArm("rgsd", None, None, z_refs)
    assert ev.imitation_errors(arm, cfg, bank, 0) == pytest.approx([0.1 * i for i in range(K)], abs=1e-5)
    # DIAYN / METRA: best of n uniform skills per reference (the smallest error of that reference's rollouts)
    n = cfg.eval.best_of
    base = TrainedArm("diayn", None, None, None)

    def fake_rollout2(ac, cfg_, bank_, ids, z, horizon, hold_pose=False):
        err = torch.tensor([[3.0 + m + 0.5 * j if j != m % n else 1.0 + m for j in range(n)] for m in range(K)])
        kp = bank_.kp_world[ids, : horizon + 1].clone()
        kp[..., 0] += err.reshape(-1)[:, None, None]
        return {"kp": kp}

    monkeypatch.setattr(ev, "rollout_from_first_frame", fake_rollout2)
    assert ev.imitation_errors(base, cfg, bank, 0) == pytest.approx([1.0 + m for m in range(K)], abs=1e-5)
    assert h > 0
