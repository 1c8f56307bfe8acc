"""The bridge: identity at init, block indices, guidance locality, training behaviour, W2 estimators, baselines."""

import numpy as np
import pytest
import torch

from iclr26.ncgsb.baselines import IMFBridge, ot_interpolate, sampler_push, sb_interpolate, sb_paths
from iclr26.ncgsb.bridge import CWGBridge, displacement_fraction, kinetic_per_block, phi_gamma
from iclr26.ncgsb.config import CWGConfig, FitConfig, TaskAConfig
from iclr26.ncgsb.ot import entropic_ot, exact_w2, induced_step_cost, sinkhorn_divergence
from iclr26.ncgsb.tasks import ObstaclePotential, simulate_damped, task_a_snapshots

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _gauss(mean, std=0.3):
    mu = torch.tensor(mean)
    return lambda n, g: mu + std * torch.randn(n, 2, generator=g)


def test_identity_at_init():
    bridge = CWGBridge(2, CWGConfig(n_blocks=6, hidden=8))
    x0 = torch.randn(20, 2)
    path = bridge.path(x0)
    assert path.shape == (7, 20, 2)
    assert torch.equal(path, x0.expand(7, 20, 2))


def test_block_index_rounds():
    bridge = CWGBridge(2, CWGConfig(n_blocks=10, hidden=4))
    assert [bridge.block_index(k / 10) for k in range(11)] == list(range(11))
    assert bridge.block_index(0.6) == 6 and bridge.block_index(0.7) == 7
    assert bridge.block_index(0.29) == 3 and bridge.block_index(0.96) == 10  # nearest block, not truncation
    with pytest.raises(ValueError, match="outside"):
        bridge.block_index(1.2)


def test_guidance_gradient_only_reaches_blocks_up_to_s():
    torch.manual_seed(0)
    bridge = CWGBridge(2, CWGConfig(n_blocks=6, hidden=8))
    for blk in bridge.blocks:
        torch.nn.init.normal_(blk[-1].weight, std=0.1)
    path = bridge(torch.randn(32, 2))
    s = 3
    bridge.guidance(path, lambda z: z, torch.tensor([0.0, 2.5]), s, 5.0).backward()
    for j, blk in enumerate(bridge.blocks):
        g = sum(float(p.grad.abs().sum()) if p.grad is not None else 0.0 for p in blk.parameters())
        if j < s:  # blocks 1..s move X^s
            assert g > 0, f"block {j + 1} should receive guidance gradient"
        else:
            assert g == 0, f"block {j + 1} is after s = {s}"


def test_potential_of_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="potential"):
        CWGBridge(2, CWGConfig(n_blocks=3, hidden=4), potential=lambda x: x)
    with pytest.raises(ValueError, match="potential"):
        CWGBridge(2, CWGConfig(n_blocks=3, hidden=4), potential=lambda x: x.sum())


def test_snapshot_on_source_block_or_duplicate_block_is_refused():
    bridge = CWGBridge(2, CWGConfig(n_blocks=4, hidden=4))
    data = np.zeros((10, 2), np.float32)
    with pytest.raises(ValueError, match="block 0"):
        bridge.fit(data, data, {0.05: data}, FitConfig(steps=1))
    with pytest.raises(ValueError, match="already has a target"):
        bridge.fit(data, data, {0.5: data, 0.55: data}, FitConfig(steps=1))
    with pytest.raises(ValueError, match="NaN"):
        bridge.fit(data, np.full((10, 2), np.nan, np.float32), None, FitConfig(steps=1))


def test_closed_form_contact_geodesic_small():
    # U = 0, Gaussian -> shifted Gaussian, tiny budget (a larger λ_geo speeds up the timing):
    # the displacement shares follow φ_γ and the kinetic energy falls
    torch.manual_seed(0)
    bridge = CWGBridge(2, CWGConfig(n_blocks=5, hidden=16, gamma=2.0, lambda_geo=0.2))
    hist = bridge.fit(_gauss([0.0, 0.0]), _gauss([3.0, 0.0]), fit=FitConfig(steps=150, n_particles=64, lr=3e-3))
    assert np.mean(hist.marginal[-10:]) < 0.1 * np.mean(hist.marginal[:5])
    path = bridge.path(_gauss([0.0, 0.0])(400, torch.Generator().manual_seed(5)))
    share = displacement_fraction(path)
    assert np.abs(share - phi_gamma(2.0, np.arange(6) / 5)).max() < 0.05
    assert np.all(np.diff(kinetic_per_block(path)) < 0)


