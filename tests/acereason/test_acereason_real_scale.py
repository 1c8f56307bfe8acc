"""The real scale's pieces on a stand-in causal LM whose next-token logits z are the same at every position:
then H_T of its own rollouts at T is exactly the entropy of softmax(z / T), so T* and the H_T grid can be
checked against closed-form values, and the temperature each rollout was sampled at is recorded."""

import random
from types import SimpleNamespace

import pytest
import torch

from iclr26.acereason.config import RealConfig, config_for
from iclr26.acereason.entropy import token_entropy
from iclr26.acereason.experiment import CLAIMS
from iclr26.acereason.real import (
    answer_reward,
    calibrate_on_rollouts,
    grpo_step,
    make_problems,
    rollout_entropy_at,
    sample,
)
from iclr26.acereason.rl import OnPolicyGRPOConfig

Z = torch.tensor([3.0, 1.0, 0.5, 0.0, -1.0, -2.0])  # token 5 = EOS (rare at low T)


class _Enc(dict):
    def to(self, device):
        return self


class FakeTok:
    chat_template = None
    eos_token_id = 5
    pad_token = "<eos>"
    pad_token_id = 5
    padding_side = "right"

    def __call__(self, texts, return_tensors="pt", padding=True):
        n = len(texts)
        return _Enc(input_ids=torch.zeros(n, 2, dtype=torch.long), attention_mask=torch.ones(n, 2, dtype=torch.long))

    def batch_decode(self, ids, skip_special_tokens=True):
        return [" ".join(str(int(t)) for t in row if int(t) != 5) for row in ids]


class _Cache:
    def batch_repeat_interleave(self, repeats):
        pass


class FakeLM(torch.nn.Module):
    """Context-free LM: logits z at every position (with or without a KV cache); counts its forward calls."""

    def __init__(self, z=Z):
        super().__init__()
        self.z = torch.nn.Parameter(z.clone())
        self.calls = 0

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False, **kw):
        self.calls += 1
        cache = past_key_values if past_key_values is not None else (_Cache() if use_cache else None)
        return SimpleNamespace(logits=self.z.expand(*input_ids.shape, -1) * 1.0, past_key_values=cache)


def _recording(monkeypatch):
    """Wrap ``real.sample`` to record the temperature of every rollout batch."""
    from iclr26.acereason import real

    seen: list[float] = []
    orig = real.sample

    def rec(model, tok, problems, temperature, *a, **kw):
        seen.append(float(temperature))
        return orig(model, tok, problems, temperature, *a, **kw)

    monkeypatch.setattr(real, "sample", rec)
    return seen


def _rc(**kw):
    return RealConfig(**{"calib_prompts": 2, "group_size": 4, "max_new_tokens": 6, "tol": 0.005, "max_iter": 12, **kw})


def test_entropy_at_T_is_the_entropy_of_the_T_scaled_logits_of_rollouts_sampled_at_T(monkeypatch):
    seen = _recording(monkeypatch)
    lm, tok = FakeLM(), FakeTok()
    probs = make_problems(2, 1, random.Random(0))
    for t in (0.5, 1.3):
        h = rollout_entropy_at(lm, tok, probs, t, 4, 6, 0)
        assert h == pytest.approx(float(token_entropy(Z, t)), abs=1e-5)
        assert seen[-1] == t


def test_tokens_are_drawn_from_softmax_of_logits_over_T():
    lm, tok = FakeLM(), FakeTok()
    probs = make_problems(4, 1, random.Random(0))
    share = {}
    for t in (0.3, 1.3):
        ro = sample(lm, tok, probs, t, 8, 6, 0)
        first = ro.sequences[:, ro.prompt_len]  # no EOS before it, so never a pad
        share[t] = float((first == 0).float().mean())
    p = {t: float(torch.softmax(Z / t, -1)[0]) for t in share}  # 0.998 at T 0.3, 0.63 at T 1.3
    assert share[0.3] > 0.9 > p[1.3] + 0.15 > share[1.3]
    assert p[0.3] > 0.99


def test_one_prompt_forward_serves_the_whole_group():
    lm, tok = FakeLM(), FakeTok()
    ro = sample(lm, tok, make_problems(3, 1, random.Random(0)), 1.0, 8, 5, 0)
    assert ro.sequences.shape[0] == 24
    assert lm.calls <= 5  # 1 prompt forward + at most 4 one-token steps, whatever G is


