"""The paper default trains: one AT-GRPO update at the paper's lr (1e-6) on the real SmolLM2-135M-Instruct moves
the trained weights by about lr (Adam's first step is ~lr * sign(g) per coordinate with a gradient), and every
trained weight is float32 (a bf16 weight near 0.02 has a spacing of ~1e-4, so such a step rounds away)."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from iclr26.at_grpo import experiment as ex
from iclr26.at_grpo.at_grpo import ATGRPOTrainer
from iclr26.at_grpo.config import config_for
from iclr26.at_grpo.plan_path import PlanPathBatch, env_seeds
from iclr26.at_grpo.rollout import Workflow


def test_bf16_weights_do_not_move_under_the_paper_lr():
    """Why the default matters: the same Adam step on a bf16 copy leaves it exactly unchanged."""
    w = torch.full((64,), 0.02, dtype=torch.bfloat16, requires_grad=True)
    opt = torch.optim.Adam([w], lr=1e-6)
    w.grad = torch.randn(64).to(torch.bfloat16)
    before = w.detach().clone()
    opt.step()
    assert torch.equal(w.detach(), before)


def test_full_finetuning_loads_float32_master_weights_lora_keeps_the_base_dtype(monkeypatch):
    seen = []

    def fake_load(path, dtype=None, device="cpu"):
        seen.append(dtype)
        from iclr26.core.hf import tiny_random_causal_lm

        model, tok = tiny_random_causal_lm(hidden=16, layers=1, heads=2, arch="llama")
        return (model.to(getattr(torch, dtype)) if dtype else model), tok

    monkeypatch.setattr("iclr26.core.hf.load_local", fake_load)
    llm = replace(config_for("paper").llm, model_path="x", dtype="bfloat16", gradient_checkpointing=False)
    assert llm.lora_rank == 16  # the paper default is LoRA (official L2)
    model, _ = ex.load_policy_model(replace(llm, lora_rank=0), device="cuda")
    assert seen[-1] is None and all(p.dtype == torch.float32 for p in model.parameters())
    model, _ = ex.load_policy_model(llm, device="cuda")
    assert seen[-1] == "bfloat16"
    trained = [p for p in model.parameters() if p.requires_grad]
    assert trained and all(p.dtype == torch.float32 for p in trained)


class _SpreadRewards(PlanPathBatch):
    """Plan-Path whose local rewards are random (seeded): a 135M model's untrained plans all score the same, and a
    zero-advantage batch makes no update; this test is about the update, not the task."""

    def step(self, agent, responses):
        super().step(agent, responses)
        return self._spread.random(len(self.pos))

    def clone(self):
        c = super().clone()
        c._spread = self._spread
        return c


def _spread_env(cfg):
    def make(seeds):
        env = _SpreadRewards(cfg.env, seeds, 1, rng_seed=0)
        env._spread = np.random.default_rng(0)
        return env

    return make


@pytest.mark.real
def test_one_update_at_the_paper_lr_moves_the_real_models_adapters(smollm2_dir):
    cfg = config_for("paper")
    cfg = replace(
        cfg,
        llm=replace(cfg.llm, model_path=str(smollm2_dir), max_new_tokens=6, micro_batch_size=4),
        env=replace(cfg.env, size=4),
        schedule=replace(cfg.schedule, max_turns=1),
        method=replace(cfg.method, K=2),
    )
    agents, mcfg, sigma = ex.arm_setup("at_grpo", cfg.method)
    assert mcfg.lr == 1e-6
    policies = {n: ex.policy_factory(cfg, "paper")(n) for n in sorted(set(sigma.values()))}
    wf = Workflow(agents, cfg.schedule.max_turns, intra_turn_visibility=mcfg.intra_turn_visibility)
    trainer = ATGRPOTrainer(mcfg, wf, policies, sigma, _spread_env(cfg))
    trained = {n: {k: v for k, v in p.model.named_parameters() if v.requires_grad} for n, p in policies.items()}
    assert all(k for t in trained.values() for k in t) and all("lora" in k for t in trained.values() for k in t)
    before = {n: {k: v.detach().clone() for k, v in t.items()} for n, t in trained.items()}
    trainer.step(env_seeds(cfg.env, "train", range(1)), torch.Generator().manual_seed(0))
    for n, t in trained.items():
        delta = torch.cat([(v.detach() - before[n][k]).abs().flatten() for k, v in t.items()])
        moved = delta[delta > 0]
        # Adam's first step: ~lr on every coordinate with a gradient (LoRA B starts at 0, so B moves, A waits)
        assert moved.numel() > 1000, n
        assert 0.5e-6 < float(moved.median()) < 1.5e-6 and float(moved.max()) < 1.5e-6, (n, float(moved.median()))
