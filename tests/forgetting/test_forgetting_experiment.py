"""The registered experiment: smoke scale end to end, the paper-scale path on tiny local files
(image folder + ResNet-18, .npz features), bad options, DDP under torchrun, and the small scale (slow)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from iclr26.core.experiment import ExperimentError, RunContext, run_experiment
from iclr26.forgetting import ResNet18Features, load_image_folder, load_npz_tasks
from iclr26.forgetting.experiment import CLAIMS, EXPERIMENT


def make_image_folder(root, n_classes=4, n_train=6, n_test=2, size=8, seed=0):
    from PIL import Image

    rng = np.random.default_rng(seed)
    for c in range(n_classes):
        base = rng.integers(0, 255, (size, size, 3))
        for split, n in (("train", n_train), ("test", n_test)):
            d = root / split / f"class_{c:02d}"
            d.mkdir(parents=True)
            for i in range(n):
                img = np.clip(base + rng.integers(-30, 30, base.shape), 0, 255).astype(np.uint8)
                Image.fromarray(img).save(d / f"{i}.png")
    return root


def test_smoke_scale_end_to_end(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert [c["name"] for c in res["claims"]] == [c.name for c in CLAIMS]
    for c in res["claims"]:
        assert c["measured"], f"claim {c['name']} has no measured value"
        assert "error" not in c, c
    assert (rec.out_dir / "forgetting_vs_buffer.png").exists() and (rec.out_dir / "report.md").exists()
    agg = res["metrics"]["aggregate"]
    for d in ("split-digits", "orthogonal-subspaces"):
        cil = agg[d]["cil"]
        # loose invariants of the smoke grid: no replay forgets the head completely, a 4% buffer
        # forgets less deeply than shallowly, and more replay reduces both
        assert cil["0%"]["F_sh"]["mean"] > 80
        assert cil["4%"]["F_dp"]["mean"] < cil["4%"]["F_sh"]["mean"]
        assert cil["100%"]["F_sh"]["mean"] < cil["0%"]["F_sh"]["mean"]
        # unfaithfulness guard: a probe fit on what the head saw (buffer) is worse than the population probe
        assert cil["4%"]["probe_buffer_old"] < cil["4%"]["probe_old"]
        assert cil["4%"]["var_ratio"] < 1


def test_paper_scale_on_tiny_image_folder(tmp_path):
    root = make_image_folder(tmp_path / "imgs")
    data = load_image_folder(root, n_tasks=2, seed=0)
    assert data.x_train.shape == (24, 3, 8, 8) and data.n_tasks == 2
    assert abs(float(data.x_train.mean())) < 1e-4  # normalised with train statistics
    opts = {"data": str(root), "n_tasks": "2", "nf": "4", "epochs": "1", "buffers": "0,4", "settings": "cil,til",
            "batch_size": "4", "minibatch_size": "4"}
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", options=opts, show_progress=False)
    res = rec.results
    assert {c["name"] for c in res["claims"]} == {"C1", "C2", "C3", "C4"}
    runs = res["metrics"]["runs"]
    assert any("/cil/4/" in k for k in runs) and any("/til/0/" in k for k in runs)
    r = next(v for k, v in runs.items() if "/cil/4/" in k)
    assert np.asarray(r["acc_shallow"], dtype=float).shape == (2, 2)
    assert "buffer_stats" in r["diag"] and "lda" in r["diag"]


def test_resnet18_features_shape():
    net = ResNet18Features(3, nf=4)
    assert net(torch.randn(2, 3, 16, 16)).shape == (2, 32) and net.out_dim == 32


def test_paper_scale_on_npz_features(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "feats"
    folder.mkdir()
    for t in range(2):
        y_tr = np.repeat([2 * t + 10, 2 * t + 11], 10)
        y_te = np.repeat([2 * t + 10, 2 * t + 11], 4)
        np.savez(folder / f"task{t}.npz", x_train=rng.standard_normal((20, 5)) + y_tr[:, None],
                 y_train=y_tr, x_test=rng.standard_normal((8, 5)) + y_te[:, None], y_test=y_te)
    data = load_npz_tasks(folder)
    assert data.n_tasks == 2 and data.task_classes == [[0, 1], [2, 3]]
    opts = {"data": str(folder), "epochs": "2", "buffers": "0,4", "d_feat": "4", "batch_size": "8"}
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", options=opts, show_progress=False)
    assert len(rec.results["metrics"]["runs"]) == 2


def test_bad_options_give_one_line_errors(tmp_path):
    ctx = RunContext("paper", (0,), tmp_path, {})
    with pytest.raises(ExperimentError, match="data"):
        EXPERIMENT.run(ctx)
    ctx = RunContext("paper", (0,), tmp_path, {"data": str(tmp_path / "missing")})
    with pytest.raises(ExperimentError, match="no such file"):
        EXPERIMENT.run(ctx)
    bad = tmp_path / "bad.npz"
    np.savez(bad, x_train=np.zeros((4, 2)))
    with pytest.raises(ExperimentError, match="missing arrays"):
        EXPERIMENT.run(RunContext("paper", (0,), tmp_path, {"data": str(bad), "n_tasks": "2"}))
    with pytest.raises(ExperimentError):
        EXPERIMENT.run(RunContext("smoke", (0,), tmp_path, {"buffer_fracs": "0,2.0"}))
    with pytest.raises(ExperimentError):
        EXPERIMENT.run(RunContext("smoke", (0,), tmp_path, {"epochs": "many"}))


@pytest.mark.dist
@pytest.mark.slow
def test_torchrun_two_processes_on_image_folder(tmp_path):
    root = make_image_folder(tmp_path / "imgs")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=0",
           "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0", "-m", "iclr26.forgetting.paper",
           "--out", str(tmp_path / "runs"), "--set", f"data={root}",
           "--set", "n_tasks=2", "--set", "nf=4", "--set", "epochs=1", "--set", "buffers=0,4",
           "--set", "batch_size=4", "--set", "minibatch_size=4"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    results = list((tmp_path / "runs" / "forgetting").glob("*/results.json"))
    assert len(results) == 1  # only rank 0 writes a run folder
    res = json.loads(results[0].read_text())
    assert len(res["metrics"]["runs"]) == 2


@pytest.mark.slow
def test_small_scale(tmp_path):
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    assert len(rec.results["claims"]) == 4
    assert all(c["measured"] for c in rec.results["claims"])
