"""The registered experiment: smoke end to end; small as a slow test."""

import json

import pytest

from iclr26.core.experiment import run_experiment
from iclr26.infgen.experiment import EXPERIMENT


def test_smoke_run(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    names = {c["name"] for c in res["claims"]}
    assert names == {"C1", "C2", "C3"}
    for c in res["claims"]:
        assert c["measured"] is not None and "error" not in c
    assert (rec.out_dir / "agent_count.png").exists() and (rec.out_dir / "frames_strip.png").exists()
    m = res["metrics"]["per_seed"]["0"]
    assert m["count_ratio_log_replay"] == 0.0


@pytest.mark.slow
def test_small_run(tmp_path):
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    assert len(rec.claims) == 3
