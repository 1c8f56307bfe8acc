"""References, gradient flow and metrics of the graph latent diffusion (DualDiff, its autoencoder) on tiny inputs."""

import pytest
import torch

from iclr26.graph_ldm.autoencoder import assign, cosine_logits, masked_cluster_mean
from iclr26.graph_ldm.config import MethodConfig
from iclr26.graph_ldm.dualdiff import DualDiff, masked_labels, process_at

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SMALL = MethodConfig(d_model=16, n_layers=1, n_heads=2)


def _model(mode="dual", d=2, K=2, **kw):
    torch.manual_seed(0)
    cfg = MethodConfig(d_model=16, n_layers=1, n_heads=2, **kw)
    return DualDiff(d, K, cfg, mode)


# ---- references ---------------------------------------------------------------------------------


def test_film_uses_the_gamma_beta_of_each_nodes_own_cluster():
    m = _model()
    with torch.no_grad():
        m.film.weight.zero_()
        # (gamma - 1, beta) = Linear(Z_g^j): gamma_j - 1 = Z_g^j[0] (both dims), beta_j = Z_g^j[1] (both dims)
        m.film.weight[0, 0] = m.film.weight[1, 0] = 1.0
        m.film.weight[2, 1] = m.film.weight[3, 1] = 1.0
    est_g = torch.tensor([[[1.0, 0.0], [0.0, 3.0]]])  # cluster 0: gamma 2, beta 0; cluster 1: gamma 1, beta 3
    est_l = torch.tensor([[[2.0, 0.1], [0.1, 5.0], [1.0, 0.0]]])  # nodes assigned 0, 1, 0
    mask, gmask = torch.ones(1, 3, dtype=torch.bool), torch.ones(1, 2, dtype=torch.bool)
    assert assign(est_l, est_g, gmask).tolist() == [[0, 1, 0]]
    out = m.film_condition(est_l, est_g, mask, gmask)
    expect = torch.tensor([[[4.0, 0.2], [3.1, 8.0], [2.0, 0.0]]])
    assert torch.allclose(out, expect)


def test_l2g_condition_concatenates_global_estimate_then_local_summary():
    m = _model()
    est_l, est_g = torch.randn(1, 3, 2), torch.randn(1, 2, 2)
    mask, gmask = torch.ones(1, 3, dtype=torch.bool), torch.tensor([[True, False]])
    c = m.l2g_condition(est_l, est_g, mask, gmask)
    assert torch.allclose(c[0, 0, :2], est_g[0, 0])
    assert torch.allclose(c[0, 0, 2:], m.local_summary(est_l, est_g, mask, gmask)[0, 0])
    assert torch.all(c[0, 1] == 0)  # empty cluster: masked


def test_asymmetric_schedule_fires_process_ii_every_m_plus_one_steps():
    assert [process_at("dual", n, 2) for n in range(7)] == ["ii", "i", "i", "ii", "i", "i", "ii"]
    assert process_at("dual", 1, 2, "sym") == "both"
    assert (process_at("g2l", 0, 2), process_at("l2g", 1, 2)) == ("i", "ii")


def test_per_graph_process_routes_film_to_process_i_graphs_and_summary_to_process_ii_graphs():
    m = _model()
    with torch.no_grad():
        m.film.weight.normal_(0, 0.3)
        m.film.bias.normal_(0, 0.3)
    est_l, est_g = torch.randn(2, 3, 2), torch.randn(2, 2, 2)
    mask, gmask = torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 2, dtype=torch.bool)
    c_l, c_g = m.conditions(torch.tensor([True, False]), est_l, est_g, mask, gmask)
    film, l2g = m.film_condition(est_l, est_g, mask, gmask), m.l2g_condition(est_l, est_g, mask, gmask)
    assert torch.allclose(c_l[0], film[0]) and torch.all(c_l[1] == 0)
    assert torch.all(c_g[0] == 0) and torch.allclose(c_g[1], l2g[1])


