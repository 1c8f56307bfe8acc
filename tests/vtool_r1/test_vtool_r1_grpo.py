"""Trainable masks in both presets (8.4), GRPO math (8.5), KL (8.6), reduction (8.8), groups (8.9)."""

import copy

import numpy as np
import pytest
import torch

import iclr26.vtool_r1.rollout as R
from iclr26.core.grpo import group_advantages, grpo_loss
from iclr26.vtool_r1.charts import make_chart
from iclr26.vtool_r1.executor import ToolExecutor
from iclr26.vtool_r1.model import ANS_LEN, ID, Q_LEN, R1_LEN, TinyToolVLM, TinyVLMConfig
from iclr26.vtool_r1.vtool import KL_CLAMP, PRESETS, VToolConfig, dual_clip_policy_loss, grpo_step, vtool_loss

TINY = TinyVLMConfig(d_model=32, n_layers=1, n_heads=2)


def _pad(toks, n):
    return toks + [ID["PAD"]] * (n - len(toks))


def _scripted(monkeypatch, round1, round2):
    """Replace sampling: row i of round 1 emits round1[i]; round-2 rows emit round2 (in order of the calls:
    successful calls first, then failed ones)."""
    calls = {"n": 0, "round2_images": []}

    def fake(model, mode_ids, images, prefix, max_new, stop_ids, temperature, generator):
        calls["n"] += 1
        if max_new != R1_LEN:  # (rows, number of images, OBS token) of every round-2 call
            calls["round2_images"].append((prefix.shape[0], len(images), int(prefix[0, -1])))
        if max_new == R1_LEN:
            return torch.tensor([_pad(t, R1_LEN) for t in round1])
        done, n = len(calls["round2_images"]) - 1, prefix.shape[0]
        first = sum(rows for rows, _, _ in calls["round2_images"][:done])  # round-2 rows in order over calls
        return torch.tensor([_pad(round2[first + j], ANS_LEN) for j in range(n)])

    monkeypatch.setattr(R, "sample_tail", fake)
    return calls


def _batch():
    s = make_chart(np.random.default_rng(5), "VAL")
    lab = s.args[0]
    direct = [ID["DIRECT"], ID[s.answer], ID["EOS"]]
    good = [ID["CALL"], ID["MASK"], ID["COL"], ID[lab], ID["ENDCALL"]]
    broken = [ID["CALL"], ID["COL"], ID[lab], ID["ENDCALL"]]  # no op: unknown function -> fails
    return s, [direct, good, broken], [[ID[s.answer], ID["EOS"]], [ID["1"] if s.answer != "1" else ID["2"], ID["EOS"]]]


def test_masks_v2(monkeypatch):
    s, r1, r2 = _batch()
    calls = _scripted(monkeypatch, r1, r2)
    ro = R.rollout_tools(TinyToolVLM(TINY), [s] * 3, torch.zeros(3, dtype=torch.long), ToolExecutor(), 1.0, 1.0, "v2")
    m = ro.mask
    # direct: the 3 round-1 tokens are trainable (targets tail[Q..Q+2] predicted at Q-1..Q+1)
    assert m[0].nonzero().flatten().tolist() == [Q_LEN - 1, Q_LEN, Q_LEN + 1] and ro.n_images[0] == 1
    # tool ok and tool failed (v2 still runs round 2): only the answer + EOS; y' and OBS are 0
    for i in (1, 2):
        assert m[i].nonzero().flatten().tolist() == [Q_LEN + R1_LEN, Q_LEN + R1_LEN + 1]
        assert m[i, : Q_LEN + R1_LEN].sum() == 0
    assert ro.tool_ok.tolist() == [False, True, False] and ro.called.tolist() == [False, True, True]
    assert ro.tail[1, Q_LEN + R1_LEN] == ID["OBS"] and ro.tail[2, Q_LEN + R1_LEN] == ID["OBS_FAIL"]
    assert ro.rewards.tolist() == [1.0, 1.0, 0.0]  # reward of y (the final segment)
    # the failed call's round 2 gets the failure text only: no second (blank) image, in sampling and training
    assert ro.n_images.tolist() == [1, 2, 1] and not (ro.img2[1] == ro.img1[1]).all()
    assert sorted(calls["round2_images"]) == [(1, 1, ID["OBS_FAIL"]), (1, 2, ID["OBS"])]


