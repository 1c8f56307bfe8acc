"""The transcript context (each agent reads every earlier turn, so its context grows) and the frozen-LM
baseline (text flow, projector only, the matched comparison for ViF after stage 1)."""

from dataclasses import replace

import numpy as np
import pytest
import torch

import iclr26.vif.mas as mas_mod
from iclr26.vif.agent import training_batch
from iclr26.vif.analysis import ablation_variants
from iclr26.vif.config import DataConfig, EvalConfig, RunConfig, config_for
from iclr26.vif.data import NO, NONE, QUESTION0, YES, agent_instruction, transcript
from iclr26.vif.mas import Episodes, run_mas
from iclr26.vif.tiny import TinyVLM, freeze_for

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SMOKE = replace(config_for("smoke"), data=replace(config_for("smoke").data, context="window"))
CFG = replace(SMOKE, data=replace(SMOKE.data, context="transcript"))


class _Q:
    q_color = np.array([1, 0])
    q_shape = np.array([2, 0])


def test_transcript_by_hand():
    q0, q1 = QUESTION0 + 1 * 3 + 2, QUESTION0  # (blue? no: colour 1, shape 2) and (colour 0, shape 0)
    said = np.array([[YES, NO], [NO, NO]])
    assert transcript(_Q, said).tolist() == [[q0, q0, YES, q0, NO], [q1, q1, NO, q1, NO]]
    assert transcript(_Q, np.zeros((2, 0), dtype=np.int64)).tolist() == [[q0], [q1]]
    with pytest.raises(ValueError, match="YES or NO"):
        transcript(_Q, np.array([[YES, NONE], [NO, NO]]))
    with pytest.raises(ValueError, match=r"\[n, K\]"):
        transcript(_Q, np.array([[YES, NO]]))


def test_agent_instruction_window_keeps_the_last_slots_and_transcript_grows():
    win = DataConfig(max_msgs=4, context="window")
    five = np.array([[YES, NO, YES, NO, NO]] * 2)
    q0 = QUESTION0 + 5
    assert agent_instruction(_Q, five, win)[0].tolist() == [q0, NO, YES, NO, NO]
    assert agent_instruction(_Q, five[:, :1], win)[0].tolist() == [q0, NONE, NONE, NONE, YES]
    tr = DataConfig(context="transcript")
    lens = [agent_instruction(_Q, five[:, :k], tr).shape[1] for k in range(6)]
    assert lens == [1, 3, 5, 7, 9, 11]


def test_training_batch_transcript_one_length_per_batch_and_prev_is_a_prefix():
    ks = set()
    for step in range(12):
        b = training_batch(3, "stage1", step, 6, CFG.data, 0.5)
        k = (b["instr"].shape[1] - 1) // 2
        ks.add(k)
        assert b["instr"].shape[1] == 1 + 2 * k
        # the previous agent read the first K - 1 entries of the same transcript
        assert torch.equal(b["prev_instr"], b["instr"][:, : 1 + 2 * max(k - 1, 0)])
        assert bool(b["has_prev"].all()) == (k > 0) and bool(b["has_prev"].any()) == (k > 0)
        assert set(b["instr"][:, 2::2].flatten().tolist()) <= {YES, NO}
    assert len(ks) >= 4 and max(ks) <= CFG.data.transcript_max
    b = training_batch(3, "pretrain", 0, 6, CFG.data, 0.0, no_msgs=True)
    assert b["instr"].shape[1] == 1 and not b["has_prev"].any()
    # the window context is unchanged: four NONE-padded slots
    assert training_batch(3, "stage1", 0, 6, SMOKE.data, 0.5)["instr"].shape[1] == 1 + SMOKE.data.max_msgs


def test_run_mas_transcript_holds_every_earlier_answer(monkeypatch):
    torch.manual_seed(0)
    model = TinyVLM(CFG.model, CFG.vif).eval()
    ec = EvalConfig(episodes=6, turns=4, batch=6)
    ep = Episodes.draw(0, "seeded", 6, 4, CFG.data, False)
    seen = []
    real = mas_mod.agent_turn

    def spy(model, pat, instr, *a, **k):
        seen.append(instr.clone())
        return real(model, pat, instr, *a, **k)

    monkeypatch.setattr(mas_mod, "agent_turn", spy)
    res = run_mas(model, ep, CFG.vif, ec, CFG.data, False, True)
    assert [s.shape[1] for s in seen] == [1, 3, 5, 7]
    ans = ep.scenes.answer
    said = np.where(res.correct, ans[:, None], 1 - ans[:, None])  # what each agent answered (1 = yes)
    for t in range(1, 4):
        want = np.where(said[:, :t] == 1, YES, NO)
        assert seen[t][:, 2::2].numpy().tolist() == want.tolist()
        assert torch.equal(seen[t][:, :-2], seen[t - 1])  # the transcript only grows


def test_transcript_needs_long_enough_training_transcripts():
    d = replace(SMOKE.data, context="transcript", transcript_max=3)
    RunConfig(data=d, eval=replace(SMOKE.eval, turns=4))  # 3 earlier turns: fine
    with pytest.raises(ValueError, match="transcript_max"):
        RunConfig(data=d, eval=replace(SMOKE.eval, turns=5))
    with pytest.raises(ValueError, match="context"):
        DataConfig(context="history")


def test_frozen_lm_baseline_trains_the_projector_only_and_runs_without_vif():
    torch.manual_seed(0)
    model = TinyVLM(CFG.model, CFG.vif)
    freeze_for(model, "frozen_baseline")
    trainable = {n.split(".")[0] for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"projector"}
    name, vcfg, on = ablation_variants(CFG)["frozen_lm_baseline"]
    assert (name, on) == ("frozen_baseline", False)
    assert ablation_variants(CFG)["frozen_llm"][0::2] == ("frozen_llm", True)


def test_training_transcripts_cover_zero_to_transcript_max():
    ks = {(training_batch(5, "stage2", step, 2, CFG.data, 0.5)["instr"].shape[1] - 1) // 2 for step in range(60)}
    assert ks == set(range(CFG.data.transcript_max + 1))


def test_frozen_lm_baseline_gets_stage1_budget_and_text_loss(monkeypatch):
    import iclr26.vif.analysis as analysis_mod

    calls = []
    monkeypatch.setattr(analysis_mod, "train_stage", lambda m, stage, tcfg, *a, **k: calls.append((stage, tcfg)) or [])
    cfg = replace(CFG, stage1=replace(CFG.stage1, steps=7, lr=0.123), baseline=replace(CFG.baseline, steps=9))
    models, _ = analysis_mod.train_models(cfg, 0)
    stages = dict(calls)
    assert [c[0] for c in calls] == ["pretrain", "baseline", "stage1", "stage2", "frozen_baseline"]
    assert (stages["frozen_baseline"].steps, stages["frozen_baseline"].lr) == (7, 0.123)
    assert models["frozen_baseline"] is not models["baseline"] and models["frozen_baseline"] is not models["pretrained"]


def test_frozen_baseline_stage_moves_the_projector_and_not_the_lm():
    from iclr26.vif.agent import train_stage

    torch.manual_seed(0)
    model = TinyVLM(CFG.model, CFG.vif)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    tcfg = replace(CFG.stage1, steps=2, warmup_steps=0, progress=False)
    train_stage(model, "frozen_baseline", tcfg, 0, 4, CFG.data)
    moved = {n.split(".")[0] for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert moved == {"projector"}
