"""Clustering, pooling, equivariance, EDM, conditioning modes, FiLM, schedule and decoder of DualDiff."""

import math

import networkx as nx
import numpy as np
import pytest
import torch
from sklearn.metrics import adjusted_rand_score

from iclr26.graph_ldm.autoencoder import GraphAE, assign, masked_cluster_mean
from iclr26.graph_ldm.clustering import cluster_graph, kmeans_coords, spectral_clusters
from iclr26.graph_ldm.config import AEConfig, MethodConfig
from iclr26.graph_ldm.data import community_small, spectral_pe, to_dense
from iclr26.graph_ldm.dualdiff import DualDiff, global_local_mismatch, process_at
from iclr26.graph_ldm.edm import heun_sample, loss_weight, precondition, sigma_schedule

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SMALL = MethodConfig(d_model=16, n_layers=1, n_heads=2)


def _model(mode="dual", d=4, K=2, cfg=SMALL):
    torch.manual_seed(0)
    return DualDiff(d, K, cfg, mode)


# ---- 1. clustering --------------------------------------------------------------------------------
def test_spectral_recovers_two_disjoint_cliques():
    g = nx.disjoint_union(nx.complete_graph(5), nx.complete_graph(7))
    perm = np.random.default_rng(0).permutation(12)
    a = nx.to_numpy_array(g)[np.ix_(perm, perm)]
    labels = spectral_clusters(a, 2)
    truth = (perm >= 5).astype(int)
    assert adjusted_rand_score(truth, labels) == 1.0
    assert labels[0] == 0  # canonical: first node's cluster is 0


def test_spectral_recovers_sbm_without_cross_edges():
    g = nx.stochastic_block_model([6, 8, 7], [[0.9, 0, 0], [0, 0.9, 0], [0, 0, 0.9]], seed=3)
    truth = np.repeat([0, 1, 2], [6, 8, 7])
    assert adjusted_rand_score(truth, cluster_graph(nx.to_numpy_array(g), 3)) == 1.0


def test_kmeans_coords_separates_far_clouds_and_small_graphs():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(size=(6, 3)), rng.normal(size=(5, 3)) + 50])
    assert adjusted_rand_score(np.repeat([0, 1], [6, 5]), kmeans_coords(x, 2)) == 1.0
    assert list(spectral_clusters(np.zeros((2, 2)), 3)) == [0, 1]  # fewer nodes than K: one cluster per node
    with pytest.raises(ValueError, match="coordinates"):
        cluster_graph(np.zeros((4, 4)), 2, "kmeans_coords")


# ---- 2. pooling ----------------------------------------------------------------------------------
def test_zg_is_cluster_mean_and_empty_clusters_masked():
    z = torch.randn(1, 5, 3)
    labels = torch.tensor([[0, 1, 0, 0, -1]])
    zg, gmask = masked_cluster_mean(z, labels, 3)
    assert torch.allclose(zg[0, 0], z[0, [0, 2, 3]].mean(0))
    assert torch.allclose(zg[0, 1], z[0, 1])
    assert gmask.tolist() == [[True, True, False]]


def test_spectral_pe_rebuilds_adjacency():
    """Σ_k sign(λ_k) (u_k √|λ_k|)(u_k √|λ_k|)ᵀ = A when every eigenpair is kept; padding rows are zero."""
    g = community_small(1, 4)[0]
    n = g.number_of_nodes()
    dense = to_dense([g], n + 2)
    a = dense.adj[0].double()
    pe = spectral_pe(dense.adj, n + 2)[0].double()  # k = padded size: each eigenpair exactly once
    signs = torch.sign(torch.einsum("ik,ij,jk->k", pe, a, pe))  # Rayleigh quotient has the sign of λ_k
    assert torch.allclose(pe @ torch.diag(signs) @ pe.T, a, atol=1e-5)
    assert (pe[n:] == 0).all()
    assert (spectral_pe(dense.adj, 4)[0, :, :2] != 0).any()


