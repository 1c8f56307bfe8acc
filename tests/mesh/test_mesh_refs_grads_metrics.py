"""Which tensor feeds each MeSH step, where gradients flow, and the diagnostics on asymmetric hand-computed inputs.

Gradient-flow table (``lm_loss`` of a tiny ``1+1R2+1`` model, random init, Sec. 3 / Eq. 4-5):

=======================  ==========  ==========  ===========
parameter group          mesh        base        anchor
=======================  ==========  ==========  ===========
embed_in                 nonzero     nonzero     nonzero
prelude / cores / coda   nonzero     nonzero     nonzero
routers.pairs[0..K]      nonzero     (absent)    (absent)
=======================  ==========  ==========  ===========

``loop_diagnostics`` runs under ``no_grad``: it leaves every ``.grad`` untouched.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from iclr26.core.experiment import RunContext
from iclr26.mesh.diagnostics import cka_linear, effective_rank, loop_diagnostics, relative_update
from iclr26.mesh.model import MeshConfig, RecursiveNeoX, lm_loss
from iclr26.mesh.summary import summarize


def _model(scheme: str, impl: str = "buffer", seed: int = 0) -> RecursiveNeoX:
    torch.manual_seed(seed)
    cfg = MeshConfig(
        vocab_size=23, d_model=16, n_heads=2, layout="1+1R2+1", scheme=scheme, max_seq_len=16, mesh_impl=impl
    )
    m = RecursiveNeoX(cfg)
    # non-zero biases everywhere so the routers are not uniform and the slots differ
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m


def _tokens(seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 23, (3, 9), generator=g)


# ---------------------------------------------------------------- references (which tensor goes where)


def test_loop_routers_read_the_core_input_h_t_not_its_output():
    """Eq. 5: the step-t routers are computed from h^(t), the core's input (not h_m^(t)), with pair t+1."""
    m = _model("mesh")
    seen: dict[int, torch.Tensor] = {}
    hooks = [
        pair.write.register_forward_hook(lambda mod, inp, out, i=i: seen.__setitem__(i, inp[0].detach()))
        for i, pair in enumerate(m.routers.pairs)
    ]
    _, tr = m(_tokens()[:, :-1], return_trace=True)
    for h in hooks:
        h.remove()
    assert torch.equal(seen[0], tr["h_pre"])  # transitional routers read the prelude output
    for t in range(2):
        assert torch.equal(seen[t + 1], tr["states"][t])
        assert not torch.allclose(seen[t + 1], tr["core_out"][t])
    # the pair used at step t is pairs[t+1]: its weights are the ones in the trace
    for t in range(2):
        ww = torch.softmax(m.routers.pairs[t + 1].write(tr["states"][t]), -1)
        assert torch.allclose(tr["w_write"][t + 1], ww)


def test_transitional_cycle_writes_h_pre_and_slot0_holds_h_emb():
    """Buffer init m_0 = h_emb, others 0; the transitional cycle writes h_pre (not h_emb) with its weights."""
    m = _model("mesh")
    _, tr = m(_tokens()[:, :-1], return_trace=True)
    ww0, wr0 = tr["w_write"][0], tr["w_read"][0]
    mem = torch.zeros(*tr["h_emb"].shape[:-1], m.cfg.slots, 16)
    mem[..., 0, :] = tr["h_emb"]
    mem = mem + ww0.unsqueeze(-1) * tr["h_pre"].unsqueeze(-2)
    h0 = torch.einsum("...b,...bd->...d", wr0, mem)
    assert torch.allclose(tr["states"][0], h0, atol=1e-5)
    assert not torch.allclose(tr["h_pre"], tr["h_emb"])


@pytest.mark.parametrize(
    ("scheme", "rule"),
    [
        ("base", lambda hm, h, h0, emb: hm),
        ("residual", lambda hm, h, h0, emb: hm + h),
        ("anchor", lambda hm, h, h0, emb: hm + h0),
        ("anchor_emb", lambda hm, h, h0, emb: hm + emb),
    ],
)
def test_state_schemes_add_the_right_reference(scheme, rule):
    """h^(t+1) = f(h^(t)) [base], + h^(t) [residual], + h^(0) [anchor], + h_emb [anchor_emb]."""
    m = _model(scheme)
    _, tr = m(_tokens()[:, :-1], return_trace=True)
    st, co = tr["states"], tr["core_out"]
    assert len(st) == 3
    for t in range(2):
        assert torch.allclose(st[t + 1], rule(co[t], st[t], st[0], tr["h_emb"]), atol=1e-6)
    # the schemes differ on these inputs: the state after step 1 is not any other rule's
    others = {"base": co[1], "residual": co[1] + st[1], "anchor": co[1] + st[0], "anchor_emb": co[1] + tr["h_emb"]}
    for name, val in others.items():
        if name != scheme:
            assert not torch.allclose(st[2], val, atol=1e-4), name


