"""End-to-end: smoke scale, the paper-scale path with a tiny random HF model, and the (slow) small scale."""

import json

import pytest
import torch

from iclr26.at_grpo.experiment import EXPERIMENT
from iclr26.at_grpo.plan_path import PlanPathBatch, PlanPathConfig, env_seeds
from iclr26.at_grpo.policy import HFPolicy
from iclr26.core.experiment import ExperimentError, run_experiment

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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
    opts = {
        "llm.model_path": str(model_dir),
        "llm.dtype": "float32",
        "env.size": "4",
        "schedule.max_turns": "1",
        "method.K": "2",
        "schedule.envs_per_step": "1",
        "schedule.budget": "4",
        "schedule.eval_every": "4",
        "schedule.n_test": "2",
        "schedule.arms": "mas_grpo,at_grpo",
        "llm.max_new_tokens": "6",
        "llm.micro_batch_size": "1",
    }
    rec = run_experiment(EXPERIMENT, "paper", seeds=[0], out_root=tmp_path / "runs", options=opts, show_progress=False)
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


def test_hf_policy_honours_the_sampling_generator():
    pytest.importorskip("transformers")
    from iclr26.core.hf import tiny_random_causal_lm

    model, tok = tiny_random_causal_lm(hidden=16, layers=1, heads=2, max_positions=256)
    pol = HFPolicy(model, tok, max_new_tokens=6, micro_batch_size=2)
    env = PlanPathBatch(PlanPathConfig(size=4), env_seeds(PlanPathConfig(size=4), "train", range(3)), 2)
    obs = env.observe("tool", 0, kind="text")
    a = pol.act(obs, "tool", generator=torch.Generator().manual_seed(5))
    torch.manual_seed(123)  # the global RNG must not matter
    b = pol.act(obs, "tool", generator=torch.Generator().manual_seed(5))
    c = pol.act(obs, "tool", generator=torch.Generator().manual_seed(6))
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)
    m = a.mask.bool()  # micro-batched recomputation of pi_old matches generation
    torch.testing.assert_close(a.logp[m], a.gen_logp[m], atol=1e-4, rtol=1e-4)


@pytest.mark.dist
def test_torchrun_two_gloo_processes_two_updates(tmp_path, torchrun):
    pytest.importorskip("transformers")
    import os

    from iclr26.core.hf import tiny_random_causal_lm

    model_dir = tmp_path / "tiny"
    tiny_random_causal_lm(model_dir, hidden=16, layers=1, heads=2, max_positions=256)
    sets = {
        "llm.model_path": str(model_dir),
        "llm.dtype": "float32",
        "llm.max_new_tokens": "5",
        "llm.micro_batch_size": "2",
        "env.size": "4",
        "schedule.max_turns": "1",
        "method.K": "2",
        "schedule.envs_per_step": "2",
        "schedule.budget": "16",
        "schedule.eval_every": "1000",
        "schedule.n_test": "2",
        "method.lr": "1e-3",
    }
    args = [
        "-m",
        "iclr26.at_grpo.paper_run",
        "--arm",
        "at_grpo",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "out"),
        *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")],
    ]
    torchrun(args, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    res = json.loads((tmp_path / "out" / "result.json").read_text())
    # 2 envs x K=2 x (tool + plan) = 8 samples per update over both ranks: budget 16 = two updates
    assert res["world"] == 2 and res["steps"] == 2
    a, b = res["weight_checksums"]
    assert a.keys() == {"tool", "plan"} and a == b  # gradients averaged: both ranks hold the same weights


def _allreduce_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    from iclr26.at_grpo.at_grpo import _allreduce_grads

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.full((3,), float(rank + 1))  # rank 0: 1, rank 1: 2
    q = torch.nn.Parameter(torch.zeros(2))  # a parameter this rank did not touch (grad None)
    if rank == 1:
        q.grad = torch.ones(2)
    _allreduce_grads([p, q])
    torch.save({"p": p.grad, "q": q.grad}, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.dist
def test_gradients_are_averaged_over_ranks(tmp_path):
    import torch.multiprocessing as mp

    args = (2, str(tmp_path / "init"), str(tmp_path))
    mp.start_processes(_allreduce_worker, args=args, nprocs=2, join=True, start_method="fork")
    for rank in range(2):
        g = torch.load(tmp_path / f"rank{rank}.pt")
        torch.testing.assert_close(g["p"], torch.full((3,), 1.5))
        torch.testing.assert_close(g["q"], torch.full((2,), 0.5))


def test_swap_exchanges_the_role_policies():
    from iclr26.at_grpo.experiment import swap_roles

    assert swap_roles({"tool": "tool", "plan": "plan"}) == {"tool": "plan", "plan": "tool"}
