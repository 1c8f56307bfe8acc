"""The sequential diffusion tokenizer: config parity, masks, causality, schedules, sampler, VQ."""

import math
from dataclasses import replace

import pytest
import torch

from iclr26.d_ar.config import small_tokenizer
from iclr26.d_ar.tokenizer import (
    DiffDecoderConfig,
    TokenizerConfig,
    VectorQuantizer,
    VQModel,
    patchify,
    sampling_grid,
    time_shift,
    training_group,
    unpatchify,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# configs/tokenizer_v1.yaml of the official code (showlab/D-AR), key for key.
TOKENIZER_V1 = {
    "encoder_patch_size": 16,
    "num_encoder_layers": 8,
    "num_decoder_layers": 8,
    "query_low_rank": True,
    "encoder_dim": 768,
    "decoder_dim": 768,
    "vq_dim": 8,
    "vq_codebook_size": 16384,
    "num_denoising_steps": 8,
    "num_query_groups": 8,
    "num_all_queries": 256,
    "queries_per_step": 32,
    "vq_enable": True,
    "diff_decoder": {
        "in_dim": 3,
        "out_dim": 3,
        "dim": 768,
        "cond_dim": 768,
        "patch_size": 8,
        "depth": 12,
        "data_std": 0.6,
        "time_shift": 2,
        "mlp_head": False,
        "share_time_encoding": False,
    },
}


def tiny_cfg(**kw) -> TokenizerConfig:
    return replace(small_tokenizer(), **kw)


@pytest.fixture(scope="module")
def tok():
    torch.manual_seed(0)
    m = VQModel(tiny_cfg()).eval()
    with torch.no_grad():  # open the zero-initialised gates / output conv so every path carries signal
        for name, p in m.named_parameters():
            if name.endswith("gate1") or name.endswith("gate2") or "adaLN_modulation" in name or "conv_out" in name:
                p.normal_(0, 0.3)
    return m


def test_paper_preset_equals_tokenizer_v1():
    assert TokenizerConfig.from_official(TOKENIZER_V1) == TokenizerConfig()
    c = TokenizerConfig()
    assert (c.num_all_queries, c.num_query_groups, c.queries_per_step, c.vq_codebook_size, c.vq_dim) == (
        256,
        8,
        32,
        16384,
        8,
    )
    assert (c.diff_decoder.time_shift, c.diff_decoder.data_std, c.diff_decoder.patch_size, c.diff_decoder.depth) == (
        2,
        0.6,
        8,
        12,
    )
    assert (c.encoder_patch_size, c.num_encoder_layers, c.num_decoder_layers, c.encoder_dim, c.head_dim) == (
        16,
        8,
        8,
        768,
        64,
    )
    assert c.group_rule == "round"


def test_official_config_unknown_keys_and_unsupported_options_are_errors():
    with pytest.raises(ValueError, match="does not know"):
        TokenizerConfig.from_official({**TOKENIZER_V1, "mystery": 1})
    with pytest.raises(ValueError, match="mlp_head"):
        TokenizerConfig.from_official(
            {**TOKENIZER_V1, "diff_decoder": {**TOKENIZER_V1["diff_decoder"], "mlp_head": True}}
        )


def test_paper_tokenizer_size_on_meta_device():
    with torch.device("meta"):
        m = VQModel(TokenizerConfig())
    n = sum(p.numel() for p in m.parameters())
    assert 290e6 < n < 320e6  # ~300M (paper / README of the official code)
    dec = sum(p.numel() for p in m.diff_decoder.parameters())
    assert 170e6 < dec < 200e6  # ~185M pixel decoder


def test_time_grid_k8_s2_matches_official_values():
    tau = time_shift(torch.tensor(sampling_grid(8) + [1.0]), 2.0)
    expected = [0, 0.0667, 0.1429, 0.2308, 0.3333, 0.4545, 0.6000, 0.7778, 1.0]
    assert torch.allclose(tau, torch.tensor(expected), atol=1e-4)
    t = torch.linspace(0, 1, 11)
    assert torch.allclose(time_shift(t, 1.0), t)
    assert (time_shift(t, 2.0)[1:-1] < t[1:-1]).all()


def test_training_group_rules():
    t = torch.tensor([0.0, 0.06, 0.0625, 0.13, 0.2, 0.5, 0.93, 0.95, 1.0])
    assert training_group(t, 8, "round").tolist() == [0, 0, 1, 1, 2, 4, 7, 7, 7]
    assert training_group(t, 8, "ceil").tolist() == [0, 0, 0, 1, 1, 3, 7, 7, 7]
    with pytest.raises(ValueError):
        training_group(t, 8, "floor")


def test_patchify_round_trip_and_channel_order():
    x = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).reshape(2, 3, 4, 4)
    p = patchify(x, 2)
    assert p.shape == (2, 12, 2, 2)
    assert torch.equal(p[0, :4, 0, 0], torch.tensor([0.0, 1, 4, 5]))  # (c, p1, p2) order of the official Patcher
    assert torch.equal(unpatchify(p, 2), x)


