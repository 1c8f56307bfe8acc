"""InfGen training under torchrun: 2 gloo processes, gradients averaged by DDP (core.train.fit)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.mark.dist
@pytest.mark.slow
def test_torchrun_two_gloo_processes_train(tmp_path, torchrun):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)}
    script = str(HERE / "ddp_train_script.py")
    subprocess.run([sys.executable, script, str(tmp_path / "one"), "4"], check=True, env=env, timeout=240)
    torchrun(
        [
            script,
            str(tmp_path / "two"),
            "4",
        ],
        env,
        timeout=300,
    )
    one = json.loads((tmp_path / "one.rank0.json").read_text())
    r0, r1 = (json.loads((tmp_path / f"two.rank{r}.json").read_text()) for r in (0, 1))
    assert one["world"] == 1 and r0["world"] == r1["world"] == 2
    assert len(r0["losses"]) == 3 and all(math.isfinite(v) for v in r0["losses"])
    # step 0: each rank's loss is that of its half of the same global batch; the logged loss is their mean
    assert r0["losses"][0] == pytest.approx((one["half0"] + one["half1"]) / 2, rel=1e-5)
    assert r0["losses"] == r1["losses"]
    assert r0["checksum"] == pytest.approx(r1["checksum"], rel=0, abs=1e-9)  # DDP kept the ranks in step


@pytest.mark.dist
@pytest.mark.slow
def test_torchrun_paper_scale_two_gloo_processes(tmp_path, torchrun):
    """The paper-scale entry point (``python -m iclr26.infgen.paper``) under torchrun on a tiny ScenarioNet
    dataset: both ranks train (DDP), rank 0 writes the run folder."""
    from test_infgen_scenarionet import fake_scenario, write_dataset

    data = tmp_path / "db"
    data.mkdir()
    write_dataset(data, [fake_scenario(i) for i in range(6)], sub="part0")
    sets = {
        "paper.data_dir": str(data),
        "paper.trust_pickles": "true",
        "model.d_model": "64",
        "train.steps": "2",
        "train.warmup_steps": "1",
        "batch": "1",
        "paper.n_eval": "1",
        "eval.horizon": "6",
        "eval.eval_from": "2",
    }
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun(
        [
            "-m",
            "iclr26.infgen.paper",
            "--out",
            str(tmp_path / "runs"),
            *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")],
        ],
        env,
        timeout=400,
    )
    (res_file,) = (tmp_path / "runs").rglob("results.json")
    res = json.loads(res_file.read_text())
    assert {c["name"] for c in res["claims"]} == {"C1", "C2", "C3"}
    seed0 = res["metrics"]["per_seed"]["0"]
    assert len(seed0["losses"]) == 2 and all(math.isfinite(v) for v in seed0["losses"])
    assert seed0["skipped"] == {"track: type TRAFFIC_CONE": 6}  # the cone of each scenario, counted once
    assert (res_file.parent / "ckpt_seed0" / "checkpoint.pt").exists()