def test_lm_loss_predicts_the_next_token():
    """Cross-entropy of logits at position i against token i+1 (not i, not i+2)."""
    m = _model("mesh")
    tok = _tokens()
    logits = m(tok[:, :-1])
    want = F.cross_entropy(logits.reshape(-1, 23), tok[:, 1:].reshape(-1))
    assert float(lm_loss(m, tok)) == pytest.approx(float(want), rel=1e-6)
    same_pos = F.cross_entropy(logits.reshape(-1, 23), tok[:, :-1].reshape(-1))
    assert abs(float(same_pos) - float(want)) > 1e-3


# ---------------------------------------------------------------- gradient flow


def _grads(m: RecursiveNeoX) -> dict[str, torch.Tensor]:
    loss = lm_loss(m, _tokens())
    names, params = zip(*[(n, p) for n, p in m.named_parameters()])
    gs = torch.autograd.grad(loss, params, allow_unused=True)
    return {n: (torch.zeros_like(p) if g is None else g) for n, p, g in zip(names, params, gs)}


@pytest.mark.parametrize("scheme", ["mesh", "base", "anchor"])
def test_every_parameter_gets_a_gradient(scheme):
    g = _grads(_model(scheme))
    zero = [n for n, v in g.items() if float(v.abs().max()) == 0.0]
    assert zero == []
    has_router = any(n.startswith("routers.") for n in g)
    assert has_router == (scheme == "mesh")
    if scheme == "mesh":
        for i in range(3):  # transitional pair and both loop pairs, write and read
            for kind in ("write", "read"):
                assert float(g[f"routers.pairs.{i}.{kind}.weight"].abs().max()) > 0


def test_buffer_and_unrolled_reads_have_the_same_gradients():
    """Eq. 5 (buffer) and Eq. 7 (unrolled) are the same function: same loss and same gradient everywhere,
    including through the h_emb initial slot and the transitional write."""
    gb, gu = _grads(_model("mesh", "buffer")), _grads(_model("mesh", "unrolled"))
    assert gb.keys() == gu.keys()
    for n in gb:
        assert torch.allclose(gb[n], gu[n], atol=1e-6, rtol=1e-4), n


def test_embedding_gradient_through_slot0_only_path():
    """With read weights on slot 0 only (the embedding slot), h^(t) = h_emb: the embedding gets its
    gradient through the buffer's initial slot (no detach there)."""
    for impl in ("buffer", "unrolled"):
        m = _model("mesh", impl)
        m.routers.set_one_hot([(1, 0), (2, 0), (3, 0)])
        tok = _tokens()
        h = m.embed(tok[:, :-1]).detach().requires_grad_(True)
        _, tr = m(inputs_embeds=h, return_trace=True)
        assert torch.allclose(tr["states"][-1], h)
        (gh,) = torch.autograd.grad(tr["states"][-1].square().sum(), h)
        assert torch.allclose(gh, 2 * h)


def test_loop_diagnostics_touch_no_gradient_and_restore_train_mode():
    m = _model("mesh")
    m.train()
    lm_loss(m, _tokens()).backward()
    before = {n: p.grad.clone() for n, p in m.named_parameters()}
    loop_diagnostics(m, _tokens(2)[:, :-1])
    assert m.training
    for n, p in m.named_parameters():
        assert torch.equal(p.grad, before[n])


# ---------------------------------------------------------------- metrics on asymmetric hand-computed inputs


def test_relative_update_hand_computed():
    a = torch.ones(4, 3)  # ||a|| = sqrt(12)
    b = 3 * torch.ones(4, 3)  # ||b|| = 3 sqrt(12), ||b - a|| = 2 sqrt(12)
    assert relative_update(a, b) == pytest.approx(2 * 2 / (3 + 1))
    c = torch.tensor([[3.0, 4.0]])  # ||c|| = 5, ||c - 0.5c|| = 2.5
    assert relative_update(0.5 * c, c) == pytest.approx(2 * 2.5 / (5 + 2.5))


