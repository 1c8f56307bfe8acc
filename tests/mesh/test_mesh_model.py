"""Faithfulness tests of the recursive GPT-NeoX model and the MeSH state scheme."""

import math
from dataclasses import replace

import pytest
import torch

from iclr26.mesh.model import (
    Layout,
    MeshConfig,
    NeoXLayer,
    RecursiveNeoX,
    lm_loss,
    mesh_read,
    mesh_write,
    parse_layout,
    passthrough_slots,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny(layout="1+2R3+1", scheme="mesh", **kw):
    base = dict(vocab_size=50, d_model=32, n_heads=2, layout=layout, scheme=scheme, max_seq_len=64)
    base.update(kw)
    return MeshConfig(**base)


def tokens(b=2, t=12, v=50, seed=0):
    return torch.randint(0, v, (b, t), generator=torch.Generator().manual_seed(seed))


def test_parse_layout():
    assert parse_layout("4+8R2+4") == Layout(4, 8, 2, 4)
    assert parse_layout("24") == Layout(24, 0, 0, 0)
    assert parse_layout("4+8R2+4").depth == 24 == parse_layout("24").depth
    assert parse_layout("3+6R3+3").unique_layers == 12
    assert str(parse_layout(" 2 + 4 r 2 + 2 ")) == "2+4R2+2"
    for bad in ("4+8+4", "R2", "4+0R2+4", "x"):
        with pytest.raises(ValueError):
            parse_layout(bad)


def test_bad_configs_raise():
    with pytest.raises(ValueError):
        tiny(layout="6", scheme="mesh")  # no loop to put a state scheme on
    with pytest.raises(ValueError):
        tiny(scheme="highway")
    with pytest.raises(ValueError):
        tiny(d_model=30, n_heads=4)  # not divisible
    with pytest.raises(ValueError):
        tiny(d_model=24, n_heads=2, rotary_pct=0.25)  # head 12 -> 3 rotary dims (odd)
    with pytest.raises(ValueError):
        tiny(buffer_size=0)
    with pytest.raises(ValueError):
        RecursiveNeoX(tiny())(tokens(t=70))  # longer than max_seq_len


def test_default_buffer_size_is_n_loop_plus_3():
    assert tiny(layout="1+1R2+1").slots == 5
    assert tiny(layout="1+1R4+1").slots == 7
    assert tiny(buffer_size=9).slots == 9


@pytest.mark.parametrize(
    "layout,router_input,impl",
    [
        ("1+2R3+1", "h_pre", "buffer"),
        ("1+2R3+1", "h_pre", "unrolled"),
        ("1+1R2+1", "h_emb", "unrolled"),
        ("0+2R2+0", "h_pre", "buffer"),
    ],
)
def test_mesh_with_passthrough_routers_equals_base(layout, router_input, impl):
    """One-hot routers (transition -> slot 1, step t -> slot t+2) must compute exactly base recursion."""
    cfg = tiny(layout=layout, transition_router_input=router_input, mesh_impl=impl)
    mesh = RecursiveNeoX(cfg)
    mesh.routers.set_one_hot(passthrough_slots(cfg.parsed_layout.n_loop))
    base = RecursiveNeoX(replace(cfg, scheme="base"))
    missing, unexpected = base.load_state_dict(mesh.state_dict(), strict=False)
    assert not missing and all(k.startswith("routers.") for k in unexpected)
    x = tokens()
    torch.testing.assert_close(mesh(x), base(x), atol=1e-5, rtol=0)
    # a different one-hot routing (reading a stale slot) must NOT equal base
    bad = [(1, 1)] + [(t + 2, 1) for t in range(cfg.parsed_layout.n_loop)]
    mesh.routers.set_one_hot(bad)
    assert (mesh(x) - base(x)).abs().max() > 1e-3


def test_router_bank_shapes_and_distinct_parameters():
    cfg = tiny(layout="1+2R3+1")
    m = RecursiveNeoX(cfg)
    assert len(m.routers.pairs) == 4  # transitional + one per loop step
    ids = set()
    for pair in m.routers.pairs:
        for lin in (pair.write, pair.read):
            assert lin.weight.shape == (cfg.slots, cfg.d_model) and lin.bias.shape == (cfg.slots,)
            ids.add(id(lin.weight))
    assert len(ids) == 8


def test_router_weights_are_convex():
    m = RecursiveNeoX(tiny())
    torch.nn.init.normal_(m.routers.pairs[1].write.weight, std=1.0)
    _, tr = m(tokens(), return_trace=True)
    for w in tr["w_write"] + tr["w_read"]:
        assert (w >= 0).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))


def test_buffer_init_is_scaled_embedding_and_zeros():
    cfg = tiny(mesh_impl="buffer")
    m = RecursiveNeoX(cfg)
    x = tokens()
    _, tr = m(x, return_trace=True)
    mem0 = tr["memory0"]
    torch.testing.assert_close(mem0[..., 0, :], m.embed_in(x) * math.sqrt(cfg.d_model))
    assert mem0[..., 1:, :].abs().max() == 0


