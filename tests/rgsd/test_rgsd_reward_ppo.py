"""RGSD rewards, streams, early exit, baselines' reductions, PuppetWorld and PPO's GAE (RGSD Sec. 3.3-3.4)."""

import copy
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from iclr26.rgsd.config import config_for
from iclr26.rgsd.encoder import RGSDEncoder
from iclr26.rgsd.ppo import gae
from iclr26.rgsd.puppet import PuppetConfig, PuppetWorld, make_references
from iclr26.rgsd.reward import METRA, DIAYNDiscriminator, RGSDLatentSampler, RGSDReward, check_p, early_exit
from iclr26.rgsd.trainer import RefBank, _update_module, train_arm
from iclr26.rgsd.vmf import mean_resultant_length

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def refs():
    return make_references(PuppetConfig())


def test_imitation_reward_exact_and_bounded():
    enc = RGSDEncoder(5, k=4, hidden=(8,))
    rew = RGSDReward(enc, kappa=7.0, offset=2.0, scale=1.0)
    s = torch.randn(32, 5)
    z = F.normalize(torch.randn(32, 4), dim=-1)
    expected = 2.0 + 7.0 * (enc(s) * z).sum(-1)
    assert torch.allclose(rew.imitation_reward(s, z), expected, atol=1e-6)
    r = rew.imitation_reward(s, z)
    assert bool((r >= 2.0 - 7.0 - 1e-6).all() and (r <= 2.0 + 7.0 + 1e-6).all())
    # the default offset C = κ keeps rewards >= 0; scale multiplies
    r2 = RGSDReward(enc, kappa=7.0, scale=0.5).imitation_reward(s, z)
    assert torch.allclose(r2, 0.5 * (7.0 + 7.0 * (enc(s) * z).sum(-1)), atol=1e-6)
    assert bool((r2 >= 0).all())


def test_reward_uses_frozen_for_imitation_and_copy_for_discovery():
    enc = RGSDEncoder(5, k=4, hidden=(8,))
    rew = RGSDReward(enc, kappa=5.0, scale=1.0)
    assert all(not p.requires_grad for p in rew.frozen.parameters())
    assert all(p.requires_grad for p in rew.disc.parameters())
    with torch.no_grad():
        for p in rew.disc.parameters():
            p.add_(0.5)
    s, z = torch.randn(6, 5), F.normalize(torch.randn(6, 4), dim=-1)
    imit = torch.tensor([True, False, True, False, True, False])
    r = rew.reward(s, z, imit)
    assert torch.allclose(r[imit], rew.imitation_reward(s, z)[imit])
    assert torch.allclose(r[~imit], rew.discovery_reward(s, z)[~imit])
    assert not torch.allclose(rew.imitation_reward(s, z), rew.discovery_reward(s, z))


def test_kl_anchor_zero_at_init_and_gradient_direction():
    enc = RGSDEncoder(5, k=4, hidden=(8,))
    rew = RGSDReward(enc, kappa=10.0, beta=1.0, scale=1.0)
    s = torch.randn(16, 5)
    assert float(rew.kl_to_grounded(s).detach().abs().max()) < 1e-5  # q' = copy(q): KL = 0
    with torch.no_grad():
        for p in rew.disc.parameters():
            p.add_(0.3 * torch.randn_like(p))
    kl = rew.kl_to_grounded(s)
    cos = (rew.disc(s) * rew.frozen(s)).sum(-1)
    assert torch.allclose(kl, 10.0 * mean_resultant_length(4, 10.0) * (1 - cos), atol=1e-5)
    z = F.normalize(torch.randn(16, 4), dim=-1)
    loss, _ = rew.disc_loss(s, z, s)
    manual = -10.0 * (rew.disc(s) * z).sum(-1).mean() + kl.mean()
    assert float(loss) == pytest.approx(float(manual), rel=1e-5)
    loss.backward()
    assert all(p.grad is None for p in rew.frozen.parameters())


def test_p_zero_without_pretraining_or_kl_equals_diayn():
    torch.manual_seed(1)
    enc = RGSDEncoder(5, k=4, hidden=(8,))
    diayn = DIAYNDiscriminator(copy.deepcopy(enc), kappa=6.0, scale=0.25)
    rew = RGSDReward(copy.deepcopy(enc), kappa=6.0, beta=0.0, scale=0.25)  # "no pretraining": random encoder
    s, z = torch.randn(64, 5), F.normalize(torch.randn(64, 4), dim=-1)
    imit = torch.zeros(64, dtype=torch.bool)  # p = 0: every episode is a discovery episode
    assert torch.allclose(rew.reward(s, z, imit), diayn.reward(s, z), atol=1e-6)
    loss_r, _ = rew.disc_loss(s, z, s)
    loss_d = diayn.loss(s, z)
    assert float(loss_r) == pytest.approx(float(loss_d), rel=1e-6)
    loss_r.backward()
    loss_d.backward()
    for a, b in zip(rew.disc.parameters(), diayn.enc.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)