def test_encoder_mask_pattern(tok):
    P, N = 16, tok.cfg.num_all_queries
    m = tok.encoder_mask(P)
    assert m[:P, :P].all() and not m[:P, P:].any()  # patches see patches only
    assert m[P:, :P].all()  # queries see every patch
    assert torch.equal(m[P:, P:], torch.ones(N, N, dtype=torch.bool).tril())  # causal among queries


def test_token_i_unchanged_when_later_queries_change(tok):
    x = torch.rand(3, 1, 8, 8) * 2 - 1
    base = tok.encode_latents(x)
    i = 6
    with torch.no_grad():
        saved = tok.query_embedding.weight.clone()
        tok.query_embedding.weight[i + 1 :] += torch.randn_like(tok.query_embedding.weight[i + 1 :])
        moved = tok.encode_latents(x)
        tok.query_embedding.weight[i] += 1.0
        moved_i = tok.encode_latents(x)
        tok.query_embedding.weight.copy_(saved)
    assert torch.allclose(moved[:, : i + 1], base[:, : i + 1], atol=1e-6)
    assert not torch.allclose(moved[:, i + 1 :], base[:, i + 1 :], atol=1e-4)
    assert not torch.allclose(moved_i[:, i], base[:, i], atol=1e-4)


def test_encoder_uses_the_image_through_patches(tok):
    x = torch.rand(2, 1, 8, 8) * 2 - 1
    y = x.clone()
    y[:, :, :2, :2] += 0.5
    assert not torch.allclose(tok.encode_latents(x), tok.encode_latents(y), atol=1e-4)


def test_conditioning_is_causal_by_token(tok):
    codes = torch.randint(0, 64, (2, 16))
    other = codes.clone()
    other[:, 9:] = (other[:, 9:] + 1) % 64
    a, b = tok.cond_from_codes(codes), tok.cond_from_codes(other)
    assert torch.equal(a[:, :9], b[:, :9])
    assert not torch.allclose(a[:, 9], b[:, 9], atol=1e-5)


def test_previews_depend_only_on_their_groups_and_preview_K_is_final(tok):
    codes = torch.randint(0, 64, (4, 16))
    eps = torch.randn(4, 1, 8, 8)
    full = tok.decode_code(codes, eps)
    assert torch.equal(tok.decode_code(codes, eps, clip_steps=4), full)
    for k in (1, 2, 3):
        other = codes.clone()
        other[:, 4 * k :] = torch.randint(0, 64, other[:, 4 * k :].shape)
        assert torch.equal(tok.decode_code(other, eps, clip_steps=k), tok.decode_code(codes, eps, clip_steps=k))
    changed = codes.clone()
    changed[:, 4:8] = (changed[:, 4:8] + 7) % 64
    assert not torch.allclose(tok.decode_code(changed, eps, clip_steps=2), tok.decode_code(codes, eps, clip_steps=2))


def test_preview_follows_full_trajectory_then_jumps(tok):
    codes = torch.randint(0, 64, (2, 16))
    eps = torch.randn(2, 1, 8, 8)
    full_traj, prev_traj = [], []
    tok.decode_code(codes, eps, trajectory=full_traj)
    tok.decode_code(codes, eps, clip_steps=2, trajectory=prev_traj)
    assert len(full_traj) == 4 and len(prev_traj) == 2
    assert all(torch.equal(a, b) for a, b in zip(prev_traj, full_traj[:2], strict=True))


class _Recorder(torch.nn.Module):
    """Stand-in velocity net: a fixed velocity function of (x, tau), recording its inputs."""

    def __init__(self, fn):
        super().__init__()
        self.fn, self.calls = fn, []

    def forward(self, x, t, cond):
        self.calls.append((x.clone(), t.clone(), cond.clone()))
        return self.fn(x, t), None