def test_masks_v1_failure_trains_round1(monkeypatch):
    s, r1, r2 = _batch()
    _scripted(monkeypatch, r1, r2)
    ro = R.rollout_tools(
        TinyToolVLM(TINY), [s] * 3, torch.zeros(3, dtype=torch.long), ToolExecutor("v1"), 1.0, 0.5, "v1"
    )
    assert ro.n_images.tolist() == [1, 2, 1]  # v1: no round 2 after a failed call
    assert ro.mask[2].nonzero().flatten().tolist() == list(range(Q_LEN - 1, Q_LEN - 1 + 4))  # y' incl. ENDCALL
    assert ro.rewards[2] == 0.0 and ro.mask[1].nonzero().flatten().tolist() == [Q_LEN + R1_LEN, Q_LEN + R1_LEN + 1]
    # the non-paper variant trains y' on the tool path too
    _scripted(monkeypatch, r1, r2)
    ro2 = R.rollout_tools(
        TinyToolVLM(TINY),
        [s] * 3,
        torch.zeros(3, dtype=torch.long),
        ToolExecutor(),
        1.0,
        1.0,
        "v2",
        train_tool_tokens=True,
    )
    assert ro2.mask[1, Q_LEN - 1 : Q_LEN - 1 + 5].sum() == 5


def test_group_advantages_hand_values_and_bookkeeping(monkeypatch):
    adv = group_advantages(torch.tensor([1.0, 0, 0, 0, 0]), torch.zeros(5, dtype=torch.long))
    assert adv.tolist() == pytest.approx([1.7888534, -0.4472134, -0.4472134, -0.4472134, -0.4472134], abs=1e-5)
    assert group_advantages(torch.ones(4), torch.zeros(4, dtype=torch.long)).abs().sum() == 0
    # mixed paths inside one group: the group stays intact and select() keeps rows aligned
    s, r1, r2 = _batch()
    _scripted(monkeypatch, r1 * 2, r2 * 2)
    g = torch.tensor([0, 0, 0, 1, 1, 1])
    ro = R.rollout_tools(TinyToolVLM(TINY), [s] * 6, g, ToolExecutor(), 1.0, 1.0, "v2")
    a = group_advantages(ro.rewards, ro.group)
    perm = torch.tensor([5, 0, 3, 2, 4, 1])
    sub = ro.select(perm)
    assert torch.equal(sub.group, g[perm]) and torch.equal(sub.rewards, ro.rewards[perm])
    assert torch.equal(group_advantages(sub.rewards, sub.group), a[perm])


def test_clip_and_dual_clip():
    mask = torch.ones(1, 1)
    old = torch.zeros(1, 1)
    for r in (1.4, 2.0, 5.0):  # A > 0: above 1 + eps_high = 1.3 the loss is constant (-1.3 A) with zero grad
        lp = torch.full((1, 1), float(np.log(r)), requires_grad=True)
        loss = dual_clip_policy_loss(lp, old, torch.tensor([2.0]), mask, 0.2, 0.3, 3.0)
        loss.backward()
        assert float(loss.detach()) == pytest.approx(-1.3 * 2.0) and lp.grad.abs().item() == 0
    # A < 0 with a huge ratio: the dual clip caps the loss at 3 |A|
    lp = torch.full((1, 1), float(np.log(10.0)))
    assert float(dual_clip_policy_loss(lp, old, torch.tensor([-1.5]), mask, 0.2, 0.3, 3.0)) == pytest.approx(4.5)
    assert float(dual_clip_policy_loss(lp, old, torch.tensor([-1.5]), mask, 0.2, 0.3, None)) == pytest.approx(15.0)
    # A < 0, ratio below 1 - eps_low: clipped at 0.8
    lp = torch.full((1, 1), float(np.log(0.5)))
    assert float(dual_clip_policy_loss(lp, old, torch.tensor([-1.0]), mask)) == pytest.approx(0.8)


