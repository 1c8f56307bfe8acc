import json

import pytest

from iclr26.core.experiment import run_experiment
from iclr26.subliminal.experiment import EXPERIMENT

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_smoke_run_writes_every_claim(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert [c["name"] for c in res["claims"]] == ["C1", "C2", "C3", "C4"]
    gate = res["metrics"]["competence_gate"]
    assert set(gate) >= {"rule", "passed", "checks"}
    seed0 = res["metrics"]["per_seed"]["0"]
    assert seed0["partition_ok"] == {"A": True, "B": True}
    assert 0.0 <= seed0["div_fraction"]["B"] <= 1.0
    assert (rec.out_dir / "p_target_per_condition.png").exists()


@pytest.mark.slow
def test_small_scale_claims(tmp_path):
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    assert len(rec.claims) == 4 and all(c.measured is not None for c in rec.claims)
    assert "passed" in rec.results["metrics"]["competence_gate"]
