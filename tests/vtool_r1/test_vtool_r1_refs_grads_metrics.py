"""VTool-R1: which log-probs feed each loss term, where gradients flow and stop, and the tool-rate metrics on
asymmetric hand-computed inputs.

Gradient-flow table (one ``grpo_step``, ``minibatches=1``, paper Sec. 3.2 / verl's GRPO with low_var_kl):

=========================  ===================  ======================================
tensor / module            gets gradient        why
=========================  ===================  ======================================
policy parameters          nonzero              ratio pi_theta / pi_old and the k3 KL
pi_old log-probs           none (no_grad)       computed once before the updates
reference model            none (no_grad)       frozen SFT copy (pi_ref)
ref_logp inside vtool_loss none (detached)      k3 differentiates through logp only
=========================  ===================  ======================================
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from iclr26.core.grpo import group_advantages
from iclr26.vtool_r1.charts import make_dataset
from iclr26.vtool_r1.experiment import _aggregate, _measured, _tool_gap
from iclr26.vtool_r1.model import TinyToolVLM, TinyVLMConfig
from iclr26.vtool_r1.rollout import rollout_pure, sequence_logprobs
from iclr26.vtool_r1.vtool import KL_CLAMP, VToolConfig, _apply_process_reward, grpo_step, vtool_loss

TINY = TinyVLMConfig(d_model=32, n_layers=1, n_heads=2)


def _policy_ref_rollout(kl: float = 0.0):
    torch.manual_seed(0)
    ref = TinyToolVLM(TINY)
    policy = copy.deepcopy(ref)
    with torch.no_grad():  # the policy has moved away from the reference
        for p in policy.parameters():
            p.add_(0.3 * torch.randn_like(p))
    samples = make_dataset(2, seed=3)
    group = torch.tensor([0, 0, 0, 1, 1, 1])
    ro = rollout_pure(policy, [samples[0]] * 3 + [samples[1]] * 3, group, 1.0, torch.Generator().manual_seed(1))
    ro.rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    ro.called = torch.tensor([True, True, False, False, True, False])
    ro.tool_ok = torch.tensor([True, False, False, False, True, False])
    # unequal trainable lengths (1 or 2 tokens), so the token mean of A is not zero within a group
    mask = torch.zeros_like(ro.mask)
    for i in range(6):
        keep = ro.mask[i].nonzero().flatten()[: 1 + i % 2]
        assert len(keep) == 1 + i % 2
        mask[i, keep] = 1
    ro.mask = mask
    cfg = VToolConfig(n_prompts=2, group_size=3, minibatches=1, kl_coef=kl, lr=1e-3, grad_clip=1e9)
    return policy, ref, ro, cfg


# ---------------------------------------------------------------- references


def test_vtool_loss_kl_is_k3_against_the_reference_not_old():
    """L = policy term (ratio vs old) + beta * token_mean(exp(ref - logp) - (ref - logp) - 1)."""
    logp = torch.tensor([[-1.0, -2.0, -0.5]])
    old = torch.tensor([[-1.2, -1.5, -0.5]])
    ref = torch.tensor([[-0.4, -2.9, -3.0]])
    adv = torch.tensor([0.7])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    cfg = VToolConfig(kl_coef=0.5)
    no_kl = vtool_loss(logp, old, None, adv, mask, cfg)
    d = (ref - logp)[0, :2]
    k3 = float((torch.exp(d) - d - 1).mean())
    assert float(vtool_loss(logp, old, ref, adv, mask, cfg)) == pytest.approx(float(no_kl) + 0.5 * k3, rel=1e-6)
    # k3 is not symmetric: the swapped direction gives another value
    d_sw = (logp - ref)[0, :2]
    assert abs(k3 - float((torch.exp(d_sw) - d_sw - 1).mean())) > 0.05
    # the policy term uses old: ratios exp(logp - old) = exp(0.2), exp(-0.5), clip [0.8, 1.3], A > 0
    r = torch.exp(logp - old)[0, :2]
    pg = -float(torch.minimum(r * 0.7, r.clamp(0.8, 1.3) * 0.7).mean())
    assert float(no_kl) == pytest.approx(pg, rel=1e-6)
    # a large gap is clamped per token to KL_CLAMP
    far = torch.tensor([[20.0, 20.0, 0.0]])
    assert float(vtool_loss(logp, old, far, adv, mask, cfg) - no_kl) == pytest.approx(0.5 * KL_CLAMP)


def test_grpo_step_ratio_is_against_the_current_policy_and_advantages_use_process_reward():
    """First (only) minibatch: pi_old = pi_theta, so the loss is -token_mean(A) with A from the rewards after
    the process bonus/penalty (not the outcome rewards, not the reference's log-probs)."""
    policy, ref, ro, cfg = _policy_ref_rollout()
    cfg = VToolConfig(**{**cfg.__dict__, "process_reward": 0.5})
    rewards = _apply_process_reward(ro, 0.5)
    # outcome + 0.5 (tool ok) - 0.5 (tool failed)
    assert rewards.tolist() == [1.5, -0.5, 0.0, 1.0, 1.5, 0.0]
    adv = group_advantages(rewards, ro.group, "mean_std", cfg.adv_eps, "sample")
    adv_outcome = group_advantages(ro.rewards, ro.group, "mean_std", cfg.adv_eps, "sample")
    m = ro.mask.float()
    want = -float((adv[:, None] * m).sum() / m.sum())
    other = -float((adv_outcome[:, None] * m).sum() / m.sum())
    assert abs(want - other) > 1e-3
    stats = grpo_step(policy, ref, torch.optim.SGD(policy.parameters(), lr=0.0), ro, cfg, torch.Generator())
    assert stats["loss"] == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert stats["reward"] == pytest.approx(0.5)  # reported reward is the outcome mean


def test_sequence_logprobs_score_the_next_tail_token():
    policy, _, ro, _ = _policy_ref_rollout()
    lp = sequence_logprobs(policy, ro)
    imgs = [ro.img1]
    logits = policy(ro.mode, imgs, ro.tail).float().log_softmax(-1)
    want = logits[:, :-1].gather(-1, ro.tail[:, 1:, None]).squeeze(-1)
    assert torch.allclose(lp, want, atol=1e-5)
    same = logits[:, :-1].gather(-1, ro.tail[:, :-1, None]).squeeze(-1)
    differ = ro.tail[:, 1:] != ro.tail[:, :-1]
    assert bool(differ.any())
    assert not torch.allclose(lp[differ], same[differ], atol=1e-3)


# ---------------------------------------------------------------- gradient flow


def test_grpo_step_gradients_reach_the_policy_only():
    policy, ref, ro, cfg = _policy_ref_rollout(kl=0.0)
    ref_before = {k: v.clone() for k, v in ref.state_dict().items()}
    grpo_step(policy, ref, torch.optim.SGD(policy.parameters(), lr=0.0), ro, cfg, torch.Generator())
    gnorm = sum(float(p.grad.norm()) for p in policy.parameters() if p.grad is not None)
    # with pi_old attached to the graph, d ratio / d theta would cancel exactly to 0
    assert gnorm > 1e-4
    assert all(p.grad is None for p in ref.parameters())
    # with the KL on, the frozen reference still gets nothing and does not move
    policy, ref, ro, cfg = _policy_ref_rollout(kl=0.5)
    grpo_step(policy, ref, torch.optim.SGD(policy.parameters(), lr=0.1), ro, cfg, torch.Generator())
    assert all(p.grad is None for p in ref.parameters())
    for k, v in ref.state_dict().items():
        assert torch.equal(v, ref_before[k])


def test_vtool_loss_gradient_table():
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    old = torch.tensor([[-1.2, -1.5, -0.5]], requires_grad=True)
    ref = torch.tensor([[-0.4, -2.9, -3.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss = vtool_loss(logp, old, ref, torch.tensor([0.7]), mask, VToolConfig(kl_coef=0.5))
    g_logp, g_ref = torch.autograd.grad(loss, (logp, ref), allow_unused=True)
    assert float(g_logp[0, :2].abs().min()) > 0 and float(g_logp[0, 2]) == 0.0  # masked token: none
    assert g_ref is None or float(g_ref.abs().max()) == 0.0
    # KL alone: d/dlogp of beta*mean(e^d - d - 1) = beta * (1 - e^d) / n, d = ref - logp
    kl_only = vtool_loss(logp, logp.detach(), ref, torch.zeros(1), mask, VToolConfig(kl_coef=0.5))
    (g,) = torch.autograd.grad(kl_only, logp)
    d = (ref - logp).detach()[0, :2]
    assert torch.allclose(g[0, :2], 0.5 * (1 - torch.exp(d)) / 2, atol=1e-6)


# ---------------------------------------------------------------- metrics on asymmetric inputs


def test_tool_gap_hand_computed():
    ev = {"tool_rate_VAL": 0.9, "tool_rate_CMP": 0.5, "tool_rate_CNT": 0.2, "tool_rate_MAX": 0.0}
    assert _tool_gap(ev) == pytest.approx(0.5 * 1.4 - 0.5 * 0.2)


def _ev(acc, rates):
    out = {"acc": acc}
    for t, r in zip(("VAL", "CMP", "CNT", "MAX"), rates):
        out[f"tool_rate_{t}"], out[f"acc_{t}"] = r, acc
    return out


def test_claim_numbers_hand_computed_over_two_seeds():
    results = [
        {
            "pure": _ev(0.30, (0, 0, 0, 0)),
            "prompted": _ev(0.25, (0.5, 0.5, 0.5, 0.5)),
            "text_grpo": _ev(0.40, (0, 0, 0, 0)),
            "vtool": _ev(0.50, (1.0, 0.6, 0.2, 0.0)),
        },
        {
            "pure": _ev(0.20, (0, 0, 0, 0)),
            "prompted": _ev(0.35, (0.5, 0.5, 0.5, 0.5)),
            "text_grpo": _ev(0.30, (0, 0, 0, 0)),
            "vtool": _ev(0.60, (0.8, 0.4, 0.4, 0.2)),
        },
    ]
    m = _measured(_aggregate(results))
    assert m["C1"]["diff"] == pytest.approx(55.0 - 35.0)
    assert m["C2"]["diff"] == pytest.approx(35.0 - 25.0)
    assert m["C3"]["diff"] == pytest.approx(55.0 - 30.0)
    # rates in percent: VAL 90, CMP 50, CNT 30, MAX 10
    assert m["C4"]["rate_val_cmp"] == pytest.approx(70.0)
    assert m["C4"]["rate_cnt_max"] == pytest.approx(20.0)
    assert m["C4"]["gap"] == pytest.approx(np.mean([100 * (0.8 - 0.1), 100 * (0.6 - 0.3)]))