def test_token_mean_aggregation():
    lp = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1, 1], [1, 0, 0]])
    adv = torch.tensor([1.0, -2.0])
    # ratio 1: per-token loss -A; token mean = (3 * -1 + 1 * 2) / 4
    assert float(dual_clip_policy_loss(lp, lp, adv, mask)) == pytest.approx(-0.25)


def test_kl_term_is_verls_low_var_kl():
    """The KL term is k3 = exp(ref − logp) − (ref − logp) − 1 per token, clamped at 10 (verl's low_var_kl)."""
    from iclr26.core.grpo import kl_k3

    def low_var_kl(lp, ref):  # verl's formula, written out
        d = (ref - lp).clamp(-20, 20)
        return (torch.exp(d) - d - 1).clamp(-10, 10)

    one = torch.ones(1, 1)
    assert float(kl_k3(torch.zeros(1, 1), torch.full((1, 1), 30.0), one, clamp=KL_CLAMP)) == 10.0
    assert float(kl_k3(torch.zeros(1, 1), torch.ones(1, 1), one, clamp=KL_CLAMP)) == pytest.approx(np.e - 2)
    a, b = torch.randn(4, 50), torch.randn(4, 50) * 3
    mask = (torch.rand(4, 50) > 0.3).float()
    want = (low_var_kl(a, b) * mask).sum() / mask.sum()
    assert float(kl_k3(a, b, mask, clamp=KL_CLAMP)) == pytest.approx(float(want), rel=1e-5)
    # inside vtool_loss, with the policy term zero (adv = 0): loss = β · that mean
    cfg = VToolConfig(kl_coef=0.5)
    got = vtool_loss(a, a, b, torch.zeros(4), mask, cfg)
    assert float(got) == pytest.approx(0.5 * float(want), rel=1e-5)


def test_one_update_raises_positive_advantage_samples_and_lowers_negative_ones():
    """A sign error in the advantage or the surrogate flips both directions."""
    torch.manual_seed(0)
    model = TinyToolVLM(TINY)
    samples = [make_chart(np.random.default_rng(i)) for i in range(2) for _ in range(4)]
    g = torch.arange(2).repeat_interleave(4)
    gen = torch.Generator().manual_seed(0)
    ro = R.rollout_tools(model, samples, g, ToolExecutor(), 1.0, 1.0, "v2", gen, allow_tools=False)
    ro.rewards = torch.tensor([1.0, 0, 1, 0, 0, 1, 1, 0])
    adv = group_advantages(ro.rewards, ro.group)
    before = (R.sequence_logprobs(model, ro) * ro.mask).sum(1).detach()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    cfg = VToolConfig(group_size=4, n_prompts=2, kl_coef=0.0, minibatches=1, process_reward=0.0)
    grpo_step(model, copy.deepcopy(model), opt, ro, cfg, torch.Generator().manual_seed(1))
    after = (R.sequence_logprobs(model, ro) * ro.mask).sum(1).detach()
    delta = after - before
    assert (delta[adv > 0] > 0).all(), delta
    assert (delta[adv < 0] < 0).all(), delta


