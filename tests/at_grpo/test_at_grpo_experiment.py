"""End-to-end: smoke scale, the paper-scale path with a tiny random HF model, and the (slow) small scale."""

import json

import pytest
import torch

from iclr26.at_grpo.experiment import EXPERIMENT
from iclr26.at_grpo.plan_path import PlanPathBatch, PlanPathConfig, env_seeds
from iclr26.at_grpo.policy import HFPolicy
from iclr26.core.experiment import ExperimentError, run_experiment


def _check_results(out_dir):
    res = json.loads((out_dir / "results.json").read_text())
    names = {c["name"]: c for c in res["claims"]}
    assert set(names) == {"C1", "C2", "C3", "C4"}
    for c in names.values():
        assert c["measured"] is not None and "error" not in c
    return res


def test_smoke_run(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False)
    res = _check_results(rec.out_dir)
    final = res["metrics"]["final_success"]
    assert {"sa_grpo", "mas_grpo", "at_grpo", "swapped", "mas_untrained"} <= set(final)
    assert all(0 <= v <= 100 for vals in final.values() for v in vals)
    assert (rec.out_dir / "success_vs_samples.png").exists()


def test_paper_scale_needs_a_local_model(tmp_path):
    with pytest.raises(ExperimentError):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path, show_progress=False)


def test_paper_scale_path_with_tiny_random_hf_model(tmp_path):
    pytest.importorskip("transformers")
    from iclr26.core.hf import tiny_random_causal_lm

    model_dir = tmp_path / "tiny"
    tiny_random_causal_lm(model_dir, hidden=16, layers=1, heads=2, max_positions=256)
    opts = {"model_path": str(model_dir), "size": "4", "max_turns": "1", "K": "2", "envs_per_step": "1",
            "budget": "4", "eval_every": "4", "n_test": "2", "arms": "mas_grpo,at_grpo", "max_new_tokens": "6"}
    rec = run_experiment(EXPERIMENT, "paper", seeds=[0], out_root=tmp_path / "runs", options=opts,
                         show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert res["metrics"]["steps"]["at_grpo"] == [1]
    names = {c["name"]: c for c in res["claims"]}
    assert names["C1"]["measured"] is not None and names["C3"]["measured"] is not None


def test_hf_policy_logprobs_match_generation():
    pytest.importorskip("transformers")
    from iclr26.core.hf import tiny_random_causal_lm

    model, tok = tiny_random_causal_lm(hidden=16, layers=1, heads=2, max_positions=512)
    pol = HFPolicy(model, tok, max_new_tokens=5)
    env = PlanPathBatch(PlanPathConfig(size=4), env_seeds(PlanPathConfig(size=4), "train", range(3)), 2)
    obs = env.observe("plan", 0, kind="text")
    obs[0] = env.observe("tool", 0, kind="text")[0]  # prompts of different lengths: left padding is exercised
    assert len({len(o) for o in obs}) == 2
    act = pol.act(obs, "plan", generator=torch.Generator().manual_seed(0))
    assert len(act.responses) == 3 and act.tokens.shape == act.mask.shape == act.logp.shape
    # the log-probs recomputed by a forward pass (used as pi_old) match what generate() sampled from
    m = act.mask.bool()
    torch.testing.assert_close(act.logp[m], act.gen_logp[m], atol=1e-4, rtol=1e-4)
    r = env.step("plan", act.responses)  # random text: almost surely unparseable -> -2
    assert r.shape == (3,)


@pytest.mark.slow
def test_small_run(tmp_path):
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    _check_results(rec.out_dir)