def test_encoder_permutation_equivariant_and_zg_invariant():
    """GIN + random-walk inputs are exactly equivariant (eigen-coordinates only up to eigenvector signs)."""
    torch.manual_seed(0)
    ae = GraphAE(AEConfig(hidden=16, spectral_pe=0))
    g = community_small(1, 0)[0]
    a = torch.tensor(nx.to_numpy_array(g), dtype=torch.float32)
    n = a.shape[0]
    perm = torch.randperm(n)
    mask = torch.ones(1, n, dtype=torch.bool)
    z = ae.encode(a[None], mask)
    zp = ae.encode(a[perm][:, perm][None], mask)
    assert torch.allclose(zp[0], z[0, perm], atol=1e-5)
    lab = torch.from_numpy(cluster_graph(a.numpy(), 2))[None]
    labp = torch.from_numpy(cluster_graph(a[perm][:, perm].numpy(), 2))[None]
    zg, _ = masked_cluster_mean(z, lab, 2)
    zgp, _ = masked_cluster_mean(zp, labp, 2)
    assert torch.allclose(zg.sort(1).values, zgp.sort(1).values, atol=1e-5) or torch.allclose(
        zg, zgp.flip(1), atol=1e-5
    )


# ---- 3. equivariance and padding -----------------------------------------------------------------
@pytest.mark.parametrize("branch", ["l", "g"])
def test_denoisers_permutation_equivariant_and_blind_to_padding(branch):
    m = _model(K=5)
    torch.manual_seed(1)
    T, d = 5, 4
    x = torch.randn(2, T + 2, d)
    cond = torch.randn(2, T + 2, d if branch == "l" else 2 * d)
    mask = torch.zeros(2, T + 2, dtype=torch.bool)
    mask[:, :T] = True
    sigma = torch.tensor([0.5, 3.0])
    fn = m.denoise_l if branch == "l" else m.denoise_g
    out = fn(x, sigma, cond, mask)
    perm = torch.cat([torch.randperm(T), torch.arange(T, T + 2)])
    outp = fn(x[:, perm], sigma, cond[:, perm], mask)
    assert torch.allclose(outp, out[:, perm], atol=1e-5)
    x2, c2 = x.clone(), cond.clone()
    x2[:, T:] = 100.0
    c2[:, T:] = -7.0
    out2 = fn(x2, sigma, c2, mask)
    assert torch.allclose(out2[:, :T], out[:, :T], atol=1e-5)
    assert (out2[:, T:] == 0).all()


# ---- 4. EDM --------------------------------------------------------------------------------------
def test_edm_limits_and_loss_weight():
    c_skip, c_out, c_in, c_noise = precondition(torch.tensor([1e-6, 1.0, 80.0]), 1.0)
    assert c_skip[0] == pytest.approx(1.0, abs=1e-9) and c_out[0] == pytest.approx(0.0, abs=1e-5)
    assert c_skip[1] == pytest.approx(0.5) and c_out[1] == pytest.approx(1 / math.sqrt(2))
    assert c_in[1] == pytest.approx(1 / math.sqrt(2)) and c_noise[2] == pytest.approx(math.log(80) / 4)
    s = torch.tensor([0.3, 2.0])
    assert torch.allclose(loss_weight(s, 0.5), (s**2 + 0.25) / (s * 0.5) ** 2)
    # λ c_out² = 1: the effective weight on F's output error is one at every σ (EDM Sec. 5)
    assert torch.allclose(loss_weight(s, 0.5) * precondition(s, 0.5)[1] ** 2, torch.ones(2))


def test_sigma_schedule():
    s = sigma_schedule(10, 0.002, 80.0, 7.0)
    assert len(s) == 11 and s[0] == pytest.approx(80.0) and s[-2] == pytest.approx(0.002) and s[-1] == 0
    assert (s[1:] < s[:-1]).all()
    mid = (80 ** (1 / 7) + 0.5 * (0.002 ** (1 / 7) - 80 ** (1 / 7))) ** 7
    assert sigma_schedule(3, 0.002, 80.0, 7.0)[1] == pytest.approx(mid)


def test_heun_with_oracle_denoiser_recovers_x0():
    x0 = [torch.randn(3, 4), torch.randn(2, 5)]
    sig = sigma_schedule(12, 0.002, 80.0, 7.0)
    init = [float(sig[0]) * torch.randn_like(t) for t in x0]
    out = heun_sample(lambda xs, s, n: x0, init, sig)
    for a, b in zip(out, x0):
        assert torch.allclose(a, b, atol=1e-5)