def test_sinkhorn_zero_on_identical_and_close_to_exact():
    torch.manual_seed(0)
    x = torch.randn(60, 2, dtype=torch.float64)
    y = torch.randn(60, 2, dtype=torch.float64) * 0.7 + torch.tensor([1.5, -0.5], dtype=torch.float64)
    assert abs(float(sinkhorn_divergence(x, x, blur=0.05))) < 1e-6
    s = float(sinkhorn_divergence(x, y, blur=0.02))
    w2sq = exact_w2(x, y) ** 2
    assert abs(s - w2sq) / w2sq < 0.05


def test_sinkhorn_against_pot():
    ot = pytest.importorskip("ot")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 2)), rng.normal(size=(30, 2)) + 1.0
    ref = ot.emd2(np.full(40, 1 / 40), np.full(30, 1 / 30), ot.dist(x, y))
    s = float(sinkhorn_divergence(torch.tensor(x), torch.tensor(y), blur=0.02))
    assert abs(s - ref) / ref < 0.05
    assert abs(exact_w2(x, y) ** 2 - ref) < 1e-9  # POT path (unequal sizes)
    ref_sq = ot.emd2(np.full(40, 1 / 40), np.full(40, 1 / 40), ot.dist(x, x[::-1] + 0.3))
    assert abs(exact_w2(x, x[::-1] + 0.3) ** 2 - ref_sq) < 1e-9  # assignment path (equal sizes)


def test_entropic_ot_gradient_matches_finite_differences():
    torch.manual_seed(0)
    x = torch.randn(30, 2, dtype=torch.float64)
    y = torch.randn(30, 2, dtype=torch.float64) + 1
    xr = x.clone().requires_grad_(True)
    sinkhorn_divergence(xr, y, blur=0.3, scaling=0.7).backward()
    eps = 1e-5
    for i, j in [(3, 1), (10, 0)]:
        d = torch.zeros_like(x)
        d[i, j] = eps
        fd = (sinkhorn_divergence(x + d, y, 0.3, 0.7) - sinkhorn_divergence(x - d, y, 0.3, 0.7)) / (2 * eps)
        assert abs(float(xr.grad[i, j]) - float(fd)) < 2e-3 * max(1.0, abs(float(fd)))
    # symmetric problem: OT_ε(x, x) value is the sum of the dual potentials' means
    assert float(entropic_ot(x, x, 0.3)) < float(entropic_ot(x, y, 0.3))


def test_induced_cost_bounds_exact_w2():
    torch.manual_seed(0)
    x, y = torch.randn(50, 2), torch.randn(50, 2) * 1.3 + 0.4
    assert float(induced_step_cost(x, y)) >= exact_w2(x, y) ** 2 - 1e-6
    shift = torch.tensor([0.7, -0.2])
    assert abs(float(induced_step_cost(x, x + shift)) - exact_w2(x, x + shift) ** 2) < 1e-5
    assert abs(float(induced_step_cost(x, x + shift)) - float(shift @ shift)) < 1e-5


def test_piecewise_baselines_on_a_translation():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(200, 2))
    snaps = {0.0: a, 1.0: a + np.array([4.0, 0.0])}
    mid = ot_interpolate(snaps, 0.25, n=200)
    assert np.allclose(mid.mean(0), a.mean(0) + [1.0, 0.0], atol=1e-6)
    assert exact_w2(mid, a + [1.0, 0.0]) < 1e-6
    sb = sb_interpolate(snaps, 0.5, sigma=0.1, n=200)
    assert abs(sb[:, 0].mean() - (a[:, 0].mean() + 2.0)) < 0.1
    with pytest.raises(ValueError, match="strictly inside"):
        ot_interpolate(snaps, 1.0)
    paths = sb_paths(a[:100], a[:100] + [4.0, 0.0], 0.1, 5)
    assert paths.shape == (6, 100, 2)
    assert np.allclose(paths[-1].mean(0), a[:100].mean(0) + [4.0, 0.0], atol=0.15)


def test_sampler_push_moves_block_s_only():
    torch.manual_seed(0)
    bridge = CWGBridge(2, CWGConfig(n_blocks=4, hidden=4))
    x0 = torch.randn(10, 2)
    p = sampler_push(bridge, x0, 2, [0.0, 2.5], 1.0)
    assert torch.allclose(p[1], x0) and torch.allclose(p[2], torch.tensor([0.0, 2.5]).expand(10, 2))
    assert torch.allclose(p[4], p[2])  # identity blocks downstream


def test_obstacle_potential_and_inside():
    pot = ObstaclePotential([0.0, 1.0], radius=0.5, cost=50.0, tau=0.05)
    pts = torch.tensor([[0.0, 1.0], [0.0, 3.0]])
    u = pot(pts)
    assert u[0] > 49 and u[1] < 1e-6
    assert pot.inside(pts.numpy()).tolist() == [True, False]