def test_writes_are_additive_total_equals_sum_of_written_states():
    """sum_b m_b grows by exactly h_m at each write (weights sum to 1): total = h_emb + h_pre + sum_t h_m^(t)."""
    m = RecursiveNeoX(tiny(mesh_impl="buffer"))
    for p in m.routers.parameters():
        torch.nn.init.normal_(p, std=0.5)
    _, tr = m(tokens(), return_trace=True)
    expected = tr["h_emb"] + tr["h_pre"] + sum(tr["core_out"])
    torch.testing.assert_close(tr["memory"].sum(-2), expected, atol=1e-4, rtol=1e-5)


def test_buffer_and_unrolled_implementations_agree():
    torch.manual_seed(1)
    a = RecursiveNeoX(tiny(mesh_impl="buffer"))
    for p in a.routers.parameters():
        torch.nn.init.normal_(p, std=0.5)
    b = RecursiveNeoX(tiny(mesh_impl="unrolled"))
    b.load_state_dict(a.state_dict())
    x = tokens()
    (la, ta), (lb, tb) = a(x, return_trace=True), b(x, return_trace=True)
    torch.testing.assert_close(la, lb, atol=1e-5, rtol=1e-5)
    for sa, sb in zip(ta["states"], tb["states"]):
        torch.testing.assert_close(sa, sb, atol=1e-5, rtol=1e-5)


def test_eq6_unrolled_identity():
    """h^(t+1) = sum_b m_b^(t) w_read,b + (sum_b w_write,b w_read,b) h_m  (Eq. 6)."""
    g = torch.Generator().manual_seed(1)
    mem = torch.randn(2, 5, 4, 8, generator=g)
    ww = torch.softmax(torch.randn(2, 5, 4, generator=g), -1)
    wr = torch.softmax(torch.randn(2, 5, 4, generator=g), -1)
    hm = torch.randn(2, 5, 8, generator=g)
    lhs = mesh_read(mesh_write(mem, ww, hm), wr)
    rhs = mesh_read(mem, wr) + (ww * wr).sum(-1, keepdim=True) * hm
    torch.testing.assert_close(lhs, rhs)
    # hand-computed single-token, two-slot case
    m1 = mesh_write(torch.tensor([[1.0], [2.0]]), torch.tensor([0.25, 0.75]), torch.tensor([4.0]))
    assert m1.tolist() == [[2.0], [5.0]]
    assert mesh_read(m1, torch.tensor([0.5, 0.5])).tolist() == [3.5]


@pytest.mark.parametrize("scheme", ["base", "residual", "anchor", "anchor_emb"])
def test_heuristic_schemes_match_eq1(scheme):
    m = RecursiveNeoX(tiny(scheme=scheme))
    _, tr = m(tokens(), return_trace=True)
    states, outs = tr["states"], tr["core_out"]
    torch.testing.assert_close(states[0], tr["h_pre"])
    for t, hm in enumerate(outs):
        sup = {"base": 0, "residual": states[t], "anchor": states[0], "anchor_emb": tr["h_emb"]}[scheme]
        torch.testing.assert_close(states[t + 1], hm + sup)
        torch.testing.assert_close(hm, m.core(t)(states[t], *_rot(m, states[t])))


def _rot(m, h):
    from iclr26.mesh.model import rotary_cos_sin

    return rotary_cos_sin(torch.arange(h.shape[1]), m.cfg.rotary_dims, m.cfg.rotary_base, h.dtype)


def test_core_weights_are_one_shared_object_and_grads_accumulate():
    m = RecursiveNeoX(tiny(layout="1+2R3+1", scheme="base"))
    assert len(m.cores) == 1 and m.core(0) is m.core(1) is m.core(2)
    names = [n for n, _ in m.named_parameters()]
    assert len(names) == len(set(names))
    # gradient of the shared core = sum of the gradients of its K applications
    x = tokens()
    lm_loss(m, x).backward()
    g_shared = m.cores[0].layers[0].mlp.dense_4h_to_h.weight.grad.clone()
    untied = RecursiveNeoX(replace(m.cfg, share_core=False))
    sd = m.state_dict()
    for t in range(3):
        for k, v in list(sd.items()):
            if k.startswith("cores.0."):
                sd[k.replace("cores.0.", f"cores.{t}.")] = v
    untied.load_state_dict(sd)
    lm_loss(untied, x).backward()
    g_sum = sum(untied.cores[t].layers[0].mlp.dense_4h_to_h.weight.grad for t in range(3))
    torch.testing.assert_close(g_shared, g_sum, atol=1e-6, rtol=1e-4)
    # prelude, coda are untied from the core
    core_ids = {id(p) for p in m.cores.parameters()}
    assert not core_ids & {id(p) for p in m.prelude.parameters()}
    assert not core_ids & {id(p) for p in m.coda.parameters()}