def test_p_one_gives_the_copy_no_gradient(refs):
    cfg = config_for("smoke")
    cfg = replace(
        cfg,
        puppet=replace(cfg.puppet, references=tuple(r.name for r in refs[:3])),
        ppo=replace(cfg.ppo, iterations=2, n_envs=8, n_steps=8),
    )
    bank = RefBank(make_references(cfg.puppet))
    enc = RGSDEncoder(PuppetWorld.obs_dim, cfg.method.k, cfg.method.encoder_hidden)
    rew = RGSDReward(enc, cfg.method.kappa)
    before = copy.deepcopy(rew.disc.state_dict())
    opt = torch.optim.Adam(rew.disc.parameters(), lr=1e-2)
    T, N = 4, 6
    roll = {
        "s": torch.randn(T, N, PuppetWorld.obs_dim),
        "s2": torch.randn(T, N, PuppetWorld.obs_dim),
        "z": F.normalize(torch.randn(T, N, cfg.method.k), dim=-1),
        "imit": torch.ones(T, N, dtype=torch.bool),
    }
    stats = _update_module("rgsd", rew, opt, roll, bank, cfg, torch.Generator().manual_seed(0))
    assert stats == {}
    assert all(p.grad is None for p in rew.disc.parameters())
    for k, v in rew.disc.state_dict().items():
        assert torch.equal(v, before[k])
    roll["imit"][0, 0] = False  # one discovery transition: now q' moves
    _update_module("rgsd", rew, opt, roll, bank, cfg, torch.Generator().manual_seed(0))
    assert any(not torch.equal(v, before[k]) for k, v in rew.disc.state_dict().items())


def test_sampler_streams_rsi_and_uniform_discovery():
    z_refs = F.normalize(torch.randn(3, 8), dim=-1)
    smp = RGSDLatentSampler(z_refs, [10, 20, 30], p=0.3, seed=0)
    d = smp.sample(20000)
    assert abs(float(d.imitate.float().mean()) - 0.3) < 0.02
    assert torch.allclose(d.z[d.imitate], z_refs[d.ref_id[d.imitate]])
    zd = d.z[~d.imitate]
    assert torch.allclose(zd.norm(dim=-1), torch.ones(len(zd)), atol=1e-5)
    assert float(zd.mean(0).abs().max()) < 0.03
    lengths = torch.tensor([10, 20, 30])[d.ref_id]
    assert bool((d.t0 >= 0).all() and (d.t0 < lengths).all())
    assert int(d.t0[d.ref_id == 2].max()) == 29  # every frame reachable
    assert bool(RGSDLatentSampler(z_refs, [10, 20, 30], p=1.0).sample(100).imitate.all())
    assert not bool(RGSDLatentSampler(z_refs, [10, 20, 30], p=0.0).sample(100).imitate.any())


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_bad_p_raises(p):
    with pytest.raises(ValueError, match="p must be"):
        check_p(p)
    with pytest.raises(ValueError, match="p must be"):
        RGSDLatentSampler(torch.eye(2), [5, 5], p=p)


def test_early_exit_only_in_imitation_episodes():
    err = torch.tensor([0.1, 0.9, 0.9, 0.1, 0.5])
    imit = torch.tensor([True, True, False, False, True])
    assert early_exit(err, 0.5, imit).tolist() == [False, True, False, False, False]


def test_rsi_states_are_reference_frames(refs):
    cfg = config_for("smoke")
    cfg = replace(cfg, ppo=replace(cfg.ppo, n_envs=16))
    bank = RefBank(make_references(cfg.puppet))
    from iclr26.rgsd.trainer import _Envs

    zr = F.normalize(torch.randn(len(bank.refs), cfg.method.k), dim=-1)
    envs = _Envs(cfg, bank, RGSDLatentSampler(zr, [bank.T] * len(bank.refs), 0.5, seed=3))
    for i in range(16):
        r, t = int(envs.ref[i]), int(envs.t[i])
        assert torch.equal(envs.env.q[i], bank.q[r, t])
        assert torch.equal(envs.env.obs()[i], bank.obs[r, t])
        assert torch.equal(envs.env.root[i], bank.root[r, t])
    assert float(envs.track_err().max()) < 1e-6  # at RSI the tracking error is zero


def test_reference_replay_is_exact(refs):
    for r in refs:
        env = PuppetWorld(PuppetConfig(), 1)
        env.set_state(torch.tensor([0]), r.q[:1], r.qd[:1], r.root[:1])
        for t in range(len(r) - 1):
            env.step(r.actions[t : t + 1])
            assert torch.equal(env.obs()[0], r.obs[t + 1]), (r.name, t)
            assert torch.equal(env.root[0], r.root[t + 1])


