"""Smoke run of the registered experiment (pipeline end to end, not the claims) and the slow small run."""

import json

import pytest

from iclr26.core.experiment import run_experiment
from iclr26.vif.experiment import EXPERIMENT

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_smoke_run_writes_claims(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    names = [c["name"] for c in res["claims"]]
    assert names == ["C1", "C2", "C3", "C4"]
    c1 = next(c for c in res["claims"] if c["name"] == "C1")
    # the exact mechanism holds at any scale
    assert c1["passed"], c1
    seed = res["metrics"]["per_seed"][0]
    assert seed["rows_checked"] > 0
    assert "gate" not in res["metrics"] and "passed" in res["metrics"]["competence_gate"]
    for split in ("full_seeded", "occluded_seeded"):
        # the seeded split forces agent 1 wrong
        assert seed["baseline"][split]["first_acc"] == 0.0
        assert seed["vif"][split]["first_acc"] == 0.0


@pytest.mark.slow
def test_small_run_claims(tmp_path):
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert {c["name"] for c in res["claims"]} == {"C1", "C2", "C3", "C4"}