def test_heun_second_order_on_linear_ode():
    """D(x; σ) = x / (1 + σ²) is the exact denoiser of x0 ~ N(0, 1): x(σ) = x_T √(1+σ²)/√(1+σ_T²).

    Halving the step size must cut the error about four-fold (2nd order; Euler would halve it)."""
    exact = 80.0 / math.sqrt(1 + 80.0**2)
    errs = []
    for steps in (20, 40):
        x = [torch.tensor([80.0], dtype=torch.float64)]
        out = heun_sample(lambda xs, s, n: [xs[0] / (1 + s**2)], x, sigma_schedule(steps, 0.002, 80.0, 7.0))
        errs.append(abs(out[0].item() - exact))
    assert errs[1] < 0.01 and errs[0] / errs[1] > 3.0


# ---- 5. conditioning modes -----------------------------------------------------------------------
def _latents(B=6, N=7, d=4, K=2):
    torch.manual_seed(2)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, 5:] = False
    gmask = torch.ones(B, K, dtype=torch.bool)
    return torch.randn(B, N, d) * mask.unsqueeze(-1), torch.randn(B, K, d), mask, gmask


@pytest.mark.parametrize(("mode", "zero"), [("g2l", "g"), ("l2g", "l"), ("none", "both")])
def test_training_conditions_zero_where_required(mode, zero, monkeypatch):
    m = _model(mode, cfg=MethodConfig(d_model=16, n_layers=1, n_heads=2, self_cond_prob=1.0))
    seen = []
    orig = m.conditions

    def spy(process, *args):
        out = orig(process, *args)
        seen.append(out)
        return out

    monkeypatch.setattr(m, "conditions", spy)
    for _ in range(5):
        m.loss(*_latents())
    finals = seen[1::2] if mode != "none" else seen  # first call of each step: zero conditions for the estimate
    assert finals
    for c_l, c_g in finals:
        if zero in ("l", "both"):
            assert (c_l == 0).all()
        else:
            assert c_l.abs().sum() > 0
        if zero in ("g", "both"):
            assert (c_g == 0).all()
        else:
            assert c_g.abs().sum() > 0


def test_dual_mixes_both_processes():
    m = _model("dual")
    picks = torch.cat([m.train_process(1000) for _ in range(2)]).float()
    assert 0.45 < picks.mean() < 0.55
    assert m.p == 0.5 and _model("g2l").p == 1.0 and _model("l2g").p == 0.0


def test_none_local_output_ignores_global_and_self_has_no_cross_gradient():
    zl, zg, mask, gmask = _latents()
    sigma = torch.full((zl.shape[0],), 0.7)
    m = _model("none")
    a = m.denoise_l(zl, sigma, m.conditions("none", zl, zg, mask, gmask)[0], mask)
    b = m.denoise_l(zl, sigma, m.conditions("none", zl, zg * 5 + 1, mask, gmask)[0], mask)
    assert torch.equal(a, b)
    for mode, proc, expect_zero in [("self", "self", True), ("dual", "i", False)]:
        m = _model(mode)
        torch.nn.init.normal_(m.film.weight)  # non-identity FiLM so that (i) carries Ẑ_g0 into C_l
        est_g = zg.clone().requires_grad_(True)
        c_l, _ = m.conditions(proc, zl, est_g, mask, gmask)
        m.denoise_l(zl, sigma, c_l, mask).sum().backward()
        grad = est_g.grad if est_g.grad is not None else torch.zeros_like(zg)
        assert (grad.abs().sum() == 0) == expect_zero


def test_l2g_condition_depends_on_local_estimates():
    zl, zg, mask, gmask = _latents()
    m = _model("dual")
    c1 = m.conditions("ii", zl, zg, mask, gmask)[1]
    c2 = m.conditions("ii", zl * 2 + 0.3, zg, mask, gmask)[1]
    assert torch.equal(c1[..., :4], zg * gmask.unsqueeze(-1)) and not torch.allclose(c1[..., 4:], c2[..., 4:])