def test_t_star_is_calibrated_on_rollouts_sampled_at_each_tried_T(monkeypatch):
    seen = _recording(monkeypatch)
    lm, tok = FakeLM(), FakeTok()
    rc = _rc()
    grid, cal = calibrate_on_rollouts(lm, tok, make_problems(2, 1, random.Random(0)), rc, 7)
    # every (T, H) of the search is H of softmax(z / T) on rollouts sampled at that T (a T already on the grid
    # is not sampled twice)
    tried = [t for t, _ in cal.history if t not in rc.temperatures]
    assert tried and [t for t in seen[len(rc.temperatures) :]] == tried
    for t, h in cal.history:
        assert h == pytest.approx(float(token_entropy(Z, t)), abs=1e-5)
    for t, h in grid.items():
        assert h == pytest.approx(float(token_entropy(Z, float(t))), abs=1e-5)
    # the closed-form T with H(z / T) = 0.3, by bisection on the exact entropy
    lo, hi = 0.05, 5.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(token_entropy(Z, mid)) < 0.3 else (lo, mid)
    assert cal.clamped is None
    assert abs(cal.entropy - 0.3) <= rc.tol
    assert cal.temperature == pytest.approx(lo, abs=0.02)


def test_unreachable_target_is_reported_clamped_not_moved():
    lm, tok = FakeLM(Z * 0.01), FakeTok()  # nearly uniform: H_T ~ log 6 at every T
    _, cal = calibrate_on_rollouts(lm, tok, make_problems(2, 1, random.Random(0)), _rc(), 0)
    assert cal.clamped == "low"
    c1 = next(c for c in CLAIMS if c.name == "C1")
    with pytest.raises(ValueError, match="untestable"):
        c1.check({"untestable": "target outside the range"})


def test_answer_reward_reads_the_last_integer():
    assert answer_reward("12 + 3 = 15. The answer is 15.", 15) == 1.0
    assert answer_reward("The answer is 15. Wait, 14", 15) == 0.0
    assert answer_reward("I do not know", 0) == 0.0
    assert answer_reward("The answer is 1,024.", 1024) == 1.0


def test_problems_have_correct_answers_and_are_distinct():
    probs = make_problems(50, 3, random.Random(1))
    assert len({p.question for p in probs}) == 50
    for p in probs:
        words = p.question.split()
        count = int(words[2])
        for i, w in enumerate(words):
            if w == "away":
                count -= int(words[i + 1].rstrip("."))
            if w == "gets":
                count += int(words[i + 1])
        assert count == p.answer >= 0
    other = make_problems(10, 3, random.Random(1), {p.question for p in probs})
    assert not {p.question for p in other} & {p.question for p in probs}


def test_grpo_step_moves_the_policy_toward_rewarded_tokens_at_the_sampling_temperature():
    torch.manual_seed(0)
    lm, tok = FakeLM(), FakeTok()
    probs = make_problems(1, 1, random.Random(0))
    ro = sample(lm, tok, probs, 1.0, 8, 4, 1)
    first = ro.sequences[:, ro.prompt_len]
    ro.rewards = (first == 0).float()  # reward: the response starts with token 0
    assert 0 < ro.rewards.sum() < 8
    ro.truncated = torch.zeros(8, dtype=torch.bool)
    opt = torch.optim.SGD(lm.parameters(), lr=0.5)
    p0 = torch.softmax(lm.z.detach(), -1)[0].item()
    stats = grpo_step(lm, opt, ro, 1.0, OnPolicyGRPOConfig(group_size=8), 10.0)
    assert torch.softmax(lm.z.detach(), -1)[0].item() > p0
    assert stats["zero_adv_frac"] == 0.0


def test_real_config_and_scale_are_registered():
    from iclr26.acereason.experiment import EXPERIMENT

    assert "real" in EXPERIMENT.scales
    rc = config_for("real").real
    assert rc.entropy_target == 0.3 and 0.6 in rc.rl_temperatures and 1.0 in rc.rl_temperatures
    assert set(rc.rl_temperatures) <= set(rc.temperatures)


@pytest.mark.real
def test_real_path_samples_words_through_the_chat_template_and_scores_them(smollm2):
    model, tok = smollm2
    probs = [make_problems(1, 1, random.Random(3))[0]]
    ro = sample(model, tok, probs, 0.3, 2, 10, 0)
    assert ro.sequences.shape[0] == 2 and ro.rewards.shape == (2,)
    words = [w for t in ro.texts for w in t.split() if w.isalpha()]
    assert len(words) >= 3, ro.texts  # a trained model writes words; random weights give token soup
    assert ro.response_mask.sum() > 0