def _decoder_with(fn, shift=2.0, std=0.6):
    cfg = replace(
        small_tokenizer(), diff_decoder=replace(small_tokenizer().diff_decoder, time_shift=shift, data_std=std)
    )
    m = VQModel(cfg).eval()
    m.diff_decoder.net = _Recorder(fn)
    return m


@pytest.mark.parametrize("method", ["euler", "adams2"])
def test_oracle_velocity_reaches_x1_exactly(method):
    x_data = torch.rand(3, 1, 8, 8) * 2 - 1
    eps = torch.randn(3, 1, 8, 8)
    std = 0.6
    m = _decoder_with(lambda x, t: std * x_data - eps, std=std)  # straight path: v = x1 - x0 everywhere
    codes = torch.randint(0, 64, (3, 16))
    out = m.decode_code(codes, eps, method=method)
    assert torch.allclose(out, x_data, atol=1e-5)


def test_ab2_coefficients_after_an_euler_step():
    m = _decoder_with(lambda x, t: torch.ones_like(x) * (1 + 10 * t[:, None, None, None]))
    eps = torch.zeros(1, 1, 8, 8)
    out = m.decode_code(torch.zeros(1, 16, dtype=torch.long), eps, method="adams2")
    tau = time_shift(torch.tensor(sampling_grid(4) + [1.0]), 2.0)
    v = 1 + 10 * tau[:-1]
    h = tau[1:] - tau[:-1]
    x = h[0] * v[0] + sum(h[i] * (1.5 * v[i] - 0.5 * v[i - 1]) for i in range(1, 4))
    assert torch.allclose(out, torch.full_like(out, float(x) / 0.6), atol=1e-5)
    calls = m.diff_decoder.net.calls
    assert [round(float(c[1][0]), 4) for c in calls] == [round(float(t), 4) for t in tau[:-1]]


def test_sampling_step_i_uses_group_i():
    m = _decoder_with(lambda x, t: torch.zeros_like(x))
    codes = torch.randint(0, 64, (2, 16))
    m.decode_code(codes, torch.zeros(2, 1, 8, 8))
    cond = m.cond_from_codes(codes)
    for i, call in enumerate(m.diff_decoder.net.calls):
        assert torch.equal(call[2], cond[:, 4 * i : 4 * i + 4])


def test_training_pass_conditions_on_the_sampled_group_and_masks_vq_losses():
    torch.manual_seed(0)
    m = VQModel(tiny_cfg())
    seen = {}

    def fake(target, cond, t, noise=None):
        seen["cond"], seen["t"] = cond, t
        return {"fm_loss": cond.sum() * 0, "x1_hat": target, "h_repa": None, "tau": t}

    m.diff_decoder.forward = fake
    x = torch.rand(3, 1, 8, 8) * 2 - 1
    t = torch.tensor([0.0, 0.3, 0.95])  # groups 0, 1, 3 under round(tK)
    out = m.training_losses(x, t=t)
    cond = m.cond_from_codes(out["indices"])
    for b, k in enumerate([0, 1, 3]):
        assert torch.allclose(seen["cond"][b], cond[b, 4 * k : 4 * k + 4], atol=1e-6)
    assert out["group"].tolist() == [0, 1, 3]


def test_fm_loss_and_jump_estimate_algebra():
    x_data = torch.rand(2, 1, 8, 8) * 2 - 1
    eps = torch.randn(2, 1, 8, 8)
    m = _decoder_with(lambda x, t: 0.6 * x_data - eps)
    out = m.diff_decoder(x_data, torch.zeros(2, 4, 48), torch.tensor([0.3, 0.8]), noise=eps)
    assert float(out["fm_loss"]) < 1e-10
    assert torch.allclose(out["x1_hat"], x_data, atol=1e-5)
    assert torch.allclose(out["tau"], time_shift(torch.tensor([0.3, 0.8]), 2.0))


def test_vq_l2_normalised_argmin_is_argmax_cosine_and_straight_through():
    torch.manual_seed(0)
    vq = VectorQuantizer(32, 4)
    z = torch.randn(2, 5, 4, requires_grad=True)
    out = vq(z)
    zn = torch.nn.functional.normalize(z, dim=-1)
    assert torch.equal(out["indices"], (zn @ vq.codebook().T).argmax(-1))
    assert torch.allclose(vq.codebook().norm(dim=-1), torch.ones(32))
    assert torch.allclose(out["quantized"], vq.codebook()[out["indices"]], atol=1e-6)
    w = torch.randn(2, 5, 4)
    (g_q,) = torch.autograd.grad((out["quantized"] * w).sum(), z)
    (g_n,) = torch.autograd.grad((torch.nn.functional.normalize(z, dim=-1) * w).sum(), z)
    assert torch.allclose(g_q, g_n, atol=1e-6)  # straight-through: d z_q / d z_n = identity