# ---- gradient flow -------------------------------------------------------------------------------
# term / part                     | net_l | net_g | film | pool_lin / mp
# local loss, process (i)         | yes   | none  | yes  | none
# global loss, process (ii)       | none  | yes   | none | yes
# self-conditioning estimate      | no gradient (computed under torch.no_grad, as in EDM self-conditioning)


def _grads(m, process):
    torch.manual_seed(1)
    zl0, zg0 = torch.randn(2, 3, 2), torch.randn(2, 2, 2)
    mask, gmask = torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 2, dtype=torch.bool)
    m.train_process = lambda batch: process  # fixed process for the table
    with torch.no_grad():  # a non-identity FiLM so its gradient is informative
        m.film.weight.normal_(0, 0.3)
    total, _ = m.loss(zl0, zg0, mask, gmask)
    names = [n for n, _ in m.named_parameters()]
    gs = torch.autograd.grad(total, [p for _, p in m.named_parameters()], allow_unused=True)
    out = {}
    for n, g in zip(names, gs, strict=True):
        key = n.split(".")[0]
        out[key] = out.get(key, 0.0) + (0.0 if g is None else float(g.abs().sum()))
    return out


def test_gradient_table_per_process():
    g_i = _grads(_model(self_cond_prob=1.0), "i")
    assert g_i["net_l"] > 0 and g_i["film"] > 0 and g_i["net_g"] > 0
    assert g_i["pool_lin"] == 0.0 and g_i["mp_attn"] == 0.0  # process (ii) unused
    g_ii = _grads(_model(self_cond_prob=1.0), "ii")
    assert g_ii["pool_lin"] > 0 and g_ii["mp_attn"] > 0 and g_ii["film"] == 0.0


def test_self_conditioning_estimate_carries_no_gradient():
    m = _model(mode="self", self_cond_prob=1.0)
    calls = []
    for name in ("denoise_l", "denoise_g"):
        orig = getattr(m, name)

        def spy(*a, _orig=orig, _name=name):
            out = _orig(*a)
            calls.append((_name, out.requires_grad))
            return out

        setattr(m, name, spy)
    zl0, zg0 = torch.randn(2, 3, 2), torch.randn(2, 2, 2)
    mask, gmask = torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 2, dtype=torch.bool)
    total, _ = m.loss(zl0, zg0, mask, gmask)
    # first the self-conditioning estimates (no graph), then the trained predictions (with graph)
    assert calls == [("denoise_l", False), ("denoise_g", False), ("denoise_l", True), ("denoise_g", True)]
    assert total.requires_grad


# ---- metrics -------------------------------------------------------------------------------------


def test_masked_cluster_mean_on_unequal_clusters_with_padding():
    z = torch.tensor([[[1.0], [3.0], [8.0], [100.0]]])
    labels = torch.tensor([[0, 0, 1, -1]])  # node 3 is padding
    zg, nonempty = masked_cluster_mean(z, labels, 3)
    assert torch.allclose(zg[0, :, 0], torch.tensor([2.0, 8.0, 0.0]))
    assert nonempty.tolist() == [[True, True, False]]
    assert masked_labels(torch.tensor([[2, 1]]), torch.tensor([[True, False]])).tolist() == [[2, -1]]


def test_assignment_is_by_cosine_and_skips_empty_clusters():
    zl = torch.tensor([[[10.0, 1.0]]])
    zg = torch.tensor([[[1.0, 0.0], [5.0, 5.0], [10.0, 1.0]]])
    # cosine prefers cluster 0 over the nearer-in-distance cluster 1; cluster 2 (identical) is empty
    gmask = torch.tensor([[True, True, False]])
    assert assign(zl, zg, gmask).tolist() == [[0]]
    assert torch.isinf(cosine_logits(zl, zg, gmask)[0, 0, 2])
