"""The paper-scale trainer under torchrun: 2 CPU processes (gloo) give the same model as 1 process."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest


@pytest.mark.dist
@pytest.mark.slow  # ~25 s (two torchrun processes); run with -m slow
def test_mesh_train_ddp_two_processes_matches_one(tmp_path):
    cfg = {
        "model_type": "gpt_neox",
        "vocab_size": 64,
        "hidden_size": 32,
        "num_hidden_layers": 4,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "rotary_pct": 0.25,
        "max_position_embeddings": 64,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    np.save(tmp_path / "tokens.npy", np.random.default_rng(0).integers(0, 64, 5000).astype(np.int64))
    args = [
        "-m",
        "iclr26.mesh.train",
        "--pythia",
        str(tmp_path / "config.json"),
        "--tokens",
        str(tmp_path / "tokens.npy"),
        "--layout",
        "1+1R2+1",
        "--scheme",
        "mesh",
        "--steps",
        "4",
        "--batch",
        "4",
        "--seq-len",
        "16",
        "--val-tokens",
        "400",
        "--eval-every",
        "0",
        "--device",
        "cpu",
        "--lr",
        "1e-2",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, *args, "--out", str(tmp_path / "one")], check=True, env=env, timeout=240, capture_output=True
    )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_port=0",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=localhost:0",
        *args,
        "--out",
        str(tmp_path / "two"),
    ]
    subprocess.run(cmd, check=True, env=env, timeout=240, capture_output=True)
    a = json.loads((tmp_path / "one" / "result.json").read_text())
    b = json.loads((tmp_path / "two" / "result.json").read_text())
    assert a["config"]["scheme"] == "mesh" and a["config"]["layout"] == "1+1R2+1"
    assert abs(a["val_loss"] - b["val_loss"]) < 1e-4