@pytest.mark.parametrize("layout", ["1+2R3+1", "2+1R2+0", "5"])
def test_layer_applications_equal_unrolled_depth(layout):
    m = RecursiveNeoX(tiny(layout=layout, scheme="mesh" if "R" in layout else "base"))
    calls = []
    for mod in m.modules():
        if isinstance(mod, NeoXLayer):
            mod.register_forward_hook(lambda *a: calls.append(1))
    m(tokens())
    assert len(calls) == parse_layout(layout).depth


def test_causality():
    m = RecursiveNeoX(tiny())
    for p in m.routers.parameters():
        torch.nn.init.normal_(p, std=0.5)
    x = tokens(b=1, t=16)
    y = x.clone()
    y[0, 9] = (y[0, 9] + 1) % 50
    a, b = m(x), m(y)
    torch.testing.assert_close(a[:, :9], b[:, :9])
    assert (a[:, 9:] - b[:, 9:]).abs().max() > 1e-4


def test_init_scales():
    cfg = MeshConfig(vocab_size=50, d_model=256, n_heads=4, layout="1+2R3+1", scheme="base", d_ff=512)
    torch.manual_seed(0)
    m = RecursiveNeoX(cfg)
    depth = cfg.parsed_layout.depth  # 8
    std_out = m.cores[0].layers[0].mlp.dense_4h_to_h.weight.std().item()
    std_in = m.cores[0].layers[0].mlp.dense_h_to_4h.weight.std().item()
    assert abs(std_out - 0.02 / math.sqrt(2 * depth)) < 0.0005
    assert abs(std_in - 0.02) < 0.001
    assert abs(m.prelude.layers[0].attention.dense.weight.std().item() - 0.02 / math.sqrt(16)) < 0.0005
    x = tokens()
    _, tr = m(x, return_trace=True)
    torch.testing.assert_close(tr["h_emb"], m.embed_in(x) * 16.0)
    _, tr2 = RecursiveNeoX(replace(cfg, scale_embeddings=False))(x, return_trace=True)
    assert abs(tr2["h_emb"].std().item() - 0.02) < 0.005


@pytest.mark.parametrize("parallel", [True, False])
def test_vanilla_matches_hugging_face_gpt_neox(parallel):
    transformers = pytest.importorskip("transformers")
    hc = transformers.GPTNeoXConfig(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=64,
        rotary_pct=0.25,
        max_position_embeddings=64,
        use_parallel_residual=parallel,
        tie_word_embeddings=False,
    )
    torch.manual_seed(3)
    hf = transformers.GPTNeoXForCausalLM(hc).eval()
    from iclr26.mesh.pythia import map_gpt_neox_state_dict, pythia_config

    cfg = pythia_config(hc, scale_embeddings=False)
    assert cfg.layout == "3" and cfg.parallel_residual == parallel and cfg.d_ff == 64
    m = RecursiveNeoX(cfg)
    m.load_state_dict(map_gpt_neox_state_dict(hf.state_dict(), cfg))
    x = tokens(t=20)
    torch.testing.assert_close(m(x), hf(x).logits, atol=1e-5, rtol=1e-4)


def test_training_reduces_loss_and_router_grads_nonzero():
    torch.manual_seed(0)
    m = RecursiveNeoX(tiny(layout="1+1R2+1"))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    x = tokens(b=4, t=16)
    first = None
    for _ in range(15):
        loss = lm_loss(m, x)
        opt.zero_grad()
        loss.backward()
        if first is None:
            first = loss.item()
            grads = [p.grad for p in m.routers.parameters()]
            assert all(g is not None for g in grads) and sum(g.abs().sum() for g in grads) > 0
        opt.step()
    assert loss.item() < first - 0.3


def test_router_init_normal_is_uniform_and_passthrough_puts_prob_on_the_fresh_slot():
    from iclr26.mesh.model import passthrough_slots as slots_of

    cfg = MeshConfig(vocab_size=50, d_model=32, n_heads=2, layout="1+1R3+1", scheme="mesh", max_seq_len=16)
    x = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    _, tr = RecursiveNeoX(cfg)(x, return_trace=True)
    for w in tr["w_write"] + tr["w_read"]:
        assert torch.allclose(w.mean(dim=(0, 1)), torch.full((cfg.slots,), 1 / cfg.slots), atol=0.02)
    pt = replace(cfg, router_init="passthrough", router_init_prob=0.9)
    torch.manual_seed(0)
    m = RecursiveNeoX(pt)
    _, tr = m(x, return_trace=True)
    for (ws, rs), ww, wr in zip(slots_of(3), tr["w_write"], tr["w_read"]):
        assert float(ww[..., ws].mean()) == pytest.approx(0.9, abs=0.02)
        assert float(wr[..., rs].mean()) == pytest.approx(0.9, abs=0.02)
    z = math.log(0.9 * (cfg.slots - 1) / 0.1)
    assert float(m.routers.pairs[2].write.bias[3]) == pytest.approx(z)
    assert float(m.routers.pairs[2].write.bias[0]) == 0.0
    with pytest.raises(ValueError):
        replace(cfg, router_init="passthrough", buffer_size=4)  # needs B >= n_loop + 2 = 5