def test_sampling_logits_equal_teacher_forced_logits_on_a_real_architecture():
    """The cached, shared-prompt sampler on a tiny random Llama with left-padded prompts of different
    lengths: its per-token H_T equals H_T of the teacher-forced logits of the finished rollouts, and the
    teacher-forced log-probs of the sampled tokens are those of the sampling distribution at T."""
    from iclr26.acereason.entropy import temperature_adjusted_entropy
    from iclr26.acereason.real import _response_logits
    from iclr26.core.hf import tiny_random_causal_lm

    model, tok = tiny_random_causal_lm(arch="llama", hidden=32, layers=2, heads=2, max_positions=256, seed=3)
    with torch.no_grad():  # sharp attention, so that a wrong position or cache entry changes the logits
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(40.0)
            layer.self_attn.k_proj.weight.mul_(40.0)
    probs = make_problems(3, 2, random.Random(4))
    assert len({len(p.question) for p in probs}) > 1  # the prompts get left padding
    for t in (0.7, 1.4):
        ro = sample(model, tok, probs, t, 3, 7, 11, entropy=True)
        assert ro.attention[:, : ro.prompt_len].eq(0).any()
        with torch.no_grad():
            tf = _response_logits(model, ro)
        h_tf = temperature_adjusted_entropy(tf, t, ro.response_mask, agg="none")
        m = ro.response_mask.bool()
        assert torch.allclose(ro.entropies[m], h_tf[m], atol=1e-4)
        assert not torch.allclose(ro.entropies[m], temperature_adjusted_entropy(tf, 1.0, ro.response_mask, "none")[m])
        h = rollout_entropy_at(model, tok, probs, t, 3, 7, 11)
        assert h == pytest.approx(float(temperature_adjusted_entropy(tf, t, ro.response_mask)), abs=1e-5)


@pytest.mark.slow  # imports peft (seconds on a loaded box)
def test_run_seed_end_to_end_on_a_tiny_llama_with_lora(tmp_path):
    """The whole per-seed path (calibration, fresh H_T, evaluation, LoRA GRPO arms) on a tiny random Llama
    saved in the Hugging Face layout; timings of every piece are recorded."""
    from iclr26.acereason.real import run_seed
    from iclr26.core.hf import tiny_random_causal_lm

    tiny_random_causal_lm(tmp_path, arch="llama", hidden=32, layers=2, heads=2, max_positions=256, seed=1)
    rc = _rc(
        n_eval=2, eval_samples=2, eval_chunk=2, group_size=2, calib_prompts=1, max_new_tokens=3, steps=1, max_iter=3
    )
    out = run_seed(rc, 0, str(tmp_path), log=lambda *a: None)
    assert set(out["arms"]) == {"T*", "T=0.6", "T=1.0"}
    assert out["clamped"] == "low"  # a random model's H_T is far above 0.3 at every T
    assert {"load", "calibration", "fresh", "eval_init", "rl T*", "eval T=1.0"} <= set(out["timings"])
    assert out["timings"]["calibration_evals"] == len(rc.temperatures) + 1


def test_a_finished_rollout_is_padded_and_counted_up_to_its_first_eos_only():
    z = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 1.5])  # EOS (5) is the likeliest token
    lm, tok = FakeLM(z), FakeTok()
    ro = sample(lm, tok, make_problems(2, 1, random.Random(0)), 1.0, 8, 6, 0, entropy=True)
    resp = ro.sequences[:, ro.prompt_len :]
    first = (resp == 5).long().argmax(1)
    assert (~ro.truncated).sum() >= 12 and ro.response_mask.sum() < resp.numel()
    for row, f in zip(resp, first, strict=True):
        if (row == 5).any():
            assert (row[f:] == 5).all()  # pad after EOS, nothing sampled after it
    want = [int(f) + 1 if (r == 5).any() else r.numel() for r, f in zip(resp, first, strict=True)]
    assert ro.response_mask.sum(1).tolist() == want
    h = rollout_entropy_at(lm, tok, make_problems(2, 1, random.Random(0)), 1.0, 8, 6, 0)
    assert h == pytest.approx(float(token_entropy(z, 1.0)), abs=1e-5)