def test_linear_cka_hand_computed_on_scaled_offset_columns():
    """x has orthogonal centred columns of equal norm; y scales the second by 2 and adds an offset.
    CKA = (1 + s^2) / sqrt(2 (1 + s^4)) = 5 / sqrt(34)."""
    x = torch.tensor([[1.0, 1.0], [-1.0, 1.0], [1.0, -1.0], [-1.0, -1.0]])
    y = x * torch.tensor([1.0, 2.0]) + torch.tensor([5.0, -3.0])
    assert cka_linear(x, y) == pytest.approx(5 / math.sqrt(34), rel=1e-9)
    assert cka_linear(y, x) == pytest.approx(5 / math.sqrt(34), rel=1e-9)
    assert cka_linear(x, x + 7.0) == pytest.approx(1.0)


def test_effective_rank_hand_computed():
    x = torch.tensor([[3.0, 0.0], [0.0, 1.0]])
    p = torch.tensor([0.75, 0.25], dtype=torch.float64)
    assert effective_rank(x) == pytest.approx(math.exp(float(-(p * p.log()).sum())), rel=1e-9)
    assert effective_rank(torch.eye(3)) == pytest.approx(3.0)


def test_loop_diagnostics_pair_each_core_input_with_its_output():
    """update_loops[t] = u(h^(t), h_m^(t)); update_balance = max/min of those; CKA over consecutive states."""
    m = _model("base")
    tok = _tokens(3)[:, :-1]
    d = loop_diagnostics(m, tok)
    with torch.no_grad():
        _, tr = m(tok, return_trace=True)
    st, co = tr["states"], tr["core_out"]
    ups = [relative_update(st[t], co[t]) for t in range(2)]
    assert d["update_loops"] == pytest.approx(ups)
    assert ups[0] != pytest.approx(ups[1], rel=1e-3)  # asymmetric: max/min is not 1
    assert d["update_balance"] == pytest.approx(max(ups) / min(ups))
    assert d["cka_linear_consecutive"] == pytest.approx([cka_linear(st[t], st[t + 1]) for t in range(2)])
    assert d["state_update_loops"] == pytest.approx([relative_update(st[t], st[t + 1]) for t in range(2)])


def _arm(loss: float, cka: float = 0.5, bal: float = 2.0) -> dict:
    return {
        "val_loss": loss,
        "val_curve": [(1, loss)],
        "diagnostics": {
            "cka_consecutive_mean": cka,
            "update_balance": bal,
            "cka_consecutive": [cka],
            "update_loops": [1.0],
        },
    }


def test_summary_gap_share_and_claim_inputs_hand_computed(tmp_path, monkeypatch):
    import iclr26.mesh.summary as summary

    monkeypatch.setattr(summary, "_plots", lambda *a, **k: None)
    per_arm = {
        "vanilla": [_arm(2.0), _arm(2.2)],  # mean 2.1
        "base": [_arm(2.6, 0.9, 5.0), _arm(2.8, 0.7, 3.0)],  # mean 2.7, cka 0.8, balance 4
        "anchor": [_arm(2.5), _arm(2.5)],
        "mesh": [_arm(2.3, 0.4, 1.5), _arm(2.5, 0.2, 2.5)],  # mean 2.4, cka 0.3, balance 2
    }
    ctx = RunContext("smoke", (0, 1), tmp_path, show_progress=False)
    out = summarize(ctx, per_arm, ("vanilla", "base", "anchor", "mesh"), {}, {a: "x" for a in per_arm})
    # (base - mesh) / (base - vanilla) = 0.3 / 0.6
    assert out.metrics["gap_share_closed_by_mesh"] == pytest.approx(0.5)
    c1, c3 = out.measured["C1"], out.measured["C3"]
    assert c1["mesh_per_seed"] == [2.3, 2.5] and c1["base_per_seed"] == [2.6, 2.8]
    assert out.measured["C2"] == {"mesh": pytest.approx(2.4), "anchor": pytest.approx(2.5)}
    assert c3 == {
        "cka_mesh": pytest.approx(0.3),
        "cka_base": pytest.approx(0.8),
        "balance_mesh": pytest.approx(2.0),
        "balance_base": pytest.approx(4.0),
    }
    assert out.metrics["competence_gate"]["gap"] == pytest.approx(0.6)
