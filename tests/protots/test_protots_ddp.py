"""ProtoTS training under torchrun with 2 gloo processes equals one process (core.train DDP)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.mark.dist
def test_fit_root_two_ranks_matches_one_process(tmp_path, torchrun):
    import os

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    script = str(HERE / "ddp_protots_script.py")
    subprocess.run([sys.executable, script, str(one), str(tmp_path / "a.csv")], check=True, env=env, timeout=180)
    torchrun(
        [
            script,
            str(two),
            str(tmp_path / "b.csv"),
        ],
        env,
        timeout=300,
    )
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert abs(a["val"] - b["val"]) < 1e-3
    assert max(abs(x - y) for x, y in zip(a["p"], b["p"])) < 1e-3
