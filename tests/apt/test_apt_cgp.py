"""CGP (RCG gates, BPS, FRF) and the Sec. 3.3 regularisers."""

import math

import pytest
import torch

from iclr26.apt import CGP, APTEmbedding, apt_regularizers
from iclr26.apt.apt import gate_entropy, orthogonality

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _cgp(**kw):
    torch.manual_seed(0)
    return CGP(8, 6, num_basis=4, prompt_len=3, rcg_hidden=10, frf_hidden=12, **kw)


def test_softmax_gates_nonnegative_and_sum_to_one():
    g = _cgp().gates(torch.randn(5, 8), torch.randn(5, 6))
    assert g.shape == (5, 4) and (g >= 0).all()
    assert torch.allclose(g.sum(-1), torch.ones(5), atol=1e-6)
    s = _cgp(gate="sigmoid").gates(torch.randn(5, 8), torch.randn(5, 6))
    assert ((s > 0) & (s < 1)).all() and not torch.allclose(s.sum(-1), torch.ones(5))


def test_one_hot_gate_gives_basis_mean_and_bps_is_linear():
    c = _cgp()
    for i in range(4):
        w = torch.zeros(1, 4)
        w[0, i] = 1
        assert torch.allclose(c.synthesize(w, layernorm=False)[0], c.bases[i].mean(0), atol=1e-6)
    w1, w2 = torch.rand(3, 4), torch.rand(3, 4)
    lhs = c.synthesize(2.0 * w1 - 0.5 * w2, layernorm=False)
    rhs = 2.0 * c.synthesize(w1, layernorm=False) - 0.5 * c.synthesize(w2, layernorm=False)
    assert torch.allclose(lhs, rhs, atol=1e-6)
    ln = c.synthesize(w1)  # paper: LayerNorm after the mean
    assert torch.allclose(ln.mean(-1), torch.zeros(3), atol=1e-5)
    assert _cgp(bps_layernorm=False).norm is None


def test_cgp_runs_for_unseen_concepts_and_gradients_skip_e_static():
    c = _cgp()
    e_new = torch.randn(3, 8)  # embeddings of concepts never seen in training
    out, w = c(e_new, torch.randn(3, 6))
    assert out.shape == (3, 8) and w.shape == (3, 4)
    out.sum().backward()
    assert e_new.grad is None and c.bases.grad is not None and c.rcg[0].weight.grad is not None


def test_orthogonality_zero_for_orthogonal_bases_positive_otherwise():
    eye = torch.eye(12).reshape(4, 3, 12)  # every token of every basis is a distinct unit vector
    assert orthogonality(eye).item() == 0.0
    b = eye.clone()
    b[1, 0] = b[0, 0]  # basis 1 shares a token direction with basis 0: one inner product of 1
    assert orthogonality(b).item() == pytest.approx(1.0)
    assert orthogonality(torch.randn(4, 3, 12)).item() > 0


def test_entropy_zero_for_one_hot_log_n_for_uniform():
    assert gate_entropy(torch.eye(4)).item() == pytest.approx(0.0, abs=1e-6)
    assert gate_entropy(torch.full((3, 4), 0.25)).item() == pytest.approx(math.log(4), abs=1e-6)


def test_regularizer_zero_cases_and_weighting():
    m = APTEmbedding(torch.randn(3, 4), 2, hidden=5)
    e = torch.randn(6, 4)
    terms = apt_regularizers(m, e, e.clone())
    assert terms["distill"].item() == 0.0
    assert terms["prompt_det"].item() == pytest.approx(m.prompt_det.pow(2).sum().item())
    terms = apt_regularizers(m, e, e + 1.0)
    assert terms["distill"].item() == pytest.approx(4.0)  # E‖ẽ − e‖² = D·1²
    uniform = apt_regularizers(m, gates=torch.full((5, 4), 0.25))
    assert uniform["kl_prior"].item() == pytest.approx(0.0, abs=1e-6)
    peaked = apt_regularizers(m, gates=torch.tensor([[1.0, 0, 0, 0]] * 5))
    assert peaked["kl_prior"].item() == pytest.approx(math.log(4), abs=1e-5)
    c = _cgp()
    t = apt_regularizers(c)
    assert t["bases"].item() == pytest.approx(c.bases.pow(2).sum().item(), rel=1e-5)
    assert t["total"].item() == pytest.approx(1e-4 * t["bases"].item() + 1e-3 * t["orth"].item(), rel=1e-5)
    with pytest.raises(ValueError, match="both"):
        apt_regularizers(m, e, None)
