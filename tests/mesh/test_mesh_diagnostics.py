"""Hand-checkable values and invariances of the loop diagnostics."""

import pytest
import torch

from iclr26.mesh.diagnostics import (
    cka_linear,
    cka_rbf,
    effective_rank,
    loop_diagnostics,
    normalized_singular_values,
    relative_update,
)
from iclr26.mesh.model import MeshConfig, RecursiveNeoX


def _x(t=20, d=8, seed=0):
    return torch.randn(t, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_relative_update_values():
    h = _x()
    assert relative_update(h, h) == 0.0
    assert abs(relative_update(h, -h) - 2.0) < 1e-12
    assert abs(relative_update(h, 3 * h) - 2 * 2 / 4) < 1e-12  # 2*||2h|| / (||3h|| + ||h||) = 1
    batch = torch.stack([h, 2 * h])
    assert abs(relative_update(batch, torch.stack([h, -2 * h])) - 1.0) < 1e-12  # mean of 0 and 2


def test_cka_identity_and_invariances():
    x = _x()
    q, _ = torch.linalg.qr(torch.randn(8, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    for cka in (cka_linear, cka_rbf):
        assert abs(cka(x, x) - 1.0) < 1e-9
        assert abs(cka(x, 3.0 * x @ q) - 1.0) < 1e-9  # orthogonal map + isotropic scaling
    y = _x(seed=5)
    assert cka_linear(x, y) < 0.9 and cka_rbf(x, y) < 0.9
    # linear CKA is not invariant to an anisotropic rescaling, so this must differ from 1
    assert cka_linear(x, x * torch.tensor([10.0] + [1.0] * 7, dtype=torch.float64)) < 0.99


def test_cka_hand_computed_linear():
    # centred X with orthogonal columns of norms 2 and 1; Y = first column only
    x = torch.tensor([[1.0, 0.5], [-1.0, 0.5], [1.0, -0.5], [-1.0, -0.5]], dtype=torch.float64)
    y = x[:, :1]
    # ||Y^T X||^2 = 16; ||X^T X||_F = sqrt(16 + 1); ||Y^T Y||_F = 4 -> 16 / (4 sqrt 17)
    assert abs(cka_linear(x, y) - 16 / (4 * 17**0.5)) < 1e-12


def test_singular_values_and_effective_rank():
    x = _x(t=30, d=10)
    s = normalized_singular_values(x, k=50)
    assert len(s) == 10 and abs(s[0].item() - 1) < 1e-6 and bool((s[1:] <= s[:-1] + 1e-7).all())
    r1 = torch.outer(torch.arange(1.0, 31.0), torch.ones(10)).double()
    assert normalized_singular_values(r1)[1].item() < 1e-6
    assert abs(effective_rank(r1) - 1.0) < 1e-6
    assert abs(effective_rank(torch.eye(6, dtype=torch.float64)) - 6.0) < 1e-9
    assert 1.0 < effective_rank(x) <= 10.0


def test_loop_diagnostics_shapes_and_vanilla_error():
    cfg = MeshConfig(vocab_size=30, d_model=16, n_heads=2, layout="1+1R3+1", scheme="mesh", max_seq_len=32)
    m = RecursiveNeoX(cfg)
    x = torch.randint(0, 30, (3, 12), generator=torch.Generator().manual_seed(0))
    d = loop_diagnostics(m, x)
    assert len(d["update_loops"]) == 3 and len(d["cka_consecutive"]) == 3
    assert d["update_balance"] >= 1.0
    assert len(d["effective_rank"]) == len(d["state_names"]) == 6  # h_emb, h0..h3, h_coda
    assert len(d["router_write"]) == 4 and abs(sum(d["router_read"][0]) - 1) < 1e-5
    assert m.training  # restored
    with pytest.raises(ValueError):
        loop_diagnostics(
            RecursiveNeoX(MeshConfig(vocab_size=30, d_model=16, n_heads=2, layout="3", scheme="base", max_seq_len=32)),
            x,
        )
