"""ProtoTS model: similarity weights, convex hull, hierarchy reductions, split selection, loss, leakage,
channel independence, bottleneck and steering (exact identities, no training)."""

import copy
import math

import pytest
import torch

from iclr26.protots.config import ProtoTSConfig
from iclr26.protots.model import ProtoTS, assignment_entropy, protots_loss, prototype_weights, select_split

pytestmark = pytest.mark.usefixtures("one_torch_thread")

L, H, CARDS, NCON = 6, 4, [5, 3], 3


def _model(n_roots=4, seed=0, **kw):
    cfg = ProtoTSConfig(d=8, d_bottle=2, n_roots=n_roots, time_hidden=5, **kw)
    m = ProtoTS(CARDS, NCON, L, H, cfg, seed=seed)
    with torch.no_grad():  # distinct curves so that mixtures are visible
        for k, r in enumerate(m.roots):
            r.p.copy_(torch.randn(H) + k)
    return m.eval()


def _batch(B=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(B, L, generator=g)
    xd = torch.stack([torch.randint(0, c, (B, L + H), generator=g) for c in CARDS], -1)
    xc = torch.randn(B, L + H, NCON, generator=g)
    return y, xd, xc


def test_weights_are_a_distribution_and_nearest_weighs_most():
    z = torch.randn(7, 3)
    mus = torch.randn(5, 3)
    for squared in (False, True):
        f = prototype_weights(z, mus, squared)
        assert (f >= 0).all() and torch.allclose(f.sum(1), torch.ones(7))
        assert torch.equal(f.argmax(1), torch.cdist(z, mus).argmin(1))


def test_weights_hand_computed_plain_euclidean():
    z = torch.zeros(1, 2)
    mus = torch.tensor([[1.0, 0.0], [0.0, 2.0]])  # distances 1 and 2
    f = prototype_weights(z, mus)
    e = torch.tensor([math.exp(-1), math.exp(-2)])
    assert torch.allclose(f[0], e / e.sum(), atol=1e-6)
    fs = prototype_weights(z, mus, squared=True)  # distances 1 and 4
    e = torch.tensor([math.exp(-1), math.exp(-4)])
    assert torch.allclose(fs[0], e / e.sum(), atol=1e-6)
    ft = prototype_weights(z, mus, temperature=2.0)
    e = torch.tensor([math.exp(-0.5), math.exp(-1.0)])
    assert torch.allclose(ft[0], e / e.sum(), atol=1e-6)


def test_z_at_mu_k_gives_p_k():
    m = _model()
    y, xd, xc = _batch(1)
    with torch.no_grad():
        z = m.encode(y, xd, xc)[0]
        for k, r in enumerate(m.roots):
            r.mu.copy_(z if k == 2 else z + 100.0 * (k + 1))
        y_hat, f = m(y, xd, xc)
    assert f[0, 2] > 1 - 1e-6
    assert torch.allclose(y_hat[0], m.roots[2].p, atol=1e-5)


def test_forecast_is_root_mixture_and_single_root_is_constant():
    m = _model()
    y, xd, xc = _batch()
    with torch.no_grad():
        y_hat, f = m(y, xd, xc)
        manual = f @ torch.stack([r.p for r in m.roots])
    assert torch.allclose(y_hat, manual, atol=1e-6)
    one = _model(n_roots=1)
    with torch.no_grad():
        y1, _ = one(y, xd, xc)
    assert torch.equal(y1, one.roots[0].p.expand(len(y), H))


def _split_model():
    m = _model()
    g = torch.Generator().manual_seed(0)
    m.split_prototype("1", 3, eps=0.5, generator=g)
    m.split_prototype("3", 2, eps=0.5, generator=g)
    m.split_prototype("1.2", 2, eps=0.5, generator=g)
    with torch.no_grad():
        for _pid, node in m.leaves():
            node.p.copy_(torch.randn(H) * 3)
    return m


def test_hierarchical_forecast_in_convex_hull_of_leaf_curves_and_equals_leaf_mixture():
    m = _split_model()
    y, xd, xc = _batch(20)
    with torch.no_grad():
        y_hat, _ = m(y, xd, xc)
        ex = m.explain(y, xd, xc)
    curves = torch.stack([n.p for _, n in m.leaves()])
    assert [pid for pid, _ in m.leaves()] == ex.leaf_ids
    assert ex.leaf_ids == ["0", "1.0", "1.1", "1.2.0", "1.2.1", "2", "3.0", "3.1"]
    assert torch.allclose(ex.leaf_weights.sum(1), torch.ones(20), atol=1e-6)
    assert torch.allclose(ex.forecast, y_hat, atol=1e-5)
    assert (y_hat >= curves.min(0).values - 1e-5).all() and (y_hat <= curves.max(0).values + 1e-5).all()


def test_child_mixture_hand_computed():
    m = _model()
    m.split_prototype("0", 2, eps=0.3, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        m.roots[0].kids[0].p.fill_(1.0)
        m.roots[0].kids[1].p.fill_(-2.0)
    y, xd, xc = _batch(3)
    with torch.no_grad():
        z = m.encode(y, xd, xc)
        y_hat, f = m(y, xd, xc)
    mus = torch.stack([k.mu for k in m.roots[0].kids])
    fc = prototype_weights(z, mus)
    curve0 = fc[:, :1] * 1.0 + fc[:, 1:] * -2.0
    expect = f[:, :1] * curve0 + sum(f[:, k : k + 1] * m.roots[k].p for k in range(1, 4))
    assert torch.allclose(y_hat, expect, atol=1e-5)


def test_m1_split_and_function_preserving_split_are_bit_identical():
    m = _model()
    y, xd, xc = _batch(9)
    with torch.no_grad():
        ref = m(y, xd, xc)[0]
    one = copy.deepcopy(m)
    for i in range(4):
        one.split_prototype(str(i), 1, eps=0.7)
    two = copy.deepcopy(m)
    two.split_prototype("2", 2, eps=0.0)
    noisy = copy.deepcopy(m)
    noisy.split_prototype("2", 3, eps=0.5)
    with torch.no_grad():
        assert torch.equal(one(y, xd, xc)[0], ref)
        assert torch.equal(two(y, xd, xc)[0], ref)
        assert torch.allclose(noisy(y, xd, xc)[0], ref, atol=1e-6)
    kid = noisy.node("2.1")
    assert torch.equal(kid.p, m.roots[2].p) and not torch.equal(kid.mu, m.roots[2].mu)
    assert not noisy.roots[2].p.requires_grad  # the parent curve is unused after the split


def test_split_selection_on_crafted_table():
    ids = ["0", "1", "2", "3", "4"]
    assign = torch.tensor([0, 0, 1, 2, 2, 2, 3, 0])
    mae = torch.tensor([1.0, 3.0, 5.0, 0.1, 0.2, 0.3, 4.0, 2.0])  # means: 0 -> 2.0, 1 -> 5.0, 2 -> 0.2, 3 -> 4.0
    assert select_split(ids, assign, mae, 0.5) == ["1", "3", "0"]  # ceil(0.5 * 5) = 3; leaf 4 has no instance
    assert select_split(ids, assign, mae, 0.2) == ["1"]
    assert select_split(ids, assign, mae, 0.4) == ["1", "3"]
    assert select_split(ids, assign, mae, 1.0) == ["1", "3", "0", "2"]
    with pytest.raises(ValueError):
        select_split(ids, assign, mae, 0.0)


def test_model_split_selects_worst_leaves_and_reports_them():
    m = _model()
    y, xd, xc = _batch(40)
    with torch.no_grad():
        y_hat = m(y, xd, xc)[0]
        z = m.encode(y, xd, xc)
        ids, lw = m.leaf_weights(z)
    target = y_hat + torch.randn(40, H)
    mae = (y_hat - target).abs().mean(1)
    expect = select_split(ids, lw.argmax(1), mae, 0.5)
    chosen = m.split(0.5, 2, y, xd, xc, target)
    assert chosen == expect and len(chosen) >= 1
    assert sorted(m.last_split) == sorted(f"{p}.{j}" for p in chosen for j in range(2))


def test_entropy_and_loss_values():
    assert float(assignment_entropy(torch.tensor([[0.0, 1.0, 0.0]]))) == pytest.approx(0.0, abs=1e-9)
    assert float(assignment_entropy(torch.full((1, 6), 1 / 6))) == pytest.approx(math.log(6), abs=1e-6)
    f = torch.tensor([[0.5, 0.5], [1.0, 0.0]])
    y_hat, y = torch.tensor([[1.0, 2.0], [0.0, 0.0]]), torch.tensor([[0.0, 0.0], [0.0, 4.0]])
    l1 = (1 + 2 + 0 + 4) / 4
    ent = (math.log(2) + 0) / 2
    assert float(protots_loss(y_hat, y, f, 0.3, "mean")) == pytest.approx(l1 + 0.3 * ent, abs=1e-6)


def test_future_targets_cannot_change_the_forecast_future_covariates_do():
    m = _model()
    y, xd, xc = _batch(4)
    full = torch.cat([y, torch.randn(4, H)], 1)
    with torch.no_grad():
        ref = m(y, xd, xc)[0]
        assert torch.equal(m(full, xd, xc)[0], ref)
        full2 = full.clone()
        full2[:, L:] = float("nan")
        assert torch.equal(m(full2, xd, xc)[0], ref)
        xc2 = xc.clone()
        xc2[:, L:] += 1.0
        assert not torch.allclose(m(y, xd, xc2)[0], ref)
        xd2 = xd.clone()
        xd2[:, L + 1, 0] = (xd2[:, L + 1, 0] + 1) % CARDS[0]
        assert not torch.allclose(m(y, xd2, xc)[0], ref)
        y2 = y.clone()
        y2[:, -1] += 1.0
        assert not torch.allclose(m(y2, xd, xc)[0], ref)


def test_discrete_channel_shifts_z_by_embedding_difference():
    m = _model()
    y, xd, xc = _batch(2)
    t, j = L + 2, 1
    xd2 = xd.clone()
    old = xd[:, t, j].clone()
    xd2[:, t, j] = (old + 1) % CARDS[j]
    with torch.no_grad():
        z1, z2 = m.embed(y, xd, xc), m.embed(y, xd2, xc)
        table = m.embed.dis_emb[j].weight
    diff = z2 - z1
    assert torch.allclose(diff[:, t], table[xd2[:, t, j]] - table[old], atol=1e-6)
    mask = torch.ones(L + H, dtype=torch.bool)
    mask[t] = False
    assert torch.equal(diff[:, mask], torch.zeros_like(diff[:, mask]))


def test_continuous_channel_is_psi_j_of_its_variable():
    m = _model()
    y, xd, xc = _batch(2)
    xc2 = xc.clone()
    xc2[:, 3, 1] += 0.7
    e = m.embed
    with torch.no_grad():
        diff = e(y, xd, xc2) - e(y, xd, xc)

        def psi(x):
            return torch.tanh(x.unsqueeze(-1) * e.con_w1[1] + e.con_b1[1]) @ e.con_w2[1]

    assert torch.allclose(diff[:, 3], psi(xc2[:, 3, 1]) - psi(xc[:, 3, 1]), atol=1e-5)


def test_bottleneck_width_and_ablation_flag():
    m = _model()
    for layer in m.mixer:
        assert layer.feature[0].out_features == 2 and layer.feature[2].in_features == 2
        assert layer.time[0].in_features == L + H
    wide = ProtoTS(CARDS, NCON, L, H, ProtoTSConfig(d=8, d_bottle=8, n_roots=2))
    assert wide.mixer[0].feature[0].out_features == 8


def test_mixer_is_feature_then_time_with_residual_flag():
    torch.manual_seed(0)
    m = ProtoTS(
        CARDS,
        NCON,
        L,
        H,
        ProtoTSConfig(d=8, d_bottle=2, n_roots=2, n_mix=1, residual=False, layer_norm=False, time_hidden=5),
    ).eval()
    layer = m.mixer[0]
    z = torch.randn(3, L + H, 8)
    with torch.no_grad():
        expect = layer.time(layer.feature(z).transpose(1, 2)).transpose(1, 2)
        assert torch.allclose(layer(z), expect, atol=1e-6)
        res = ProtoTS(CARDS, NCON, L, H, ProtoTSConfig(d=8, d_bottle=2, n_roots=2, n_mix=1, time_hidden=5))
        lr = res.mixer[0]
        h = z + lr.feature(lr.norm_f(z))
        expect = h + lr.time(lr.norm_t(h).transpose(1, 2)).transpose(1, 2)
        assert torch.allclose(lr(z), expect, atol=1e-6)


def test_edit_pattern_moves_forecast_by_weight_times_delta():
    m = _model()
    y, xd, xc = _batch(6)
    with torch.no_grad():
        ref, f = m(y, xd, xc)
    delta = torch.tensor([1.0, -2.0, 0.5, 3.0])
    m.edit_pattern("2", m.roots[2].p.detach() + delta)
    with torch.no_grad():
        new, _ = m(y, xd, xc)
    assert torch.allclose(new - ref, f[:, 2:3] * delta, atol=1e-5)


def test_far_injected_root_changes_nothing_and_near_one_does():
    m = _model()
    y, xd, xc = _batch(6)
    with torch.no_grad():
        ref = m(y, xd, xc)[0]
        z = m.encode(y, xd, xc)
    pid = m.inject_root(torch.full((8,), 1e3), torch.full((H,), 50.0))
    assert pid == "4" and len(m.roots) == 5
    with torch.no_grad():
        assert (m(y, xd, xc)[0] - ref).abs().max() < 1e-6
    m.inject_root(z[0], torch.full((H,), 50.0))
    with torch.no_grad():
        assert (m(y, xd, xc)[0] - ref).abs().max() > 1e-3


def test_inject_from_instances_uses_mean_embedding_and_curve():
    m = _model()
    y, xd, xc = _batch(3)
    target = torch.randn(3, H)
    pid = m.inject_root_from_instances(y, xd, xc, target)
    with torch.no_grad():
        assert torch.allclose(m.node(pid).mu, m.encode(y, xd, xc).mean(0), atol=1e-6)
    assert torch.allclose(m.node(pid).p, target.mean(0))


def test_bad_steering_calls_raise_and_leave_the_model_unchanged():
    m = _model()
    m.split_prototype("1", 2)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    n_roots = len(m.roots)
    bad = [
        lambda: m.edit_pattern("9", torch.zeros(H)),
        lambda: m.edit_pattern("0", torch.zeros(H + 1)),
        lambda: m.edit_pattern("0", torch.full((H,), float("nan"))),
        lambda: m.edit_pattern("1", torch.zeros(H)),
        lambda: m.split_prototype("1", 2),
        lambda: m.split_prototype("x", 2),
        lambda: m.split_prototype("0", 0),
        lambda: m.split_prototype("1.5", 2),
        lambda: m.inject_root(torch.zeros(7), torch.zeros(H)),
        lambda: m.inject_root(torch.zeros(8), torch.zeros(H - 1)),
    ]
    for call in bad:
        with pytest.raises((KeyError, ValueError)):
            call()
    after = m.state_dict()
    assert set(after) == set(before) and all(torch.equal(after[k], before[k]) for k in before)
    assert len(m.roots) == n_roots


def test_kmeans_init_sets_mu_to_centroids_and_p_to_cluster_means():
    m = _model(n_roots=3)
    y, xd, xc = _batch(30)
    target = torch.randn(30, H)
    m.init_prototypes(y, xd, xc, target, seed=0)
    with torch.no_grad():
        z = m.encode(y, xd, xc)
    mus = torch.stack([r.mu for r in m.roots])
    assign = torch.cdist(z, mus).argmin(1)
    for k in range(3):
        if (assign == k).any():
            assert torch.allclose(m.roots[k].p, target[assign == k].mean(0), atol=1e-5)
    assert len(torch.unique(assign)) >= 2


def test_bad_inputs_raise():
    m = _model()
    y, xd, xc = _batch(2)
    with pytest.raises(ValueError):
        m(y[:, :3], xd, xc)
    with pytest.raises(ValueError):
        m(y, xd[:, :, :1], xc)
    with pytest.raises(ValueError):
        ProtoTS(CARDS, NCON, L, H, ProtoTSConfig(n_roots=0))


def test_reserved_unseen_index_is_accepted():
    m = _model()
    y, xd, xc = _batch(2)
    xd[:, 0, 0] = CARDS[0]  # the reserved index for categories unseen in training
    with torch.no_grad():
        assert torch.isfinite(m(y, xd, xc)[0]).all()


def test_revin_makes_the_forecast_shift_with_the_history_level():
    m = _model(revin=True)
    y, xd, xc = _batch(3)
    with torch.no_grad():
        a = m(y, xd, xc)[0]
        b = m(y + 5.0, xd, xc)[0]
        plain = _model()(y + 5.0, xd, xc)[0] - _model()(y, xd, xc)[0]
    assert torch.allclose(b - a, torch.full_like(a, 5.0), atol=1e-4)
    assert not torch.allclose(plain, torch.full_like(plain, 5.0), atol=1e-2)


def test_forecast_window_embedding_has_no_target_term():
    m = _model()
    y, xd, xc = _batch(2)
    e = m.embed
    with torch.no_grad():
        z = e(y, xd, xc)
        expect = sum(e.dis_emb[j](xd[:, L:, j]) for j in range(len(CARDS)))
        hid = torch.tanh(xc[:, L:].unsqueeze(-1) * e.con_w1 + e.con_b1)
        expect = expect + torch.einsum("btch,chd->btd", hid, e.con_w2) + e.con_b2.sum(0)
    assert torch.allclose(z[:, L:], expect, atol=1e-5)


def test_pooling_is_the_learned_weighted_sum_over_time():
    m = _model()
    y, xd, xc = _batch(3)
    w = torch.rand(L + H)
    with torch.no_grad():
        m.pool.copy_(w)
        z = m.embed(y, xd, xc)
        for layer in m.mixer:
            z = layer(z)
        assert torch.allclose(m.encode(y, xd, xc), (z * w.view(1, -1, 1)).sum(1), atol=1e-5)


def test_unit_distance_init_puts_the_median_nearest_root_distance_at_one_and_keeps_assignments():
    y, xd, xc = _batch(40)
    target = torch.randn(40, H)
    plain = _model(n_roots=3, unit_distance=False)
    plain.init_prototypes(y, xd, xc, target, seed=0)
    m = _model(n_roots=3, unit_distance=True)
    m.init_prototypes(y, xd, xc, target, seed=0)
    with torch.no_grad():
        z0, z = plain.encode(y, xd, xc), m.encode(y, xd, xc)
    d0 = torch.cdist(z0, torch.stack([r.mu for r in plain.roots]))
    d = torch.cdist(z, torch.stack([r.mu for r in m.roots]))
    assert abs(float(d.min(1).values.median()) - 1.0) < 1e-4
    assert torch.allclose(d * float(d0.min(1).values.median()), d0, rtol=1e-4, atol=1e-4)  # a pure rescaling
    assert torch.equal(d.argmin(1), d0.argmin(1))
    assert all(torch.equal(a.p, b.p) for a, b in zip(m.roots, plain.roots))