# ---- 6. FiLM ----------------------------------------------------------------------------------------
def test_film_identity_and_argmax_cosine_assignment():
    zl, zg, mask, gmask = _latents()
    m = _model("dual")  # zero-initialised FiLM: γ = 1, β = 0
    assert torch.allclose(m.film_condition(zl, zg, mask, gmask), zl * mask.unsqueeze(-1))
    cos = torch.nn.functional.cosine_similarity(zl.unsqueeze(2), zg.unsqueeze(1), dim=-1)
    assert torch.equal(assign(zl, zg, gmask), cos.argmax(-1))
    with torch.no_grad():
        m.film.bias[4:] = torch.tensor([1.0, 2.0, 3.0, 4.0])  # β_j = (1, 2, 3, 4) for every cluster
    assert torch.allclose(m.film_condition(zl, zg, mask, gmask)[mask], (zl + torch.arange(1.0, 5.0))[mask])


# ---- 7. schedule ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("steps", "m_"), [(12, 5), (7, 1), (10, 3)])
def test_asymmetric_schedule_fires_process_ii_ceil_times(steps, m_):
    names = [process_at("dual", n, m_) for n in range(steps)]
    assert names.count("ii") == math.ceil(steps / (m_ + 1))
    assert all((name == "ii") == (n % (m_ + 1) == 0) for n, name in enumerate(names))
    assert all(process_at("dual", n, m_, "sym") == "both" for n in range(steps))


def test_sampler_uses_the_schedule_and_fixed_conditions_per_step():
    m = _model("dual", cfg=MethodConfig(d_model=16, n_layers=1, n_heads=2, m=2))
    rec = []
    zl, zg, mask, gmask = m.sample(torch.tensor([3, 5, 1]), 5, steps=7, record=rec)
    assert rec == ["ii", "i", "i", "ii", "i", "i", "ii"]
    assert zl.shape == (3, 5, 4) and zg.shape == (3, 2, 4)
    assert (zl[0, 3:] == 0).all() and gmask.tolist() == [[True, True], [True, True], [True, False]]
    rec_node = []
    zl, zg, _, _ = _model("node").sample(torch.tensor([4]), 4, steps=3, record=rec_node)
    assert zg is None and rec_node == ["self"] * 3


