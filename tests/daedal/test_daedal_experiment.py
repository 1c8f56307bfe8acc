"""The registered experiment end to end: smoke in CI, small on demand (slow)."""

import json

import pytest

from iclr26.core.experiment import ExperimentError, run_experiment
from iclr26.daedal.experiment import EXPERIMENT


def _check(rec, scale):
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert res["scale"] == scale
    names = [c["name"] for c in res["claims"]]
    assert names == ["C1", "C2", "C3", "C4"]
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
    assert "benchmark" in res["metrics"] and res["metrics"]["per_seed"]["0"]["spearman_stage1"] <= 1.0


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
    assert c["C4"].check({"spearman": 0.7}) and not c["C4"].check({"spearman": 0.69})
