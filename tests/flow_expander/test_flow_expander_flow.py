"""Schedule algebra, conversions, samplers and flow matching."""

import math

import pytest
import torch

from iclr26.flow_expander.flow import (
    AsVelocity,
    FMConfig,
    GaussianVelocity,
    VelocityMLP,
    eta_t,
    flow_matching_loss,
    k_t,
    pretrain_flow_matching,
    sample_memoryless,
    sample_ode,
    score_from_velocity,
    sigma_t,
    to_velocity,
    velocity_from_score,
)

torch.set_num_threads(1)


def test_ot_schedule_algebra():
    t = torch.tensor([0.1, 0.3, 0.5, 0.9])
    assert torch.allclose(k_t(t), 1 / t)
    assert torch.allclose(eta_t(t), (1 - t) / t)
    assert torch.allclose(sigma_t(t) ** 2, 2 * (1 - t) / t)
    # eta_t = beta (k beta - beta_dot) with beta = 1 - t, beta_dot = -1
    assert torch.allclose(eta_t(t), (1 - t) * ((1 - t) / t + 1))


def test_score_from_velocity_matches_analytic_gaussian():
    g = GaussianVelocity([0.7, -1.0], [0.5, 1.3])
    x = torch.randn(64, 2)
    for tv in (0.1, 0.5, 0.9):
        t = torch.full((64,), tv)
        s = score_from_velocity(g(x, t), x, t)
        assert torch.allclose(s, g.score(x, t), atol=1e-5)
        # and back
        assert torch.allclose(velocity_from_score(s, x, t), g(x, t), atol=1e-5)


def test_output_type_conversions_round_trip():
    g = GaussianVelocity([0.3], [0.8])
    x = torch.randn(32, 1)
    t = torch.full((32,), 0.4)
    v = g(x, t)
    s = g.score(x, t)
    eps = -(1 - 0.4) * s  # s = -eps / beta_t
    x1_hat = x + (1 - 0.4) * v  # v = (x1_hat - x) / (1 - t)
    for out, kind in ((v, "velocity"), (s, "score"), (eps, "epsilon"), (x1_hat, "endpoint")):
        assert torch.allclose(to_velocity(out, x, t, kind), v, atol=1e-5), kind
    with pytest.raises(ValueError):
        to_velocity(v, x, t, "logits")

    class ScoreModel(torch.nn.Module):
        def forward(self, x, t):
            return g.score(x, t)

    assert torch.allclose(AsVelocity(ScoreModel(), "score")(x, t), v, atol=1e-5)

    class UserFlow(torch.nn.Module):  # a user model exposing .velocity(x, t)
        def velocity(self, x, t):
            return g(x, t)

    wrapped = AsVelocity(UserFlow(), dim=1)
    assert wrapped.dim == 1 and torch.allclose(wrapped(x, t), v)


def test_memoryless_sde_and_ode_preserve_terminal_marginal():
    torch.manual_seed(0)
    g = GaussianVelocity([1.0], [0.5])
    gen = torch.Generator().manual_seed(0)
    traj, times = sample_memoryless(g, 20000, 1, 50, gen)
    assert traj.shape == (51, 20000, 1) and times[0] == 0 and times[-1] == 1
    x = traj[-1]
    assert abs(x.mean().item() - 1.0) < 0.03 and abs(x.std().item() - 0.5) < 0.03
    # intermediate marginal p_t = N(t mu, t^2 s^2 + (1 - t)^2) at t = 0.5
    xm = traj[25]
    assert abs(xm.mean().item() - 0.5) < 0.03
    assert abs(xm.var().item() - (0.25 * 0.25 + 0.25)) < 0.03
    xo = sample_ode(g, 20000, 1, 100, gen)
    assert abs(xo.mean().item() - 1.0) < 0.03 and abs(xo.std().item() - 0.5) < 0.03


def test_velocity_mlp_zero_head_and_fm_training_learns_mean():
    torch.manual_seed(0)
    m = VelocityMLP(2, 32, 2)
    x = torch.randn(5, 2)
    assert torch.equal(m(x, torch.rand(5)), torch.zeros(5, 2))
    data = torch.randn(2000, 2) * 0.3 + torch.tensor([2.0, -1.0])
    losses = pretrain_flow_matching(m, data, FMConfig(steps=300, batch_size=256, lr=3e-3), seed=0)
    assert losses[-1] < losses[0]
    xs = sample_ode(m, 2000, 2, 30, torch.Generator().manual_seed(1))
    assert torch.allclose(xs.mean(0), torch.tensor([2.0, -1.0]), atol=0.15)
    with pytest.raises(ValueError):
        pretrain_flow_matching(m, torch.randn(10), FMConfig(steps=1))
    assert math.isfinite(float(flow_matching_loss(m, data[:8]).detach()))
