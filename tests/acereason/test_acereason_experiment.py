"""The registered experiment: smoke run end to end, claim rules on hand-made values, determinism."""

import json

import pytest

from iclr26.acereason.config import config_for
from iclr26.acereason.experiment import CLAIMS, EXPERIMENT
from iclr26.acereason.pipeline import Job, run_job
from iclr26.core.experiment import run_experiment

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CHECK = {c.name: c.check for c in CLAIMS}


def test_smoke_run_end_to_end(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert [c["name"] for c in res["claims"]] == ["C1", "C2", "C3", "C4"]
    gate = res["metrics"]["competence_gate"]
    assert set(gate) >= {"rule", "passed", "strong_easy_acc", "e2_init_hard_acc", "rl_T1_gain"}
    c1 = res["claims"][0]["measured"]
    assert set(c1["h_grid"]) == {"0.6", "1.0"} and 0.3 <= c1["t_star"] <= 1.5
    rows = [json.loads(x) for x in (rec.out_dir / "metrics.jsonl").read_text().splitlines()]
    assert {"entropy", "reward", "zero_adv_frac", "length"} <= set(rows[0])
    assert len({r["series"] for r in rows}) == 2 + 1 + 2 + 2  # grid, T*, E3 weak/strong, E4 on/off
    assert (rec.out_dir / "e2_entropy.png").exists() and (rec.out_dir / "e1_sft_scaling.png").exists()


def test_jobs_are_deterministic():
    cfg = config_for("smoke")
    a, b = run_job(Job("sft", cfg, 3, (0,))), run_job(Job("sft", cfg, 3, (0,)))
    assert a["final_loss"] == b["final_loss"] and a["hard"] == b["hard"]
    r1 = run_job(Job("rl", cfg, 3, ("E2", 0, 1.0, 0, True), a["state"]))
    r2 = run_job(Job("rl", cfg, 3, ("E2", 0, 1.0, 0, True), a["state"]))
    assert r1["history"] == r2["history"]


def _c1(**kw):
    m = {
        "target": 0.3,
        "h_grid": {"0.6": 0.1, "0.85": 0.2, "1.0": 0.3, "1.3": 0.5},
        "h_fresh_t_star": 0.31,
        "zero_adv_step0": {"0.6": 0.6, "1.0": 0.3},
    }
    m.update(kw)
    return m


def test_claim_rules():
    assert CHECK["C1"](_c1())
    assert not CHECK["C1"](_c1(h_grid={"0.6": 0.1, "0.85": 0.25, "1.0": 0.2, "1.3": 0.5}))
    assert not CHECK["C1"](_c1(h_fresh_t_star=0.34))
    assert not CHECK["C1"](_c1(zero_adv_step0={"0.6": 0.3, "1.0": 0.3}))
    c2 = {"acc": {"0.6": 40.0, "0.85": 45.0, "1.0": 44.0}, "acc_t_star": 43.5}
    assert CHECK["C2"](c2)
    flat = {"0.6": 40.0, "0.85": 41.5, "1.0": 41.0}
    assert not CHECK["C2"]({"acc": flat, "acc_t_star": 41.0})  # near the best T but not 2 points over T = 0.6
    assert CHECK["C2"]({"acc": flat, "acc_t_star": 42.0})
    assert not CHECK["C2"](dict(c2, acc_t_star=42.9))  # more than 2 below the best T
    c3 = {"weak_before": 20.0, "strong_before": 40.0, "weak_after": 40.0, "strong_after": 50.0}
    assert CHECK["C3"](c3)
    assert not CHECK["C3"](dict(c3, strong_after=55.0))  # gap 15 > 0.7 x 20
    assert not CHECK["C3"](dict(c3, strong_after=39.0))  # strong init fell behind
    c4 = {"a": 5.0, "b": 2.0, "r2": 0.9, "acc_2n_x1": 30.0, "acc_n_x2": 25.0}
    assert CHECK["C4"](c4)
    assert not CHECK["C4"](dict(c4, b=6.0)) and not CHECK["C4"](dict(c4, b=-1.0))
    assert not CHECK["C4"](dict(c4, r2=0.6)) and not CHECK["C4"](dict(c4, acc_n_x2=31.0))


@pytest.mark.slow
def test_small_claims(tmp_path):
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    # the gate passed on both measured seed sets; the claims are measured outcomes (0/4 in the README), so
    # this checks that each is evaluated and reported, not that it passes
    assert res["metrics"]["competence_gate"]["passed"], res["metrics"]["competence_gate"]
    assert [c["name"] for c in res["claims"]] == ["C1", "C2", "C3", "C4"]
    assert all(isinstance(c["passed"], bool) and c["measured"] for c in res["claims"])