def test_tools_disabled_loss_equals_text_grpo_loss():
    torch.manual_seed(0)
    model = TinyToolVLM(TINY)
    ref = TinyToolVLM(TINY)
    samples = [make_chart(np.random.default_rng(i)) for i in range(3) for _ in range(4)]
    g = torch.arange(3).repeat_interleave(4)
    gen = torch.Generator().manual_seed(0)
    ro = R.rollout_tools(model, samples, g, ToolExecutor(), 1.0, 1.0, "v2", gen, allow_tools=False)
    assert (ro.n_images == 1).all() and not ro.tool_ok.any()
    ro.rewards = torch.tensor([1.0, 0, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0])  # varied rewards so advantages are non-zero
    cfg = VToolConfig(group_size=4, n_prompts=3)
    adv = group_advantages(ro.rewards, ro.group)
    lp = R.sequence_logprobs(model, ro)
    ref_lp = R.sequence_logprobs(ref, ro).detach()
    ours = vtool_loss(lp, lp.detach(), ref_lp, adv, ro.mask, cfg)
    # independent text-only GRPO: plain forward over the same single-image sequences + core.grpo.grpo_loss
    logits = model(ro.mode, [ro.img1], ro.tail)[:, :-1]
    tok_lp = logits.log_softmax(-1).gather(-1, ro.tail[:, 1:, None]).squeeze(-1)
    ref_logits = ref(ro.mode, [ro.img1], ro.tail)[:, :-1]
    ref_tok = ref_logits.log_softmax(-1).gather(-1, ro.tail[:, 1:, None]).squeeze(-1)
    theirs, _ = grpo_loss(tok_lp, tok_lp.detach(), ref_tok.detach(), adv, ro.mask, 0.2, 0.3, 0.01, "token_mean")
    assert float(ours.detach()) == pytest.approx(float(theirs.detach()), abs=1e-6)
    assert abs(float(ours.detach())) > 0


def test_grpo_step_runs_and_presets():
    assert PRESETS["v1"].group_size == 5 and PRESETS["v1"].round2_temperature == 0.5
    assert PRESETS["v2"].version == "v2" and PRESETS["v2"].kl_coef == 0.01
    with pytest.raises(ValueError):
        VToolConfig(version="v3")
    torch.manual_seed(0)
    model, ref = TinyToolVLM(TINY), TinyToolVLM(TINY)
    samples = [make_chart(np.random.default_rng(i)) for i in range(2) for _ in range(4)]
    g = torch.arange(2).repeat_interleave(4)
    gen = torch.Generator().manual_seed(1)
    ro = R.rollout_tools(model, samples, g, ToolExecutor(), 1.0, 1.0, "v2", gen)
    ro.rewards = torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 0])
    before = [p.detach().clone() for p in model.parameters()]
    stats = grpo_step(
        model, ref, torch.optim.AdamW(model.parameters(), lr=1e-2), ro, VToolConfig(group_size=4, n_prompts=2), gen
    )
    assert np.isfinite(stats["loss"])
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_round_two_sees_the_tool_output_pixel_for_pixel(monkeypatch):
    """Round 2 must be conditioned on I' (the tool's output), not on the original chart I."""
    from iclr26.vtool_r1.executor import ToolResult
    from iclr26.vtool_r1.model import detokenize_round1

    samples = [make_chart(np.random.default_rng(i)) for i in range(4)]
    a, b = next(c.args for c in (make_chart(np.random.default_rng(i)) for i in range(100)) if len(c.args) == 2)
    call = detokenize_round1([ID["CALL"], ID["MASK"], ID["COL"], ID[a], ID[b], ID["ENDCALL"]])
    monkeypatch.setattr(R, "detokenize_round1", lambda toks: call)  # every round 1 is this tool call

    class Inverting:  # a tool whose output differs from I in every pixel
        def execute_many(self, codes, images, bboxes):
            return [ToolResult(True, (255 - im).astype(np.uint8)) for im in images]

    seen = []
    real = R.sample_tail

    def spy(model, mode, images, *args, **kwargs):
        seen.append([np.array(im) for im in images])
        return real(model, mode, images, *args, **kwargs)

    monkeypatch.setattr(R, "sample_tail", spy)
    model = TinyToolVLM(TINY)
    g = torch.arange(2).repeat_interleave(2)
    ro = R.rollout_tools(model, samples, g, Inverting(), 1.0, 1.0, "v2", torch.Generator().manual_seed(0))
    assert ro.tool_ok.all() and (ro.n_images == 2).all()
    assert len(seen) == 2  # round 1 on [I], round 2 on [I, I']
    first, second = seen[1]
    expect = np.stack([255 - s.image for s in samples]).astype(np.uint8)
    np.testing.assert_array_equal(first, np.stack([s.image for s in samples]))
    np.testing.assert_array_equal(second, expect)
    np.testing.assert_array_equal(ro.img2, expect)