def test_puppet_physics_semantics(refs):
    by = {r.name: r for r in refs}
    # walking moves forward, backward walking backward, sidesteps sideways, punch and turn stay in place
    assert float(by["walk_slow"].root[-1, 0]) > 2.0 and float(by["backward"].root[-1, 0]) < -2.0
    assert float(by["sidestep_left"].root[-1, 1]) > 2.0 > -2.0 > float(by["sidestep_right"].root[-1, 1])
    assert float(by["punch"].root[-1, :2].norm()) < 0.05
    assert float(by["turn"].root[-1, 2].abs()) > 1.5 and float(by["turn"].root[-1, :2].norm()) < 1.0
    # cyclic clips: one gait period later the local observation repeats (no global pose in it)
    for r in refs:
        assert float((r.obs[r.period] - r.obs[0]).abs().max()) < 0.01, r.name
    # arm and head joints never move the root
    env = PuppetWorld(PuppetConfig(), 64)
    g = torch.Generator().manual_seed(0)
    for _ in range(40):
        a = torch.zeros(64, 12)
        a[:, 6:] = torch.rand(64, 6, generator=g) * 2 - 1
        env.step(a)
    assert float(env.root.abs().max()) == 0.0


def test_gae_hand_values():
    r = torch.tensor([[1.0], [2.0], [3.0]])
    v = torch.tensor([[0.5], [1.0], [1.5]])
    d = torch.tensor([[False], [True], [False]])
    last = torch.tensor([2.0])
    g, lam = 0.9, 0.8
    adv, ret = gae(r, v, d, last, g, lam)
    d2 = 3.0 + g * 2.0 - 1.5
    d1 = 2.0 - 1.0  # episode ended after step 1: no bootstrap
    d0 = 1.0 + g * 1.0 - 0.5
    a2, a1 = d2, d1
    a0 = d0 + g * lam * a1
    assert torch.allclose(adv[:, 0], torch.tensor([a0, a1, a2]))
    assert torch.allclose(ret, adv + v)


def test_metra_constraint_and_cycle_sum(refs):
    torch.manual_seed(0)
    m = METRA(PuppetWorld.obs_dim, 4, hidden=(32,), lam_init=30.0)
    s = torch.cat([r.obs[:-1] for r in refs])
    s2 = torch.cat([r.obs[1:] for r in refs])
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    # one skill per reference clip (METRA's z is fixed along a trajectory)
    zr = F.normalize(torch.randn(len(refs), 4, generator=g), dim=-1)
    z = zr.repeat_interleave(len(refs[0]) - 1, 0)
    with torch.no_grad():
        dist0 = (m.phi(s2) - m.phi(s)).norm(dim=-1)
    for _ in range(300):
        loss, _ = m.loss(s, s2, z)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        dist = (m.phi(s2) - m.phi(s)).norm(dim=-1)
    assert float(dist.mean()) > 2 * float(dist0.mean())  # φ learned to spread consecutive states
    assert float(dist.quantile(0.95)) <= 1.0 + 0.1  # ‖φ(s') − φ(s)‖ <= 1 (+ tolerance)
    from iclr26.rgsd.metrics import metra_cycle_ratio

    z = F.normalize(torch.randn(8, 4, generator=g), dim=-1)
    ratios = [metra_cycle_ratio(m, r.obs, r.period, z) for r in refs]
    assert max(ratios) < 0.1  # Σ over a cycle of (φ(s') − φ(s))ᵀz ≈ 0 (paper Sec. 6)


def test_train_arm_smoke_all_arms():
    cfg = config_for("smoke")
    cfg = replace(cfg, ppo=replace(cfg.ppo, iterations=2, n_envs=16, n_steps=8))
    bank = RefBank(make_references(cfg.puppet))
    enc = RGSDEncoder(PuppetWorld.obs_dim, cfg.method.k, cfg.method.encoder_hidden)
    for arm in ("rgsd", "imitation", "diayn", "metra"):
        tr = train_arm(arm, cfg, bank, copy.deepcopy(enc) if arm in ("rgsd", "imitation") else None, seed=0)
        assert len(tr.curves) == 2 and tr.env_steps == 2 * 16 * 8
        for row in tr.curves:
            assert all(torch.isfinite(torch.tensor(v)) for k, v in row.items() if k != "reward_imitation")


def test_metra_reward_and_dual_by_hand():
    torch.manual_seed(0)
    m = METRA(5, 3, hidden=(8,), eps=1e-3, lam_init=2.0)
    s, s2 = torch.randn(10, 5), torch.randn(10, 5)
    z = F.normalize(torch.randn(10, 3), dim=-1)
    with torch.no_grad():
        d = m.phi(s2) - m.phi(s)
    assert torch.allclose(m.reward(s, s2, z), (d * z).sum(-1), atol=1e-6)
    loss, st = m.loss(s, s2, z)
    cst = torch.clamp(1 - (d**2).sum(-1), max=1e-3).mean()
    assert st["metra_cst"] == pytest.approx(float(cst), rel=1e-5)
    assert float(loss) == pytest.approx(float(-((d * z).sum(-1).mean() + 2.0 * cst) + 2.0 * cst), rel=1e-5)
    # the dual step raises λ when the constraint is violated (cst < 0)
    loss.backward()
    assert (float(m.log_lam.grad) < 0) == (float(cst) < 0)