def test_mismatch_zero_for_cluster_means():
    zl = torch.tensor([[[1.0, 0.1], [1.0, -0.1], [-1.0, 0.2], [-1.2, 0.0]]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    gmask = torch.ones(1, 2, dtype=torch.bool)
    zg, _ = masked_cluster_mean(zl, torch.tensor([[0, 0, 1, 1]]), 2)
    assert global_local_mismatch(zl, zg, mask, gmask)[0] == pytest.approx(0.0, abs=1e-6)
    # Ẑ_g = 2 × cluster means: c = mean_j ‖m_j‖ / sqrt(mean_j ‖2 m_j‖²), m = (1, 0), (-1.1, 0.1)
    n0, n1 = 1.0, math.hypot(1.1, 0.1)
    expect = (n0 + n1) / 2 / math.sqrt((4 * n0**2 + 4 * n1**2) / 2)
    assert global_local_mismatch(zl, zg * 2, mask, gmask)[0] == pytest.approx(expect, rel=1e-5)


# ---- 8. decoder ----------------------------------------------------------------------------------
def test_decoded_adjacency_symmetric_binary_zero_diagonal():
    torch.manual_seed(0)
    ae = GraphAE(AEConfig(hidden=16, d=8))
    zl, zg, mask, gmask = _latents(d=8)
    adj = ae.decode(zl, zg, mask, gmask)
    assert torch.equal(adj, adj.transpose(1, 2))
    assert (adj.diagonal(dim1=1, dim2=2) == 0).all()
    assert set(adj.unique().tolist()) <= {0.0, 1.0}
    assert (adj[0, 5:] == 0).all() and (adj[0, :, 5:] == 0).all()
    assert adj.sum() > 0


def test_bilinear_edge_logit_rebuilds_adjacency_from_eigen_coordinates():
    """e_ij carries Σ_k w_k Z_l^ik Z_l^jk: with Z_l = adjacency eigen-coordinates, w = sign(λ_k) and the MLP
    path silenced (constant −0.5), the decoder reproduces every community-small graph exactly."""
    d = 16
    dense = to_dense(community_small(16, 3))
    ae = GraphAE(AEConfig(d=d, hidden=16))
    with torch.no_grad():
        ae.edge_mlp[-1].weight.zero_()
        ae.edge_mlp[-1].bias.fill_(-0.5)
        ae.bilinear.copy_(torch.cat([torch.ones(d // 2), -torch.ones(d - d // 2)]))
    zl = spectral_pe(dense.adj, d)
    labels = torch.where(dense.mask, 0, -1)
    zg, gmask = masked_cluster_mean(zl, labels, 2)
    logits = ae.edge_logits(zl, zg, labels.clamp(min=0), gmask)
    assert torch.allclose(logits, logits.transpose(1, 2), atol=1e-5)
    rec = ae.decode(zl, zg, dense.mask, gmask, labels.clamp(min=0))
    assert torch.equal(rec, dense.adj)
    assert GraphAE(AEConfig(d=d, hidden=16, bilinear=False)).bilinear is None


def test_autoencoder_learns_held_out_community_graphs():
    """A short AE fit (small-scale architecture and lr, 250 steps) reaches 94 % held-out edge accuracy."""
    from iclr26.core.train import TrainConfig
    from iclr26.graph_ldm.autoencoder import edge_accuracy
    from iclr26.graph_ldm.config import config_for
    from iclr26.graph_ldm.pipeline import fit_autoencoder, prepare_graphs

    cfg = config_for("small")
    train, held = community_small(200, 0), community_small(32, 1)
    pt, ph = prepare_graphs(train, cfg.ae, 20), prepare_graphs(held, cfg.ae, 20)
    tc = TrainConfig(**{**cfg.ae_train.__dict__, "steps": 250})
    ae, _ = fit_autoencoder(pt, cfg.ae, tc, 32, seed=0)
    acc = edge_accuracy(ae, ph.graphs.adj, ph.graphs.mask, ph.labels)
    assert acc["edge_acc"] >= 0.94, acc  # measured 0.952; without the bilinear term 0.920, at lr 1e-3 0.902


def test_community_generator():
    graphs = community_small(30, 0)
    intra, inter = [], []
    for g in graphs:
        n = g.number_of_nodes()
        assert 12 <= n <= 20 and n % 2 == 0
        half = n // 2
        bridges = [(a, b) for a, b in g.edges() if (a < half) != (b < half)]
        assert len(bridges) >= 1
        dense = to_dense([g]).adj[0]
        intra.append((dense[:half, :half].sum() + dense[half:, half:].sum()) / (2 * half * (half - 1)))
        inter.append(dense[:half, half:].mean())
    assert 0.65 < np.mean(intra) < 0.75 and np.mean(inter) < 0.05
    quirk = community_small(3, 0, gdss_seed_quirk=True)
    n0 = quirk[0].number_of_nodes() // 2
    assert sorted(quirk[0].subgraph(range(n0)).edges()) == sorted(nx.gnp_random_graph(n0, 0.7, seed=0).edges())


def test_sampler_feeds_previous_step_estimates(monkeypatch):
    """Step 0 conditions on zero estimates; step n on the denoised output of step n - 1."""
    m = _model("self")
    seen, outs = [], []
    orig_c, orig_l = m.conditions, m.denoise_l

    def spy_c(process, est_l, est_g, mask, gmask):
        seen.append(est_l.clone())
        return orig_c(process, est_l, est_g, mask, gmask)

    def spy_l(*args):
        out = orig_l(*args)
        outs.append(out.clone())
        return out

    monkeypatch.setattr(m, "conditions", spy_c)
    monkeypatch.setattr(m, "denoise_l", spy_l)
    m.sample(torch.tensor([3, 4]), 4, steps=3)
    assert len(seen) == 3 and (seen[0] == 0).all()
    assert torch.equal(seen[1], outs[1]) and torch.equal(seen[2], outs[3])  # two Heun evaluations per step
