"""The paper-scale trainer end to end on a tiny random Pythia checkpoint (GPT-NeoX layout, built locally with
transformers): initialised from its weights, gradient accumulation, torchrun with 2 gloo processes equal to
1 process, and the trained model scored through the lm-evaluation-harness interface (MeshLM)."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch


def _tiny_pythia(tmp_path):
    pytest.importorskip("transformers")
    from iclr26.core.hf import tiny_random_causal_lm

    ckpt = tmp_path / "tiny-pythia"
    _, tok = tiny_random_causal_lm(ckpt, hidden=32, layers=4, heads=2, arch="gpt_neox", max_positions=64)
    np.save(tmp_path / "tokens.npy", np.random.default_rng(0).integers(0, 259, 5000).astype(np.int64))
    return ckpt, tok


def _args(tmp_path, ckpt, *extra):
    return [
        "-m",
        "iclr26.mesh.train",
        "--pythia",
        str(ckpt),
        "--init-from",
        str(ckpt),
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
        "--grad-accum",
        "2",
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
        *extra,
    ]


def test_seq_len_above_the_checkpoint_positions_stops_before_training(tmp_path):
    from iclr26.mesh.train import main

    ckpt, _ = _tiny_pythia(tmp_path)
    with pytest.raises(ValueError, match="exceeds the model's 64 positions"):
        main(_args(tmp_path, ckpt, "--out", str(tmp_path / "x"))[2:] + ["--seq-len", "128"])
    assert not (tmp_path / "x").exists()


@pytest.mark.dist
@pytest.mark.slow  # ~40 s (two torchrun processes); run with -m slow
def test_tiny_pythia_end_to_end_two_processes_match_one(tmp_path, torchrun):
    from iclr26.mesh.evaluate import MeshLM
    from iclr26.mesh.pythia import load_pythia
    from iclr26.mesh.train import load_trained

    ckpt, tok = _tiny_pythia(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one = subprocess.run(
        [sys.executable, *_args(tmp_path, ckpt, "--out", str(tmp_path / "one"))],
        env=env,
        timeout=300,
        capture_output=True,
        text=True,
    )
    assert one.returncode == 0, one.stderr[-3000:]
    torchrun(_args(tmp_path, ckpt, "--out", str(tmp_path / "two")), env=env, timeout=300)
    a = json.loads((tmp_path / "one" / "result.json").read_text())
    b = json.loads((tmp_path / "two" / "result.json").read_text())
    assert a["config"]["scheme"] == "mesh" and a["config"]["layout"] == "1+1R2+1"
    assert a["train"]["grad_accum"] == 2
    assert abs(a["val_loss"] - b["val_loss"]) < 1e-4
    m1, m2 = load_trained(tmp_path / "one"), load_trained(tmp_path / "two")
    start = load_pythia(ckpt, layout="1+1R2+1", scheme="mesh")
    x = torch.randint(0, 259, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(m1(x), m2(x), atol=1e-4, rtol=1e-4)
        assert not torch.allclose(m1(x), start(x), atol=1e-3)  # it trained from the checkpoint's weights
    reqs = [SimpleNamespace(args=("def f(x):", " return x")), SimpleNamespace(args=("", "import os"))]
    s1, s2 = MeshLM(m1, tok).loglikelihood(reqs), MeshLM(m2, tok).loglikelihood(reqs)
    for (l1, g1), (l2, g2) in zip(s1, s2):
        assert np.isfinite(l1) and l1 < 0 and abs(l1 - l2) < 1e-3 and g1 == g2
    roll = MeshLM(m1, tok).loglikelihood_rolling([SimpleNamespace(args=("print('hi')",))])[0]
    assert np.isfinite(roll) and roll < 0
