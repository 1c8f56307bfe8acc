"""The registered experiment end to end: smoke in CI, small on demand (slow)."""

import json

import pytest

from iclr26.core.experiment import ExperimentError, run_experiment
from iclr26.daedal.experiment import EXPERIMENT


def _check(rec, scale):
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert res["scale"] == scale
    names = [c["name"] for c in res["claims"]]
    assert names == ["C1", "C2", "C3", "C4", "C5"]
    for c in res["claims"]:
        assert c["measured"] is not None and "error" not in c, c
    assert (rec.out_dir / "acc_eratio_vs_length.png").exists()
    mean = res["metrics"]["mean"]
    for task, arms in mean.items():
        assert {"daedal", "stage1_only", "fixed_8"} <= set(arms), task
        assert 0 <= arms["daedal"]["acc"] <= 100 and 0 < arms["daedal"]["E_ratio"] <= 100
    return res


def test_smoke_run(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False)
    res = _check(rec, "smoke")
    assert res["seeds"] == [0]
    assert "benchmark" in res["metrics"] and res["metrics"]["per_seed"]["0"]["spearman_stage1_pooled"] <= 1.0
    c = {cl["name"]: cl["measured"] for cl in res["claims"]}
    # C1-C4 read the stated-length tasks only, C5 the hidden-length one
    assert set(c["C1"]) == {"rep4", "rep6", "rep8"} and set(c["C3"]) == {"rep6", "rep8"}
    assert set(c["C4"]["per_task"]) == {"rep4", "rep6", "rep8"} and c["C5"]["task"] == "chain"
    gate = res["metrics"]["competence_gate"]
    assert set(gate["best_fixed_acc"]) == {"rep4", "rep6", "rep8", "chain"} and gate["threshold"] == 50.0
    # the MDM's SFT curve is logged per step to metrics.jsonl
    lines = [json.loads(x) for x in (rec.out_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in lines if r["series"] == "seed0/mdm_train"]
    assert len(train) >= 2 and all("loss" in r for r in train)


def test_paper_scale_needs_local_paths(tmp_path):
    with pytest.raises(ExperimentError, match="model_path"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path, show_progress=False)


@pytest.mark.slow
def test_small_run(tmp_path):
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    _check(rec, "small")


def test_claim_rules_can_fail():
    c = {cl.name: cl for cl in EXPERIMENT.claims}
    ok = {"a": {"gap": -2.9}, "b": {"gap": 5.0}}
    assert c["C1"].check(ok) and not c["C1"].check({**ok, "c": {"gap": -3.1}})
    assert c["C2"].check({"mean_gap": 10.0}) and not c["C2"].check({"mean_gap": 9.9})
    assert c["C3"].check({"m": {"gap": 20.0}, "l": {"gap": 30.0}}) and not c["C3"].check({"m": {"gap": 19.0}})
    assert not c["C3"].check({})
    assert c["C4"].check({"min_spearman": 0.7}) and not c["C4"].check({"min_spearman": 0.69})
    assert not c["C1"].check({})
    c5 = {"gap": 5.0, "min_insertions": 0.1}
    assert c["C5"].check(c5) and not c["C5"].check({**c5, "gap": 4.9})
    assert not c["C5"].check({**c5, "min_insertions": 0.0}) and not c["C5"].check({})


def test_claims_read_the_right_tasks_and_arms():
    """C4 is the minimum of the per-task Spearman means; C5 compares DAEDAL with stage 1 only on the hidden task."""
    from iclr26.daedal.experiment import claim_c4, claim_c5

    per_seed = [
        {
            "spearman_stage1_per_task": {"a": 0.9, "b": 0.6, "h": 0.1},
            "tasks": {"h": {"arms": {"daedal": {"insertions": x}}}},
        }
        for x in (0.5, 0.0)
    ]
    c4 = claim_c4(per_seed, ["a", "b"])
    assert c4["min_spearman"] == pytest.approx(0.6) and c4["per_task"]["a"] == pytest.approx(0.9)
    mean = {"h": {"daedal": {"acc": 70.0}, "stage1_only": {"acc": 60.0}}}
    c5 = claim_c5(mean, per_seed, "h")
    assert c5["gap"] == pytest.approx(10.0) and c5["insertions_per_seed"] == [0.5, 0.0] and c5["min_insertions"] == 0.0
