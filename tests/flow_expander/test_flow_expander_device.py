"""Device and dtype propagation: every tensor the flow / adjoint / FE code creates follows its inputs.

No GPU is needed: under ``torch.set_default_device("meta")`` any tensor created without an explicit
device lands on the meta device, and mixing it with the CPU model's tensors raises. A float64 model
must give float64 samples and trajectories (a float32 tensor created inside would fail in nn.Linear).
"""

import pytest
import torch

from iclr26.flow_expander.adjoint_matching import AMConfig
from iclr26.flow_expander.expander import flow_expansion, method_config
from iclr26.flow_expander.flow import FMConfig, VelocityMLP, pretrain_flow_matching, sample_memoryless, sample_ode
from iclr26.flow_expander.verifiers import EllipseVerifier, MinDistanceVerifier

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TINY = AMConfig(n_traj=16, steps=6, n_datasets=1, grad_steps=2, batch_size=64)


def _run_all(model, data):
    pretrain_flow_matching(model, data, FMConfig(steps=3, batch_size=16), seed=0)
    cfg = method_config("L-FE", K=1, beta=0.5, eta=1.0, expand_am=TINY, project_am=TINY)
    res = flow_expansion(model, EllipseVerifier(), cfg, seed=0)
    traj, times = sample_memoryless(res.model, 8, 2, 5, torch.Generator().manual_seed(0))
    return res.model, sample_ode(res.model, 8, 2, 5, torch.Generator().manual_seed(0)), traj, times


def test_no_tensor_is_created_on_the_default_device():
    torch.manual_seed(0)
    model = VelocityMLP(2, 16, 2)  # built on the CPU, like its data
    data, pos = torch.randn(64, 2), torch.randn(4, 6)
    torch.set_default_device("meta")
    try:
        fine, x, traj, times = _run_all(model, data)
        assert MinDistanceVerifier(2, 0.5).hard(pos).device.type == "cpu"
    finally:
        torch.set_default_device(None)
    assert x.device.type == "cpu" and traj.device.type == "cpu" and times.device.type == "cpu"
    assert all(p.device.type == "cpu" for p in fine.parameters())


def test_float64_model_gives_float64_everywhere():
    torch.manual_seed(0)
    model = VelocityMLP(2, 16, 2).double()
    fine, x, traj, times = _run_all(model, torch.randn(64, 2, dtype=torch.float64))
    assert x.dtype == traj.dtype == times.dtype == torch.float64
    assert all(p.dtype == torch.float64 for p in fine.parameters())
    assert torch.isfinite(x).all()


def test_same_seed_same_numbers():
    data = torch.randn(64, 2)
    torch.manual_seed(0)
    a = _run_all(VelocityMLP(2, 16, 2), data)[1]
    torch.manual_seed(0)
    b = _run_all(VelocityMLP(2, 16, 2), data)[1]
    assert torch.equal(a, b)
