"""References, gradient flow and metrics of the contact Wasserstein geodesic bridge on tiny hand-made clouds."""

import math

import numpy as np
import pytest
import torch

from iclr26.ncgsb.bridge import (
    CWGBridge,
    displacement_fraction,
    geodesic_loss,
    kde_score,
    kinetic_per_block,
    phi_gamma,
    step_costs,
)
from iclr26.ncgsb.config import CWGConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# ---- references ---------------------------------------------------------------------------------


def test_step_costs_pair_consecutive_clouds():
    x0 = torch.tensor([[0.0], [0.0]])
    x1 = torch.tensor([[1.0], [3.0]])  # step 1: mean(1, 9) = 5
    x2 = torch.tensor([[1.0], [2.0]])  # step 2: mean(0, 1) = 0.5
    assert torch.allclose(step_costs([x0, x1, x2]), torch.tensor([5.0, 0.5]))


def test_discount_weights_each_step_at_its_end_time():
    # K = 2, h = 1/2, action: sum_k e^{gamma t_k} W_k / (2h), t_k = k/2 for k = 1, 2
    early, late = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    z = torch.zeros(2)
    assert geodesic_loss(early, z, 1.0).item() == pytest.approx(math.exp(0.5), rel=1e-6)
    assert geodesic_loss(late, z, 1.0).item() == pytest.approx(math.exp(1.0), rel=1e-6)
    # gamma > 0 makes late movement costlier (motion front-loaded), gamma < 0 the reverse
    assert geodesic_loss(late, z, -1.0) < geodesic_loss(early, z, -1.0)
    states = torch.tensor([2.0, 0.0])  # h * F at step 1 only
    assert geodesic_loss(z, states, 1.0).item() == pytest.approx(math.exp(0.5) * 0.5 * 2.0, rel=1e-6)
    jac = geodesic_loss(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 0.0]), 0.0, "jacobi", energy_level=1.0)
    assert jac.item() == pytest.approx((1 + 3) * 1 + (1 + 0) * 2, rel=1e-6)


def _bridge(**kw):
    torch.manual_seed(0)
    br = CWGBridge(1, CWGConfig(n_blocks=3, hidden=4, **kw)).double()
    with torch.no_grad():  # move off the zero-initialised heads (identity blocks have zero geodesic gradient)
        for blk in br.blocks:
            blk[-1].weight.normal_(0.0, 0.5)
            blk[-1].bias.normal_(0.0, 0.5)
    return br


def test_guidance_reads_the_cloud_at_its_own_block():
    br = _bridge(mode="jacobi")
    x0 = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    path = [x0, x0 + 1, x0 + 3, x0 + 6]
    y = torch.zeros(1, dtype=torch.float64)
    # block 2: err = mean((x0+3)^2) = (9 + 16)/2; jacobi multiplies by the step cost W_2 = |3 - 1|^2 = 4
    g = br.guidance(path, lambda x: x, y, 2, 0.5)
    assert g.item() == pytest.approx(0.5 * 12.5 * 4.0)
    br_a = _bridge(mode="action")
    assert br_a.guidance(path, lambda x: x, y, 2, 0.5).item() == pytest.approx(0.5 * 12.5 / 3)


# ---- gradient flow -------------------------------------------------------------------------------
# term                       | blocks 1..k | blocks k+1..K
# marginal at snapshot k     | nonzero     | exactly zero
# geodesic (every step)      | nonzero     | nonzero
# KDE bandwidth (Silverman)  | no gradient through the bandwidth (x.detach())


def _block_grads(loss, br):
    grads = torch.autograd.grad(loss, list(br.parameters()), allow_unused=True)
    per_block, i = [], 0
    for block in br.blocks:
        n = len(list(block.parameters()))
        per_block.append(sum(0.0 if g is None else float(g.abs().sum()) for g in grads[i : i + n]))
        i += n
    return per_block


def test_marginal_at_snapshot_trains_only_the_blocks_before_it():
    br = _bridge(lambda_geo=0.0)
    x0 = torch.randn(6, 1, dtype=torch.float64)
    loss, _ = br.loss(x0, {1: torch.randn(6, 1, dtype=torch.float64) + 2})
    g = _block_grads(loss, br)
    assert g[0] > 0 and g[1] == 0.0 and g[2] == 0.0
    loss_geo = br.geodesic(br(x0))
    assert all(v > 0 for v in _block_grads(loss_geo, br))


def test_kde_bandwidth_is_a_constant_for_the_gradient():
    x = torch.tensor([[0.0], [0.3], [1.5], [1.6]], dtype=torch.float64, requires_grad=True)
    n, d = x.shape
    bw = float(x.detach().std(0).mean()) * (4.0 / ((d + 2) * n)) ** (1.0 / (d + 4)) + 1e-6
    (g_auto,) = torch.autograd.grad((kde_score(x) ** 2).sum(), x)
    (g_fixed,) = torch.autograd.grad((kde_score(x, bw) ** 2).sum(), x)
    assert torch.allclose(g_auto, g_fixed, atol=1e-10)


# ---- metrics -------------------------------------------------------------------------------------


def test_kinetic_per_block_hand_computed():
    path = torch.tensor([[[0.0], [0.0]], [[1.0], [3.0]], [[1.0], [2.0]]])  # K = 2
    assert np.allclose(kinetic_per_block(path), [5.0 * 4, 0.5 * 4])


def test_displacement_fraction_hand_computed_on_a_front_loaded_path():
    path = torch.tensor([[[1.0, 1.0]], [[2.5, 1.0]], [[2.8, 1.6]], [[3.0, 1.0]]])  # total displacement (2, 0)
    assert np.allclose(displacement_fraction(path), [0.0, 0.75, 0.9, 1.0])


def test_phi_gamma_is_front_loaded_for_positive_gamma():
    g = 2.0
    assert phi_gamma(g, 0.25) == pytest.approx((1 - math.exp(-0.5)) / (1 - math.exp(-2.0)))
    assert phi_gamma(-g, 0.25) < 0.25 < phi_gamma(g, 0.25)
    assert phi_gamma(0.0, 0.25) == 0.25


def test_block_index_rounds_snapshot_time():
    br = _bridge()
    assert [br.block_index(t) for t in (0.0, 0.3, 0.5, 0.7, 1.0)] == [0, 1, 2, 2, 3]
