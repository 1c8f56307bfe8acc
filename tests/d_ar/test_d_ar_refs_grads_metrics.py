"""D-AR: which tensor feeds each loss, where gradients flow and stop, and metrics on asymmetric hand-computed inputs.

Gradient-flow table of the VQ step (official ``VectorQuantizer``: l2-normalised codes, straight-through):

=================  ====================  =====================
loss / output      encoder latent z      codebook embedding
=================  ====================  =====================
L_vq               exactly 0 (sg(z))     nonzero
L_commit           nonzero               exactly 0 (sg(e_c))
quantized (ST)     identity-like         exactly 0
=================  ====================  =====================

Flow matching: the velocity target is x1 - x0 (data minus noise) at x_tau = tau x1 + (1 - tau) x0.
AR: row j predicts image token j from the class token and tokens < j.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from iclr26.d_ar.config import small_tokenizer
from iclr26.d_ar.evaluate import unigram_nll
from iclr26.d_ar.gpt import GPTConfig, Transformer, guided_logits
from iclr26.d_ar.tokenizer import SequentialDiffusionDecoder, VectorQuantizer, VQModel, time_shift
from iclr26.d_ar.train import repa_loss


def _vq():
    torch.manual_seed(0)
    q = VectorQuantizer(8, 4, beta=0.25)
    z = torch.randn(2, 5, 4, requires_grad=True)
    return q, z


def _g(out, wrt):
    g = torch.autograd.grad(out, wrt, allow_unused=True, retain_graph=True)[0]
    return torch.zeros_like(wrt) if g is None else g


def test_vq_gradient_table():
    q, z = _vq()
    out = q(z, last_pos=torch.tensor([4, 2]))
    e = q.embedding.weight
    assert float(_g(out["vq_loss"], z).abs().max()) == 0.0
    assert float(_g(out["vq_loss"], e).abs().max()) > 0
    assert float(_g(out["commit_loss"], z).abs().max()) > 0
    assert float(_g(out["commit_loss"], e).abs().max()) == 0.0
    # straight-through: d quantized / d z = d normalize(z) / d z, nothing into the codebook
    w = torch.randn(2, 5, 4)
    zn = F.normalize(z, dim=-1)
    assert torch.allclose(_g((out["quantized"] * w).sum(), z), _g((zn * w).sum(), z), atol=1e-6)
    assert float(_g((out["quantized"] * w).sum(), e).abs().max()) == 0.0
    # the forward value is the chosen code
    assert torch.allclose(out["quantized"], q.codebook()[out["indices"]], atol=1e-6)


def test_vq_losses_hand_computed_with_last_pos_mask():
    """Means over positions <= last_pos of each image; commitment scaled by beta."""
    q, z = _vq()
    out = q(z, last_pos=torch.tensor([4, 2]))
    zn = F.normalize(z, dim=-1).detach()
    e = q.codebook()[out["indices"]].detach()
    per = (e - zn).pow(2).mean(-1)  # [2, 5]
    keep = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.float)
    want = float((per * keep).sum() / keep.sum())
    assert float(out["vq_loss"]) == pytest.approx(want, rel=1e-5)
    assert float(out["commit_loss"]) == pytest.approx(0.25 * want, rel=1e-5)
    assert abs(want - float(per[:, :].mean())) > 1e-4  # the mask matters on this input


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *a):
        return self.fn(*a)


def test_flow_matching_target_is_data_minus_noise():
    """With a net that returns exactly x1 - x0 the loss is 0 and x1_hat recovers the target; the net sees
    x_tau = tau x1 + (1 - tau) x0 at the shifted time."""
    cfg = small_tokenizer().diff_decoder
    dec = SequentialDiffusionDecoder(cfg, head_dim=16, rope_base=10000.0)
    torch.manual_seed(1)
    target, noise = torch.randn(2, 1, 8, 8), torch.randn(2, 1, 8, 8)
    t = torch.tensor([0.2, 0.7])
    seen = {}

    def oracle(xt, tau, cond):
        seen["xt"], seen["tau"] = xt, tau
        return target * dec.std - noise, None

    dec.net = _Fn(oracle)
    out = dec(target, torch.zeros(2, 4, 48), t, noise)
    tau = time_shift(t, dec.shift)
    assert torch.allclose(seen["tau"], tau)
    te = tau[:, None, None, None]
    assert torch.allclose(seen["xt"], te * target * dec.std + (1 - te) * noise, atol=1e-6)
    assert float(out["fm_loss"]) == pytest.approx(0.0, abs=1e-10)
    assert torch.allclose(out["x1_hat"], target, atol=1e-5)
    # the reversed velocity is penalised: ||2 (x1 - x0)||^2 / std^2 = 4 mean((x1 - x0)^2) / std^2
    dec.net = _Fn(lambda xt, tau, cond: (noise - target * dec.std, None))
    want = 4 * float((target * dec.std - noise).pow(2).mean()) / dec.std**2
    assert float(dec(target, torch.zeros(2, 4, 48), t, noise)["fm_loss"]) == pytest.approx(want, rel=1e-5)


def test_training_losses_mask_the_vq_loss_to_the_sampled_group():
    """Group k conditions the decoder; VQ losses count tokens up to (k+1)G - 1 (inclusive) only."""
    torch.manual_seed(0)
    tok = VQModel(small_tokenizer())
    x = torch.randn(2, 1, 8, 8)
    t = torch.tensor([0.0, 0.3])  # groups 0 and 1 (round rule, K = 4), G = 4 -> last positions 3 and 7
    out = tok.training_losses(x, t=t, noise=torch.randn_like(x))
    assert out["group"].tolist() == [0, 1]
    z = tok.quantize(tok.encode_latents(x))
    zn = F.normalize(tok.encode_latents(x), dim=-1)
    per = (tok.quantize.codebook()[z["indices"]] - zn).pow(2).mean(-1)
    keep = torch.zeros(2, 16)
    keep[0, :4] = 1
    keep[1, :8] = 1
    assert float(out["vq_loss"]) == pytest.approx(float((per * keep).sum() / keep.sum()), rel=1e-5)


def _gpt():
    torch.manual_seed(0)
    cfg = GPTConfig(dim=32, n_layer=2, n_head=4, multiple_of=16, num_classes=10, vocab_size=20, block_size=8)
    m = Transformer(cfg)
    torch.nn.init.normal_(m.output.weight, 0, 0.5)
    return m.eval()


def test_ar_loss_rows_predict_the_token_at_their_index_causally():
    m = _gpt()
    tok = torch.randint(0, 20, (3, 8), generator=torch.Generator().manual_seed(2))
    lab = torch.tensor([1, 4, 7])
    logits = m(tok[:, :-1], lab)
    assert logits.shape == (3, 8, 20)
    want = F.cross_entropy(logits.reshape(-1, 20), tok.reshape(-1))
    assert float(m.loss(tok, lab)) == pytest.approx(float(want), rel=1e-6)
    # row j does not see token j: changing token 5 leaves rows 0..5 unchanged, changes row 6
    tok2 = tok.clone()
    tok2[:, 5] = (tok[:, 5] + 1) % 20
    l2 = m(tok2[:, :-1], lab)
    assert torch.allclose(l2[:, :6], logits[:, :6], atol=1e-6)
    assert not torch.allclose(l2[:, 6], logits[:, 6], atol=1e-4)
    # the class token conditions row 0
    assert not torch.allclose(m(tok[:, :-1], lab + 1)[:, 0], logits[:, 0], atol=1e-4)


def test_ar_gradient_reaches_every_parameter_but_the_null_class_row_in_eval():
    m = _gpt()
    tok = torch.randint(0, 20, (3, 8), generator=torch.Generator().manual_seed(2))
    loss = m.loss(tok, torch.tensor([1, 4, 7]))
    named = dict(m.named_parameters())
    grads = dict(zip(named, torch.autograd.grad(loss, list(named.values()), allow_unused=True)))
    for n, g in grads.items():
        if n == "cls_embedding.embedding_table.weight":
            rows = g.abs().sum(-1)
            assert rows[[1, 4, 7]].min() > 0 and float(rows[[0, 2, 3, 5, 6, 8, 9, 10]].max()) == 0.0
        else:
            assert g is not None and float(g.abs().max()) > 0, n


def test_guidance_extrapolates_from_unconditional_towards_conditional():
    c = torch.tensor([2.0, 0.0, -1.0])
    u = torch.tensor([1.0, 0.5, 0.0])
    assert torch.allclose(guided_logits(c, u, 3.0), torch.tensor([4.0, -1.0, -3.0]))
    assert torch.equal(guided_logits(c, u, 1.0), c)


def test_unigram_nll_hand_computed():
    train = torch.tensor([0, 0, 0, 1])  # counts + 1: [4, 2, 1], total 7
    test = torch.tensor([1, 2, 2])
    want = -(math.log(2 / 7) + 2 * math.log(1 / 7)) / 3
    assert unigram_nll(train, test, 3) == pytest.approx(want)


def test_repa_loss_hand_computed():
    h = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]])
    f = torch.tensor([[[2.0, 0.0], [0.0, 3.0]]])  # cosines 1 and 1/sqrt(2)
    assert float(repa_loss(h, f)) == pytest.approx(1 - (1 + 1 / math.sqrt(2)) / 2)
