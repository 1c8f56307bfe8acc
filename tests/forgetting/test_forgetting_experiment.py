"""The registered experiment: smoke scale end to end, the paper-scale path on tiny local files
(image folder + ResNet-18, .npz features), bad options, DDP under torchrun, and the small scale (slow)."""

import json
import os

import numpy as np
import pytest
import torch

from iclr26.core.config import ConfigError, flatten
from iclr26.core.experiment import ExperimentError, RunContext, resolve_config, run_experiment
from iclr26.forgetting import ResNet18Features, load_cifar, load_image_folder, load_npz_tasks
from iclr26.forgetting.config import config_for
from iclr26.forgetting.data import CIFAR_MEAN_STD, _cifar_pickles, _cifar_torchvision
from iclr26.forgetting.experiment import CLAIMS, EXPERIMENT
from iclr26.forgetting.paper import random_crop_flip

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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


def make_cifar(root, name="cifar10", n_per_class=(3, 2), seed=0):
    """Tiny files in the distributed CIFAR layout: pickled dicts with ``data`` (N, 3072) uint8 rows
    (channel-major) and ``labels`` (CIFAR-10) / ``fine_labels`` (CIFAR-100), as torchvision reads them."""
    import pickle

    rng = np.random.default_rng(seed)
    n_classes = 10 if name == "cifar10" else 100
    folder = root / ("cifar-10-batches-py" if name == "cifar10" else "cifar-100-python")
    folder.mkdir(parents=True)
    files = ([f"data_batch_{i}" for i in range(1, 6)], ["test_batch"]) if name == "cifar10" else (["train"], ["test"])
    key = "labels" if name == "cifar10" else "fine_labels"
    for names, n in zip(files, n_per_class):
        for f in names:
            y = np.repeat(np.arange(n_classes), n)
            data = rng.integers(0, 256, (len(y), 3072)).astype(np.uint8)
            with open(folder / f, "wb") as fh:
                pickle.dump({"data": data, key: y.tolist(), "batch_label": f}, fh)
    return root


def test_cifar_loader_reads_the_distributed_layout(tmp_path):
    for name, n_tasks in (("cifar10", 5), ("cifar100", 10)):
        root = make_cifar(tmp_path / name, name)
        x, y = _cifar_pickles(name, root, train=True)
        n_cls = 10 if name == "cifar10" else 100
        per_file = 3 * n_cls
        files = 5 if name == "cifar10" else 1
        assert x.shape == (files * per_file, 3, 32, 32) and x.dtype == np.uint8 and len(y) == len(x)
        # row layout: the first 1024 bytes are the red plane, row-major
        import pickle

        folder = root / ("cifar-10-batches-py" if name == "cifar10" else "cifar-100-python")
        with open(folder / ("data_batch_1" if name == "cifar10" else "train"), "rb") as fh:
            raw = pickle.load(fh, encoding="latin1")["data"]
        assert np.array_equal(x[0, 0].ravel(), raw[0, :1024]) and np.array_equal(x[0, 2, 31], raw[0, -32:])
        tv = _cifar_torchvision(name, root, train=True)
        if tv is not None:  # torchvision's dataset class reads the same arrays
            assert np.array_equal(tv[0], x) and np.array_equal(tv[1], y)
        for path in (root, root / folder.name):  # the root or the extracted folder itself
            data = load_cifar(path, n_tasks=n_tasks, seed=1, trust_pickles=True)
            assert data.x_train.shape == (files * per_file, 3, 32, 32) and data.n_classes == n_cls
            assert data.n_tasks == n_tasks and len(data.y_test) == 2 * n_cls
        mean, std = CIFAR_MEAN_STD[name]
        expect = (x[0, 1, 0, 0] / 255.0 - mean[1]) / std[1]
        # class order permuted by the seed: the sample keeps its pixels, its label is remapped
        assert float(data.x_train[0, 1, 0, 0]) == pytest.approx(expect, abs=1e-5)
    a, b = (load_cifar(root, 10, seed=s, trust_pickles=True) for s in (1, 2))
    assert a.y_train.tolist() != b.y_train.tolist()
    with pytest.raises(ValueError, match="holds cifar100"):
        load_cifar(root, 10, name="cifar10", trust_pickles=True)