# ------------------------------------------------------------------------------ the small design's pieces
def test_a_patch_is_one_bar_column():
    from iclr26.vtool_r1.model import TinyVLMConfig

    s = make_chart(np.random.default_rng(3), "VAL")
    model = TinyToolVLM(TinyVLMConfig(d_model=32, n_layers=1, n_heads=2))
    p = model.patches(s.image[None])
    assert p.shape == (1, 8, 48 * 6 * 3)
    for k in range(8):  # patch k = the 6-px slot k over the full height, as [row][column][rgb]
        want = torch.tensor(s.image[:, 6 * k : 6 * k + 6].astype(np.float32) / 255.0 - 0.5).flatten()
        assert torch.allclose(p[0, k], want)
    lab = s.args[0]
    k = s.bboxes[lab]["x1"] // 6  # the asked bar's slot is exactly one patch
    assert s.bboxes[lab]["x2"] == 6 * k + 5


def test_sft_second_slot_puts_the_asked_chart_second():
    from iclr26.vtool_r1.vtool import SFTConfig, sft_batch

    samples = [make_chart(np.random.default_rng(i), "MAX") for i in range(6)]
    rng = np.random.default_rng(0)
    b = sft_batch(samples, rng, "pure", SFTConfig(second_slot=1.0), ToolExecutor())
    assert b.n_images.tolist() == [2] * 6
    for i, s in enumerate(samples):
        assert (b.img2[i] == s.image).all() and (b.img1[i] == samples[(i + 1) % 6].image).all()
        assert b.tail[i, Q_LEN] == ID[s.answer]  # the answer is the second chart's
    b0 = sft_batch(samples, rng, "pure", SFTConfig(second_slot=0.0), ToolExecutor())
    assert b0.n_images.tolist() == [1] * 6 and all((b0.img1[i] == s.image).all() for i, s in enumerate(samples))


def test_round2_sft_edits_are_random_unless_informative():
    from PIL import Image

    from iclr26.vtool_r1.model import VOCAB
    from iclr26.vtool_r1.tools import apply_tool
    from iclr26.vtool_r1.vtool import SFTConfig, sft_batch

    samples = [make_chart(np.random.default_rng(i), "VAL") for i in range(64)]

    def asked_edit_share(informative):
        cfg = SFTConfig(round1_share=0.0, pure_mix=0.0, informative_edit=informative)  # round-2 examples only
        b = sft_batch(samples, np.random.default_rng(1), "tools", cfg, ToolExecutor())
        same = []
        for i, s in enumerate(samples):
            op, labels = VOCAB[int(b.tail[i, Q_LEN + 1])].lower(), [VOCAB[int(t)] for t in b.tail[i, Q_LEN + 3 :]]
            labels = labels[: labels.index("ENDCALL")]
            want = apply_tool(Image.fromarray(s.image), labels, s.bboxes, axis="columns", op=op)
            same.append((np.asarray(want.convert("RGB")) == b.img2[i]).all())
        return np.mean(same)

    assert asked_edit_share(1.0) == 1.0
    assert asked_edit_share(0.0) < 0.8  # random labels: mostly not the edit the call asked for


def test_read_second_image_shows_the_chart_as_image_2(monkeypatch):
    samples = [make_chart(np.random.default_rng(i), "MAX") for i in range(5)]
    seen = {}

    def fake(model, mode_ids, images, prefix, max_new, stop_ids, temperature, generator):
        seen["images"], seen["mode"] = images, mode_ids
        # answer from image 2 only: the tallest bar's height read off the pixels (grey bar, 4 px per unit)
        ans = []
        for img in images[1]:
            grey = (img == [110, 110, 110]).all(-1)
            ans.append(_pad([ID[str(int(grey.sum(0).max() // 4))], ID["EOS"]], ANS_LEN))
        return torch.tensor(ans)

    monkeypatch.setattr(R, "sample_tail", fake)
    assert R.read_second_image(TinyToolVLM(TINY), samples) == 1.0
    assert len(seen["images"]) == 2 and (seen["mode"] == ID["PURE"]).all()
    for i, s in enumerate(samples):
        assert (seen["images"][1][i] == s.image).all() and (seen["images"][0][i] == samples[(i + 1) % 5].image).all()