def test_vq_losses_ignore_tokens_after_the_group():
    torch.manual_seed(0)
    vq = VectorQuantizer(32, 4)
    z = torch.randn(2, 8, 4)
    last = torch.tensor([3, 5])
    a = vq(z, last_pos=last)
    z2 = z.clone()
    z2[0, 4:] = torch.randn(4, 4)
    z2[1, 6:] = torch.randn(2, 4)
    b = vq(z2, last_pos=last)
    assert torch.allclose(a["vq_loss"], b["vq_loss"]) and torch.allclose(a["commit_loss"], b["commit_loss"])
    z3 = z.clone()
    z3[0, 3] = torch.randn(4)
    assert not torch.allclose(vq(z3, last_pos=last)["vq_loss"], a["vq_loss"])
    zn = torch.nn.functional.normalize(z, dim=-1)
    e = vq.codebook()[a["indices"]]
    per = (e - zn).pow(2).mean(-1)
    mask = torch.arange(8)[None] <= last[:, None]
    assert torch.allclose(a["vq_loss"], per[mask].mean())
    assert torch.allclose(a["commit_loss"], 0.25 * per[mask].mean())


def test_decode_rejects_bad_codes(tok):
    with pytest.raises(ValueError):
        tok.decode_code(torch.full((1, 16), 64))
    with pytest.raises(ValueError):
        tok.decode_code(torch.zeros(1, 15, dtype=torch.long))
    with pytest.raises(ValueError):
        tok.diff_decoder.sample([torch.zeros(1, 4, 48)], [0.0], torch.zeros(1, 1, 8, 8), clip_steps=0)


def test_bad_config_is_an_error():
    with pytest.raises(ValueError):
        TokenizerConfig(num_all_queries=2048)
    with pytest.raises(ValueError):
        TokenizerConfig(diff_decoder=DiffDecoderConfig(cond_dim=512))
    assert math.isclose(time_shift(0.5, 2.0), 1 / 3)


def test_sampler_clips_its_own_schedule():
    m = _decoder_with(lambda x, t: torch.ones_like(x))
    conds = [torch.zeros(1, 4, 48)] * 4
    out = m.diff_decoder.sample(conds, sampling_grid(4), torch.zeros(1, 1, 8, 8), "euler", clip_steps=2)
    assert len(m.diff_decoder.net.calls) == 2
    assert torch.allclose(out, torch.full_like(out, 1.0 / 0.6))  # from tau_0 = 0 straight to 1 with v = 1


def test_rope2d_angles_follow_the_flux_layout(tok):
    from iclr26.d_ar.tokenizer import rope2d_angles

    base = 100.0
    ang = rope2d_angles(3, 4, 8, base)  # axis width 4: frequencies 1, base^-0.5 per axis
    r, c = 2, 3
    expected = torch.tensor([r, r * base**-0.5, c, c * base**-0.5])
    assert ang.shape == (12, 4) and torch.allclose(ang[r * 4 + c], expected)
    enc = tok.encoder_rope_angles(4, 4)
    assert enc.shape == (16 + 16, 8)
    assert torch.equal(enc[:16], rope2d_angles(4, 4, 16, tok.cfg.rope_base)) and not enc[16:].any()


def test_vq_losses_cover_exactly_the_tokens_up_to_the_sampled_group():
    torch.manual_seed(0)
    m = VQModel(tiny_cfg())
    x = torch.rand(2, 1, 8, 8) * 2 - 1
    t = torch.tensor([0.3, 0.7])  # groups 1 and 3 (round): last positions 7 and 15
    out = m.training_losses(x, t=t)
    zn = torch.nn.functional.normalize(m.encode_latents(x), dim=-1)
    per = (m.quantize.codebook()[out["indices"]] - zn).pow(2).mean(-1)
    mask = torch.arange(16)[None] <= torch.tensor([[7], [15]])
    assert torch.allclose(out["vq_loss"], per[mask].mean(), atol=1e-6)