def test_paper_scale_on_tiny_cifar10_files(tmp_path):
    root = make_cifar(tmp_path / "c10", "cifar10", n_per_class=(1, 1))
    opts = {"data.path": str(root), **PAPER_TINY, "log_every": "1", "data.trust_pickles": "true"}
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", options=opts, show_progress=False)
    runs = rec.results["metrics"]["runs"]
    assert set(runs) == {"cifar10/cil/0/seed0", "cifar10/cil/10/seed0"}  # 20% of 50 = 10 = one per class
    assert np.asarray(runs["cifar10/cil/10/seed0"]["acc_shallow"], dtype=float).shape == (2, 2)
    rows = [json.loads(r) for r in (rec.out_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows if r["series"] == "cifar10/cil/20%/seed0"]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) == sum(runs["cifar10/cil/10/seed0"]["steps"])


def test_random_crop_flip_matches_a_per_sample_loop():
    x = torch.randn(6, 3, 8, 8)
    out = random_crop_flip(x, torch.Generator().manual_seed(3), pad=2)
    g = torch.Generator().manual_seed(3)  # same draws, in the same order
    dy = torch.randint(0, 5, (6,), generator=g)
    dx = torch.randint(0, 5, (6,), generator=g)
    flip = torch.rand(6, generator=g) < 0.5
    xp = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for i in range(6):
        crop = xp[i, :, dy[i] : dy[i] + 8, dx[i] : dx[i] + 8]
        assert torch.equal(out[i], crop.flip(-1) if flip[i] else crop)
    assert flip.any() and (~flip).any()  # both branches exercised
    assert not torch.equal(out, x)


