"""The measurement functions of the reproduction on a tiny untrained tokenizer and AR."""

import pytest
import torch

from iclr26.d_ar.config import EvalConfig, small_gpt, small_tokenizer
from iclr26.d_ar.evaluate import group_swap_effect, layout_control, preview_mechanism, sample_images
from iclr26.d_ar.gpt import Transformer, reverse_tokens
from iclr26.d_ar.tokenizer import VQModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    tok = VQModel(small_tokenizer()).eval()
    with torch.no_grad():
        for name, p in tok.named_parameters():
            if name.endswith(("gate1", "gate2")) or "adaLN_modulation" in name or "conv_out" in name:
                p.normal_(0, 0.3)
    ar = Transformer(small_gpt(tok.cfg)).eval()
    torch.nn.init.normal_(ar.output.weight, 0, 0.5)
    return tok, ar


def test_preview_mechanism_flags_and_distances(models):
    tok, _ = models
    codes = torch.randint(0, 64, (6, 16))
    r = preview_mechanism(tok, codes, 0)
    assert r["follows_full_decode"] and r["depends_only_on_prefix"] and r["preview_K_is_final"]
    assert len(r["dist_to_final"]) == 4 and r["dist_to_final"][-1] == 0.0 and r["dist_to_final"][0] > 0


def test_group_swap_changes_are_per_group(models):
    tok, _ = models
    codes = torch.randint(0, 64, (6, 16))
    ch = group_swap_effect(tok, codes, 0)
    assert len(ch) == 4 and all(c > 0 for c in ch)
    assert ch == group_swap_effect(tok, codes, 0)  # same seed, same numbers


def test_layout_control_starts_from_the_reference_prefix(models):
    tok, ar = models
    x = torch.rand(40, 1, 8, 8) * 2 - 1
    y = torch.arange(40) % 10
    codes = tok.extract_code(x)
    res, imgs = layout_control(ar, tok, x, y, codes, 0, EvalConfig())
    assert torch.equal(imgs["controlled_codes"][:, :4], codes[:, :4])
    assert not torch.equal(imgs["controlled_codes"][:, 4], codes[:, 4])  # exactly one group is given
    assert (imgs["target"] != y).all()
    assert res["ratio"] == pytest.approx(res["dist_controlled"] / res["dist_free"])


def test_reversed_samples_are_unreversed_before_decoding(models):
    tok, ar = models
    labels = torch.tensor([1, 2])
    _, z_fwd = sample_images(ar, tok, labels, 3, False, EvalConfig())
    imgs_rev, z_rev = sample_images(ar, tok, labels, 3, True, EvalConfig())
    assert torch.equal(z_rev, reverse_tokens(z_fwd))  # same AR draws, read backwards
    noise = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(4))
    assert torch.equal(imgs_rev, tok.decode_code(z_rev, noise))


def test_tokenizer_loss_terms(models):
    from iclr26.d_ar.config import TokenizerTrain
    from iclr26.d_ar.train import repa_loss, tokenizer_loss

    tok, _ = models
    x = torch.rand(4, 1, 8, 8) * 2 - 1
    loss, parts = tokenizer_loss(
        tok,
        x,
        TokenizerTrain(recon_mse_weight=0.5, lpips_weight=0.5),
        lpips_fn=lambda a, b: (a - b).abs().mean((1, 2, 3)),
    )
    total = parts["fm"] + parts["vq"] + parts["commit"] + 0.5 * parts["recon_mse"] + 0.5 * parts["lpips"]
    assert float(loss) == pytest.approx(total, rel=1e-5) and parts["recon_mse"] > 0
    with pytest.raises(ValueError, match="LPIPS"):
        tokenizer_loss(tok, x, TokenizerTrain(lpips_weight=0.5))
    f = torch.randn(2, 3, 5)
    assert float(repa_loss(f, f)) == pytest.approx(0.0, abs=1e-6)
    assert float(repa_loss(f, -f)) == pytest.approx(2.0, abs=1e-6)
