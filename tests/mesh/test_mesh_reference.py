"""MeSH's forward against a reference written directly from the paper's equations, with random non-zero
router weights (a bias-only routing cannot tell which state the routers read).

Reference (paper Eqs. 4-5, transitional cycle first), slots as a plain Python list:

    m_0 = h_emb, m_b = 0 (b > 0)
    transitional: w_w, w_r = softmax(W_w h_pre + b_w), softmax(W_r h_pre + b_r)
                  m_b += w_w,b h_pre;  h^(0) = sum_b w_r,b m_b
    loop t:       h_m = f_core(h^(t));  w_w, w_r = softmax(W h^(t) + b)   (the core's INPUT)
                  m_b += w_w,b h_m;     h^(t+1) = sum_b w_r,b m_b
    logits = W_out LN(f_coda(h^(K)))
"""

import pytest
import torch

from iclr26.mesh.model import MeshConfig, RecursiveNeoX, rotary_cos_sin


def _softmax_linear(lin: torch.nn.Linear, h: torch.Tensor) -> torch.Tensor:
    return torch.softmax(h @ lin.weight.T + lin.bias, dim=-1)


def reference_logits(model: RecursiveNeoX, ids: torch.Tensor) -> torch.Tensor:
    cfg = model.cfg
    h_emb = model.embed_in(ids) * (cfg.d_model**0.5 if cfg.scale_embeddings else 1.0)
    cos, sin = rotary_cos_sin(torch.arange(ids.shape[1]), cfg.rotary_dims, cfg.rotary_base, h_emb.dtype)
    h_pre = model.prelude(h_emb, cos, sin)
    slots = [h_emb] + [torch.zeros_like(h_emb) for _ in range(cfg.slots - 1)]

    def cycle(pair, router_in, written):
        w_w, w_r = _softmax_linear(pair.write, router_in), _softmax_linear(pair.read, router_in)
        for b in range(cfg.slots):
            slots[b] = slots[b] + w_w[..., b : b + 1] * written
        return sum(w_r[..., b : b + 1] * slots[b] for b in range(cfg.slots))

    router_in = h_pre if cfg.transition_router_input == "h_pre" else h_emb
    h = cycle(model.routers.pairs[0], router_in, h_pre)
    for t in range(model.layout.n_loop):
        h_m = model.core(t)(h, cos, sin)
        h = cycle(model.routers.pairs[t + 1], h, h_m)
    return model.embed_out(model.final_layer_norm(model.coda(h, cos, sin)))


@pytest.mark.parametrize("impl", ["unrolled", "buffer"])
@pytest.mark.parametrize("transition", ["h_pre", "h_emb"])
def test_forward_equals_the_equations_with_random_routers(impl, transition):
    torch.manual_seed(0)
    cfg = MeshConfig(
        vocab_size=50,
        d_model=32,
        n_heads=2,
        layout="1+2R3+1",
        scheme="mesh",
        max_seq_len=64,
        mesh_impl=impl,
        transition_router_input=transition,
    )
    model = RecursiveNeoX(cfg).eval()
    with torch.no_grad():  # routers that depend strongly on their input
        for p in model.routers.parameters():
            p.normal_(0.0, 0.3)
    ids = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, want = model(ids), reference_logits(model, ids)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