def test_smoke_scale_end_to_end(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert [c["name"] for c in res["claims"]] == [c.name for c in CLAIMS]
    for c in res["claims"]:
        assert c["measured"], f"claim {c['name']} has no measured value"
        assert "error" not in c, c
    assert (rec.out_dir / "forgetting_vs_buffer.png").exists() and (rec.out_dir / "report.md").exists()
    gate = res["metrics"]["competence_gate"]
    assert gate["passed"] == (gate["min_train_acc"] >= 0.99) and 0 < gate["min_train_acc"] <= 1
    cfg = json.loads((rec.out_dir / "config.json").read_text())["config"]
    assert cfg["train"]["lr"] == 0.1 and cfg["train"]["momentum"] == 0.0 and cfg["train"]["epochs"] == 10
    # per-step training curves: one series per cell, steps counted over all tasks, task id attached
    rows = [json.loads(line) for line in (rec.out_dir / "metrics.jsonl").read_text().splitlines()]
    series = {r["series"] for r in rows}
    assert "split-digits/cil/4%/seed0" in series and "orthogonal-subspaces/til/4%/seed0" in series
    one = [r for r in rows if r["series"] == "split-digits/cil/4%/seed0"]
    assert len(one) >= 3 and [r["step"] for r in one] == [100 * (k + 1) for k in range(len(one))]
    assert [r["task"] for r in one] == sorted(r["task"] for r in one) and one[-1]["task"] == 4
    assert all(np.isfinite(r["loss"]) for r in one)
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


def test_config_tree_and_bad_keys(tmp_path):
    small, smoke, paper = config_for("small"), config_for("smoke"), config_for("paper")
    # the official optimiser at every scale (Mammoth CLI defaults of the er_balanced runs)
    for c in (small, smoke, paper):
        assert (c.train.lr, c.train.momentum, c.train.batch_size, c.train.minibatch_size) == (0.1, 0.0, 32, 32)
    assert small.train.epochs == 100 and small.train.weight_decay == 5e-4 and small.model.d_feat == 64
    assert paper.train.epochs == 50 and paper.train.weight_decay == 0.0  # official Seq-CIFAR-100 ER run
    assert smoke.grid.buffer_fracs == (0.0, 0.04, 1.0)
    keys = {k for k, _, _ in flatten(small)}
    assert {"train.lr", "grid.buffer_fracs", "eval.forgetting_ref", "data.path", "model.d_feat"} <= keys
    with pytest.raises(ConfigError, match="did you mean"):
        resolve_config(EXPERIMENT, "smoke", {"train.lrr": "0.2"})
    with pytest.raises(ConfigError):
        resolve_config(EXPERIMENT, "smoke", {"grid.buffer_fracs": "0,2.0"})  # fraction > 1
    with pytest.raises(ConfigError):
        resolve_config(EXPERIMENT, "smoke", {"grid.buffer_fracs": "0.1,0.2"})  # no buffer-0 run
    with pytest.raises(ConfigError):
        resolve_config(EXPERIMENT, "smoke", {"train.epochs": "many"})
    with pytest.raises(ConfigError):
        resolve_config(EXPERIMENT, "smoke", {"eval.forgetting_ref": "mean"})
    cfg = resolve_config(EXPERIMENT, "smoke", {"train.buffer_size": "5"})
    with pytest.raises(ExperimentError, match="per grid cell"):
        EXPERIMENT.run(RunContext("smoke", (0,), tmp_path, cfg=cfg))
    cfg = resolve_config(EXPERIMENT, "smoke", {"grid.datasets": "cifar"})
    with pytest.raises(ExperimentError, match="grid.datasets"):
        EXPERIMENT.run(RunContext("smoke", (0,), tmp_path, cfg=cfg))


PAPER_TINY = {
    "data.n_tasks": "2",
    "model.nf": "4",
    "train.epochs": "1",
    "grid.buffer_fracs": "0,0.2",
    "train.batch_size": "4",
    "train.minibatch_size": "4",
}


def test_paper_scale_on_tiny_image_folder(tmp_path):
    root = make_image_folder(tmp_path / "imgs")
    data = load_image_folder(root, n_tasks=2, seed=0)
    assert data.x_train.shape == (24, 3, 8, 8) and data.n_tasks == 2
    assert abs(float(data.x_train.mean())) < 1e-4  # normalised with train statistics
    opts = {"data.path": str(root), **PAPER_TINY, "grid.til_fracs": "0"}
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", options=opts, show_progress=False)
    res = rec.results
    assert {c["name"] for c in res["claims"]} == {"C1", "C2", "C3", "C4"}
    runs = res["metrics"]["runs"]
    assert any("/cil/5/" in k for k in runs) and any("/til/0/" in k for k in runs)
    r = next(v for k, v in runs.items() if "/cil/5/" in k)
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
        np.savez(
            folder / f"task{t}.npz",
            x_train=rng.standard_normal((20, 5)) + y_tr[:, None],
            y_train=y_tr,
            x_test=rng.standard_normal((8, 5)) + y_te[:, None],
            y_test=y_te,
        )
    data = load_npz_tasks(folder)
    assert data.n_tasks == 2 and data.task_classes == [[0, 1], [2, 3]]
    opts = {
        "data.path": str(folder),
        "train.epochs": "2",
        "grid.buffer_fracs": "0,0.1",
        "model.d_feat": "4",
        "train.batch_size": "8",
    }
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", options=opts, show_progress=False)
    assert len(rec.results["metrics"]["runs"]) == 2
    assert rec.results["metrics"]["config"]["model"]["d_feat"] == 4


def test_bad_paper_inputs_give_one_line_errors(tmp_path):
    def run(opts):
        return EXPERIMENT.run(RunContext("paper", (0,), tmp_path, cfg=resolve_config(EXPERIMENT, "paper", opts)))

    with pytest.raises(ExperimentError, match="data.path"):
        run({})
    with pytest.raises(ExperimentError, match="no such file"):
        run({"data.path": str(tmp_path / "missing")})
    bad = tmp_path / "bad.npz"
    np.savez(bad, x_train=np.zeros((4, 2)))
    with pytest.raises(ExperimentError, match="missing arrays"):
        run({"data.path": str(bad), "data.n_tasks": "2"})
    root = make_cifar(tmp_path / "c10", "cifar10")
    (root / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(ExperimentError, match="data_batch_3"):
        run({"data.path": str(root), "data.format": "cifar", "data.n_tasks": "5", "data.trust_pickles": "true"})


@pytest.mark.dist
@pytest.mark.slow
def test_torchrun_two_processes_on_image_folder(tmp_path, torchrun):
    root = make_image_folder(tmp_path / "imgs")
    args = [
        "-m",
        "iclr26.forgetting.paper",
        "--out",
        str(tmp_path / "runs"),
        "--set",
        f"data.path={root}",
    ]
    for kv in PAPER_TINY.items():
        args += ["--set", "=".join(kv)]
    torchrun(args, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    results = list((tmp_path / "runs" / "forgetting").glob("*/results.json"))
    assert len(results) == 1  # only rank 0 writes a run folder
    res = json.loads(results[0].read_text())
    assert len(res["metrics"]["runs"]) == 2


@pytest.mark.slow
def test_small_scale(tmp_path):
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    assert len(rec.results["claims"]) == 4
    assert all(c["measured"] for c in rec.results["claims"])
