"""APTEmbedding: frozen table, parameter budget, mean pooling, context dependence, roles, bad input."""

import math

import pytest
import torch
from torch import nn

from iclr26.apt import APTEmbedding, ContextualEmbedding, added_parameters

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _module(c=5, d=8, v=6, **kw):
    torch.manual_seed(0)
    return APTEmbedding(torch.randn(c, d), v, hidden=16, **kw)


def test_static_table_bit_identical_and_only_prompts_proj_mlp_train():
    m = _module()
    before = m.static.clone()
    names = {n for n, _ in m.named_parameters()}
    assert "static" not in names and not m.static.requires_grad
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    for _ in range(4):
        opt.zero_grad()
        m(torch.tensor([0, 1, 4]), torch.randn(3, 6), "detection").pow(2).sum().backward()
        opt.step()
    assert torch.equal(m.static, before)
    assert m.prompt_det.grad is not None and m.visual_proj.weight.grad is not None
    assert m.fusion[0].weight.grad is not None and m.prompt_rel.grad is None  # relation prompt unused here


@pytest.mark.parametrize("per_class", [True, False])
def test_added_parameter_formula_equals_count(per_class):
    m = APTEmbedding(torch.randn(7, 12), 10, prompt_len=3, hidden=9, per_class=per_class)
    count = sum(p.numel() for p in m.parameters())
    assert count == added_parameters(7, 12, 10, 9, 3, per_class)


def test_added_parameters_official_code_sizes_hand_value():
    # shared prompts 2·5·300 + φ 2048·300 + 300 + f_θ 900·512 + 512 + 512·300 + 300 (official CoreModule defaults)
    assert added_parameters(1, 300, 2048, 512, 5, per_class=False) == 3000 + 614700 + 461312 + 153900 == 1232912
    # per-class prompts for VG150: 150·6·300 + 50·6·300 added to the same projector and MLP
    assert (
        added_parameters((150, 50), 300, 2048, 512, 6, True) - added_parameters((150, 50), 300, 2048, 512, 6, False)
        == 150 * 6 * 300 + 50 * 6 * 300 - 2 * 6 * 300
    )


def test_equal_token_means_give_equal_outputs():
    m = _module()
    ids, vis = torch.tensor([0, 2, 3]), torch.randn(3, 6)
    out1 = m(ids, vis, "detection")
    with torch.no_grad():
        shift = torch.randn(m.prompt_det.shape[-1])
        m.prompt_det[:, 0] += shift  # same token mean: +shift on token 0, -shift on token 1
        m.prompt_det[:, 1] -= shift
    assert torch.allclose(m(ids, vis, "detection"), out1, atol=1e-6)
    with torch.no_grad():
        m.prompt_det[:, 0] += shift  # now the mean moves
    assert not torch.allclose(m(ids, vis, "detection"), out1, atol=1e-4)


def test_visual_context_changes_embedding_and_zero_projector_removes_it():
    m = _module()
    ids = torch.tensor([1, 1])
    vis = torch.randn(2, 6)
    out = m(ids, vis)
    assert not torch.allclose(out[0], out[1], atol=1e-4)  # same class, different v
    with torch.no_grad():
        m.visual_proj.weight.zero_()
        m.visual_proj.bias.zero_()
    out = m(ids, vis)
    assert torch.allclose(out[0], out[1], atol=1e-7)


def test_static_embedding_feeds_the_output():
    m = _module()
    ids, vis = torch.tensor([0, 1]), torch.randn(2, 6)
    out = m(ids, vis)
    m.static[0] += 1.0
    new = m(ids, vis)
    assert not torch.allclose(new[0], out[0], atol=1e-4) and torch.allclose(new[1], out[1])


def test_prompt_of_class_c_touches_only_class_c():
    m = _module()
    ids, vis = torch.tensor([0, 1, 2, 3, 4, 2]), torch.randn(6, 6)
    out = m(ids, vis, "detection")
    with torch.no_grad():
        m.prompt_det[2] += 0.5
    new = m(ids, vis, "detection")
    changed = ~torch.isclose(new, out, atol=1e-6).all(-1)
    assert changed.tolist() == [False, False, True, False, False, True]