def test_damped_simulation_matches_friction_law():
    # mean x(t) = -4 + (v0/γ*)(1 - e^{-γ* t}) for Ẍ = -γ* Ẋ
    cfg = TaskAConfig(noise=0.0)
    x = simulate_damped(cfg, 2000, 0.5, np.random.default_rng(0))
    want = -4 + 10 / 4 * (1 - np.exp(-4 * 0.5))
    assert abs(x[:, 0].mean() - want) < 0.05  # Euler (dt = 1/200) bias ≈ 0.03
    snaps = task_a_snapshots(TaskAConfig(n_per_snapshot=50), 3)
    assert sorted(snaps) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0] and snaps[0.6].shape == (50, 2)
    again = task_a_snapshots(TaskAConfig(n_per_snapshot=50), 3)
    assert all(np.array_equal(snaps[t], again[t]) for t in snaps)


def test_imf_solver_reduces_terminal_error():
    torch.manual_seed(0)
    src, tgt = _gauss([-2.0, 0.0]), _gauss([2.0, 0.0])
    imf = IMFBridge(2, sigma=0.1, hidden=16, n_sde=10)
    gen = torch.Generator().manual_seed(1)
    x0 = src(200, gen)
    before = exact_w2(imf.sample(x0, gen), tgt(200, gen))
    imf.fit(src, tgt, n_outer=1, inner_steps=150, n_particles=64, lr=3e-3)
    after = exact_w2(imf.sample(x0, gen), tgt(200, gen))
    assert after < 0.5 * before


def test_benchmark_functions_run_tiny():
    from iclr26.ncgsb.bench import step_time_slope, time_to_w2

    res = time_to_w2(0, FitConfig(steps=20, n_particles=32), imf_budget_outer=2, imf_inner=10, n_eval=50)
    assert res["cwg_cpu_s"] > 0 and len(res["imf_w2_curve"]) >= 1 and np.isfinite(res["cwg_terminal_w2"])
    sl = step_time_slope(ns=(16, 32), steps=2)
    assert len(sl["seconds_per_step"]) == 2 and np.isfinite(sl["loglog_slope"])


def test_geo_ramp_two_stage_schedule():
    from iclr26.ncgsb.bridge import geo_ramp

    assert geo_ramp(0, 30, 0.1) == pytest.approx(0.1)
    assert geo_ramp(15, 30, 0.1) == pytest.approx(0.55)
    assert geo_ramp(30, 30, 0.1) == 1.0 and geo_ramp(400, 30, 0.1) == 1.0


def test_push_calibrated_to_the_target_error():
    from iclr26.ncgsb.baselines import calibrate_push

    torch.manual_seed(0)
    bridge = CWGBridge(2, CWGConfig(n_blocks=4, hidden=8))
    for blk in bridge.blocks:
        torch.nn.init.normal_(blk[-1].weight, std=0.2)
    x0, y = torch.randn(50, 2), torch.tensor([0.0, 2.5])
    err0 = float((bridge.path(x0)[2] - y).norm(dim=-1).mean())
    alpha = calibrate_push(0.4, err0)
    pushed = sampler_push(bridge, x0, 2, y, alpha)
    assert float((pushed[2] - y).norm(dim=-1).mean()) == pytest.approx(0.4, rel=1e-5)
    assert calibrate_push(5.0, 1.0) == 0.0


def test_guidance_term_value_in_both_modes():
    x = [torch.zeros(4, 2), torch.ones(4, 2), 2 * torch.ones(4, 2)]
    y = torch.tensor([2.0, 1.0])
    act = CWGBridge(2, CWGConfig(n_blocks=2, hidden=4, mode="action"))
    # action: λ_G·mean‖y − X^s‖²·h with s = 1: ‖(1, 0)‖² = 1, h = 1/2
    assert float(act.guidance(x, lambda z: z, y, 1, 3.0)) == pytest.approx(3.0 * 1.0 * 0.5)
    jac = CWGBridge(2, CWGConfig(n_blocks=2, hidden=4, mode="jacobi"))
    # jacobi: λ_G·mean‖y − X^s‖²·W_s with W_2 = |2 − 1|²·2 = 2 at s = 2: ‖(0, −1)‖² = 1
    assert float(jac.guidance(x, lambda z: z, y, 2, 3.0)) == pytest.approx(3.0 * 1.0 * 2.0)


def test_sb_interpolation_coupling_sharpens_with_short_gaps():
    # ε = 2σ²Δt: over a short gap between two copies of a cloud the SB coupling is nearly the identity
    g = np.arange(6.0)
    a = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)  # unit grid: blur √(2σ²Δt) = 0.07 ≪ spacing
    mid = sb_interpolate({0.0: a, 0.01: a, 1.0: a}, 0.005, sigma=0.5, n=36)
    assert exact_w2(mid, a) < 0.1
