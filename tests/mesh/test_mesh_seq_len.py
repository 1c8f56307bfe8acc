"""The paper's training length (4096) on a Pythia config that says 2048 positions: reachable from scratch (RoPE
has no position table) and, from a checkpoint, with ``--set paper.max_seq_len``; refused with a clear error
otherwise. Here scaled down: a config with 16 positions, training length 32."""

import json

import numpy as np
import pytest

from iclr26.core.experiment import ExperimentError, run_experiment
from iclr26.mesh.experiment import EXPERIMENT
from iclr26.mesh.train import main as train_main
from iclr26.mesh.train import paper_max_seq_len

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_position_limit_rule():
    assert paper_max_seq_len(0, 2048, 4096, from_checkpoint=False) == 4096
    assert paper_max_seq_len(0, 2048, 1024, from_checkpoint=False) == 2048
    assert paper_max_seq_len(0, 2048, 4096, from_checkpoint=True) == 2048
    assert paper_max_seq_len(8192, 2048, 4096, from_checkpoint=True) == 8192
    with pytest.raises(ValueError):
        paper_max_seq_len(-1, 2048, 4096, from_checkpoint=False)


@pytest.fixture()
def short_ckpt(tmp_path):
    pytest.importorskip("transformers")
    from iclr26.core.hf import tiny_random_causal_lm

    ckpt = tmp_path / "tiny-neox-16pos"
    tiny_random_causal_lm(ckpt, hidden=32, layers=4, heads=2, arch="gpt_neox", max_positions=16)
    np.save(tmp_path / "tokens.npy", np.random.default_rng(0).integers(0, 259, size=4000).astype(np.uint16))
    opts = {
        "paper.pythia": str(ckpt),
        "paper.train.tokens": str(tmp_path / "tokens.npy"),
        "paper.layout": "1+1R2+1",
        "paper.train.steps": "1",
        "paper.train.batch": "2",
        "paper.train.seq_len": "32",
        "paper.train.val_tokens": "300",
        "paper.train.eval_every": "0",
    }
    return ckpt, opts


def test_longer_than_the_config_from_scratch_runs(short_ckpt, tmp_path):
    _, opts = short_ckpt
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", show_progress=False, options=opts)
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert all(c["measured"] is not None for c in res["claims"])


def test_from_a_checkpoint_needs_the_explicit_limit(short_ckpt, tmp_path):
    ckpt, opts = short_ckpt
    opts = {**opts, "paper.init_from": str(ckpt), "paper.arms": "vanilla,base,anchor,mesh"}
    with pytest.raises(ExperimentError, match="paper.max_seq_len=32"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", show_progress=False, options=opts)
    opts["paper.max_seq_len"] = "32"
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", show_progress=False, options=opts)
    assert (rec.out_dir / "results.json").is_file()


def test_train_script_takes_the_length_from_scratch(short_ckpt, tmp_path):
    ckpt, _ = short_ckpt
    out = tmp_path / "train_out"
    argv = ["--pythia", str(ckpt), "--tokens", str(tmp_path / "tokens.npy"), "--layout", "1+1R2+1"]
    argv += ["--steps", "1", "--batch", "2", "--seq-len", "32", "--val-tokens", "300", "--eval-every", "0"]
    train_main([*argv, "--out", str(out), "--device", "cpu"])
    assert json.loads((out / "result.json").read_text())["config"]["max_seq_len"] == 32
    with pytest.raises(ValueError, match="exceeds"):
        train_main([*argv, "--init-from", str(ckpt), "--out", str(tmp_path / "o2"), "--device", "cpu"])