def test_roles_detection_uses_det_prompt_others_relation_prompt():
    m = _module()
    ids, vis = torch.tensor([0, 3]), torch.randn(2, 6)
    outs = {r: m(ids, vis, r) for r in ("detection", "subject", "object", "general")}
    assert torch.allclose(outs["subject"], outs["object"]) and torch.allclose(outs["subject"], outs["general"])
    with torch.no_grad():
        m.prompt_rel += 0.5
    assert torch.allclose(m(ids, vis, "detection"), outs["detection"])
    assert not torch.allclose(m(ids, vis, "subject"), outs["subject"], atol=1e-4)
    with pytest.raises(ValueError, match="role"):
        m(ids, vis, "predicate")


def test_shared_prompt_mode_is_the_same_for_every_class():
    m = _module(per_class=False)
    assert m.prompt_det.shape == (6, 8)
    with torch.no_grad():
        m.fusion[0].weight[:, 8:16] = 0  # drop e_static: output now depends on the shared prompt and v only
    vis = torch.randn(1, 6).expand(3, 6)
    out = m(torch.tensor([0, 1, 4]), vis)
    assert torch.allclose(out[0], out[1]) and torch.allclose(out[0], out[2])


def test_all_classes_equals_forward_per_class():
    m = _module()
    vis = torch.randn(4, 6)
    full = m.all_classes(vis, "subject")
    for c in range(5):
        ref = m(torch.full((4,), c), vis, "subject")
        assert torch.allclose(full[:, c], ref, atol=1e-5)


def test_bad_inputs_raise_with_expected_shape():
    m = _module()
    with pytest.raises(IndexError, match=r"\[0, 5\)"):
        m(torch.tensor([5]), torch.randn(1, 6))
    with pytest.raises(IndexError):
        m(torch.tensor([-1]), torch.randn(1, 6))
    with pytest.raises(ValueError, match=r"\(2, 6\)"):
        m(torch.tensor([0, 1]), torch.randn(2, 7))
    bad = torch.randn(3, 4)
    bad[1, 2] = math.nan
    with pytest.raises(ValueError, match="non-finite"):
        APTEmbedding(bad, 6)
    trainable = nn.Embedding(4, 8)
    with pytest.raises(ValueError, match="freeze=True"):
        APTEmbedding(trainable, 6)
    m2 = APTEmbedding(trainable, 6, freeze=True)
    assert torch.equal(m2.static, trainable.weight.detach()) and not m2.static.requires_grad


def test_wrap_swaps_embedding_tables():
    class Toy(nn.Module):
        def __init__(self):
            super().__init__()
            self.ctx = nn.Module()
            self.ctx.obj_embed1 = nn.Embedding(6, 8)
            self.rel_embed = nn.Embedding(4, 8)

    toy = Toy()
    table = toy.ctx.obj_embed1.weight.detach().clone()
    wrapped = APTEmbedding.wrap(toy, {"ctx.obj_embed1": "detection", "rel_embed": "general"}, 5, hidden=8)
    assert isinstance(toy.ctx.obj_embed1, ContextualEmbedding) and set(wrapped) == {"ctx.obj_embed1", "rel_embed"}
    assert torch.equal(toy.ctx.obj_embed1.weight, table) and toy.ctx.obj_embed1.num_embeddings == 6
    with pytest.raises(RuntimeError, match="set_visual"):
        toy.ctx.obj_embed1(torch.tensor([0]))
    toy.ctx.obj_embed1.set_visual(torch.randn(2, 5))
    assert toy.ctx.obj_embed1(torch.tensor([0, 5])).shape == (2, 8)
    assert all("static" not in n for n, _ in toy.named_parameters())
    with pytest.raises(TypeError, match="nn.Embedding"):
        APTEmbedding.wrap(toy, ["ctx"], 5)
