"""Adjoint Matching: lean adjoint closed forms and the Gaussian-tilt sign tests (spec 8.3-8.4)."""

import copy

import pytest
import torch
from torch import nn

from iclr26.flow_expander.adjoint_matching import AMConfig, adjoint_matching, adjoint_matching_loss, lean_adjoint
from iclr26.flow_expander.flow import GaussianVelocity, VelocityMLP, sample_memoryless, sample_ode, sigma_t

torch.set_num_threads(1)


class Zero(nn.Module):
    dim = 1

    def forward(self, x, t):
        return torch.zeros_like(x)


class Residual(nn.Module):
    """Analytic Gaussian velocity + trainable MLP correction (zero at init)."""

    def __init__(self, mu, s):
        super().__init__()
        self.base = GaussianVelocity(mu, s)
        self.net = VelocityMLP(len(mu), 64, 2)
        self.dim = len(mu)

    def forward(self, x, t):
        return self.base(x, t) + self.net(x, t)


def test_lean_adjoint_zero_velocity_is_linear_in_t():
    """v = 0 on the OT path: a(t) = t a(1) (official test); exact on the grid with k_t = 1/(t + h)."""
    traj, times = sample_memoryless(Zero(), 16, 1, 20, torch.Generator().manual_seed(0))
    a = lean_adjoint(Zero(), traj, times, lambda x, t: 2.0 * torch.ones_like(x))
    expected = -2.0 * times.reshape(-1, 1, 1).expand_as(a)
    assert torch.allclose(a, expected, atol=1e-5)


def test_lean_adjoint_gaussian_jacobian():
    """Base N(0, 1) data, linear reward: a_t ≈ J_t a_1 with J_t = dX_1/dX_t = t / (t^2 + (1-t)^2)."""
    g = GaussianVelocity([0.0], [1.0])
    traj, times = sample_memoryless(g, 8, 1, 200, torch.Generator().manual_seed(0))
    a = lean_adjoint(g, traj, times, lambda x, t: torch.ones_like(x))
    for i in (40, 100, 160):
        t = float(times[i])
        j = t / (t**2 + (1 - t) ** 2)
        assert torch.allclose(a[i], torch.full_like(a[i], -j), rtol=0.03)


def test_running_reward_enters_adjoint_with_minus_sign():
    """v = 0, no terminal reward, running grad f = c: a_t = -c (1 - t) ... discretely -c h sum_{s>=t} s/t'."""
    traj, times = sample_memoryless(Zero(), 4, 1, 50, torch.Generator().manual_seed(0))
    a = lean_adjoint(Zero(), traj, times, None, lambda x, t: torch.ones_like(x))
    # continuous solution of da/dt = k a + 1 (backwards from a_1 = 0): a_t = t log t  (<= 0)
    t = float(times[25])
    assert abs(a[25, 0, 0].item() - t * torch.log(torch.tensor(t)).item()) < 0.03
    assert (a[1:-1] < 0).all()


def test_am_loss_is_zero_at_its_optimum():
    g = GaussianVelocity([0.0], [1.0])
    x, t, adj = torch.randn(50, 1), torch.rand(50) * 0.9 + 0.05, torch.randn(50, 1)

    class Opt(nn.Module):
        def forward(self, x_, t_):
            return g(x_, t_) - 0.5 * sigma_t(t_).reshape(-1, 1) ** 2 * adj

    assert adjoint_matching_loss(Opt(), g(x, t), x, t, adj).item() < 1e-8
    assert adjoint_matching_loss(g, g(x, t), x, t, adj).item() > 1e-2


AM = AMConfig(n_traj=256, steps=40, n_datasets=12, grad_steps=20, batch_size=1024, lr=3e-3)


def test_am_linear_reward_shifts_mean_by_c_s2():
    """p ∝ N(mu, s^2) exp(c x) = N(mu + c s^2, s^2): the sign test (a flipped sign moves the mean down)."""
    torch.manual_seed(0)
    mu, s, c = 0.5, 0.8, 0.6
    fine = Residual([mu], [s])
    base = copy.deepcopy(fine)
    adjoint_matching(fine, base, lambda x, t: c * torch.ones_like(x), None, AM, torch.Generator().manual_seed(0))
    x = sample_ode(fine, 20000, 1, 100, torch.Generator().manual_seed(1))
    assert abs(x.mean().item() - (mu + c * s**2)) < 0.1 * c * s**2 + 0.02
    assert abs(x.var().item() - s**2) < 0.1 * s**2
    # the base is frozen and unchanged
    assert all(not p.requires_grad for p in base.parameters())


def test_am_quadratic_reward_shrinks_variance():
    """r = -a x^2 / 2 on N(0, s^2): variance s^2 / (1 + a s^2)."""
    torch.manual_seed(0)
    s, a = 1.0, 1.0
    fine = Residual([0.0], [s])
    base = copy.deepcopy(fine)
    adjoint_matching(fine, base, lambda x, t: -a * x, None, AM, torch.Generator().manual_seed(0))
    x = sample_ode(fine, 20000, 1, 100, torch.Generator().manual_seed(1))
    target = s**2 / (1 + a * s**2)
    assert abs(x.var().item() - target) < 0.1 * target
    assert abs(x.mean().item()) < 0.05


def _hand_adjoint(times, shift, c):
    """Discrete lean adjoint for v = 0 (b = -x / (t + h)), no terminal reward, grad f(x, s) = c s:
    a_i = a_{i+1} - h a_{i+1} / (t_i + h) - h c (t_i + shift)."""
    h = float(times[1] - times[0])
    a, out = 0.0, [0.0]
    for i in range(len(times) - 2, -1, -1):
        ti = float(times[i])
        a = a - h * a / (ti + h) - h * c * (ti + shift)
        out.append(a)
    return torch.tensor(out[::-1])


def test_running_reward_time_flag():
    """The running term enters step t_i -> t_i - h at time t_i (exact Euler adjoint, default) or at
    t_i + h (official ``LeanAdjointSolverFlow``); a time-dependent grad f separates the two."""
    traj, times = sample_memoryless(Zero(), 3, 1, 10, torch.Generator().manual_seed(0))

    def grad_f(x, t):
        return 2.0 * t.reshape(-1, 1).expand_as(x)

    h = float(times[1] - times[0])
    for flag, shift in (("t", 0.0), ("t+h", h)):
        a = lean_adjoint(Zero(), traj, times, None, grad_f, running_time=flag)
        assert torch.allclose(a[:, 0, 0], _hand_adjoint(times, shift, 2.0), atol=1e-6), flag
    default = lean_adjoint(Zero(), traj, times, None, grad_f)
    code = lean_adjoint(Zero(), traj, times, None, grad_f, running_time="t+h")
    assert (default - code).abs().max() > 1e-2
    assert torch.equal(default, lean_adjoint(Zero(), traj, times, None, grad_f, running_time="t"))
    with pytest.raises(ValueError):
        AMConfig(running_time="t-h")
