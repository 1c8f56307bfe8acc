"""Paper-scale path on tiny generated files: snapshot .npz (per-time keys and TorchCFM's embryoid-body layout),
LiDAR .npy with the k-NN tangent-plane potential, image latents, and the bad-input errors."""

import json

import numpy as np
import pytest
import torch

from iclr26.core.experiment import ExperimentError, run_experiment
from iclr26.ncgsb.experiment import EXPERIMENT
from iclr26.ncgsb.paper import (
    LidarPotential,
    SnapshotError,
    encode_latents,
    lidar_endpoints,
    load_lidar,
    load_snapshots,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = {
    "fit.steps": "4",
    "fit.n_particles": "16",
    "method.n_blocks": "4",
    "method.hidden": "8",
    "n_eval": "20",
    "task_a.gammas": "0,2",
    "task_c.gammas": "0",
    "workers": "0",
}


def _eb_file(path, n=150, labels_dtype=np.int64):
    """TorchCFM eb_velocity_v5.npz layout: pcs (N, 100), sample_labels (N,) day 0..4, plus other keys."""
    rng = np.random.default_rng(0)
    lab = np.repeat(np.arange(5), n // 5).astype(labels_dtype)
    pcs = rng.normal(size=(len(lab), 100)) + lab[:, None] * 0.5
    np.savez(
        path,
        pcs=pcs,
        sample_labels=lab,
        phate=rng.normal(size=(len(lab), 2)),
        delta_embedding=rng.normal(size=(len(lab), 100)),
    )
    return path


def test_load_snapshots_per_time_keys(tmp_path):
    f = tmp_path / "s.npz"
    np.savez(f, **{"0": np.zeros((5, 3)), "t0.5": np.ones((6, 3)), "t=1.0": np.full((7, 3), 2.0)})
    snaps = load_snapshots(f)
    assert sorted(snaps) == [0.0, 0.5, 1.0] and snaps[0.5].shape == (6, 3) and snaps[1.0].dtype == np.float32
    assert load_snapshots(f, n_dims=2)[0.0].shape == (5, 2)


@pytest.mark.parametrize("dtype", [np.int64, np.float64])
def test_load_snapshots_embryoid_body_layout(tmp_path, dtype):
    snaps = load_snapshots(_eb_file(tmp_path / "eb_velocity_v5.npz", labels_dtype=dtype), n_dims=5)
    assert sorted(snaps) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert all(a.shape == (30, 5) for a in snaps.values())


@pytest.mark.parametrize(
    "arrays, match",
    [
        ({"0": np.zeros((4, 2)), "1": np.array([[0.0, np.nan]] * 4)}, "'1' contains NaN"),
        ({"0": np.zeros((4, 2)), "1": np.zeros((4, 3))}, "mixed dimensions"),
        ({"0": np.zeros((4, 2)), "1.5": np.zeros((4, 2)), "1": np.zeros((4, 2))}, "'1.5': time 1.5 is outside"),
        (
            {"0": np.zeros((4, 2)), "0.5": np.zeros((4, 2)), "t0.5": np.zeros((4, 2)), "1": np.zeros((4, 2))},
            "duplicated",
        ),
        ({"0": np.zeros((4, 2))}, "at least two marginals"),
        ({"0": np.zeros((4, 2)), "day3": np.zeros((4, 2))}, "key 'day3' is not a time"),
        ({"0": np.zeros((4, 2)), "0.5": np.zeros((4, 2))}, "t = 0 and t = 1"),
    ],
)
def test_load_snapshots_bad_input(tmp_path, arrays, match):
    f = tmp_path / "bad.npz"
    np.savez(f, **arrays)
    with pytest.raises(SnapshotError, match=match):
        load_snapshots(f)


def test_paper_scale_snapshots_end_to_end(tmp_path):
    f = _eb_file(tmp_path / "eb_velocity_v5.npz")
    rec = run_experiment(
        EXPERIMENT,
        "paper",
        seeds=[0],
        out_root=tmp_path / "runs",
        show_progress=False,
        options={**TINY, "paper.snapshots": str(f)},
    )
    res = json.loads((rec.out_dir / "results.json").read_text())
    loo = res["metrics"]["snapshots"]["0"]
    assert sorted(map(float, loo["chosen"])) == [0.25, 0.5, 0.75]
    assert np.isfinite(loo["nc_w2"]) and np.isfinite(loo["c_w2"])


def test_paper_scale_needs_an_interior_time(tmp_path):
    f = tmp_path / "two.npz"
    np.savez(f, **{"0": np.zeros((8, 2)), "1": np.ones((8, 2))})
    with pytest.raises(SnapshotError, match="interior"):
        run_experiment(
            EXPERIMENT,
            "paper",
            seeds=[0],
            out_root=tmp_path / "runs",
            show_progress=False,
            options={**TINY, "paper.snapshots": str(f)},
        )


def test_paper_scale_errors_name_the_key(tmp_path):
    with pytest.raises(ExperimentError, match="paper.snapshots"):
        run_experiment(EXPERIMENT, "paper", seeds=[0], out_root=tmp_path, show_progress=False)
    with pytest.raises(ExperimentError, match="no such file"):
        run_experiment(
            EXPERIMENT,
            "paper",
            seeds=[0],
            out_root=tmp_path,
            show_progress=False,
            options={"paper.snapshots": str(tmp_path / "missing.npz")},
        )
    bad = tmp_path / "nan.npz"
    np.savez(bad, **{"0": np.zeros((4, 2)), "0.5": np.full((4, 2), np.nan), "1": np.zeros((4, 2))})
    with pytest.raises(ExperimentError, match="'0.5' contains NaN"):
        run_experiment(
            EXPERIMENT,
            "paper",
            seeds=[0],
            out_root=tmp_path,
            show_progress=False,
            options={"paper.snapshots": str(bad)},
        )


def _plane_points(n=400):
    rng = np.random.default_rng(0)
    xy = rng.uniform(-2, 2, size=(n, 2))
    return np.c_[xy, 0.3 * xy[:, 0] - 0.2 * xy[:, 1] + 0.5].astype(np.float32)


def test_lidar_potential_is_squared_distance_to_tangent_plane():
    pts = _plane_points()
    pot = LidarPotential(pts, k=10, cost=4.0)
    on = torch.tensor(pts[:5])
    assert float(pot(on).abs().max()) < 1e-8
    normal = torch.tensor([0.3, -0.2, -1.0]) / torch.tensor([0.3, -0.2, -1.0]).norm()
    off = on + 0.1 * normal
    assert torch.allclose(pot(off), torch.full((5,), 4.0 * 0.01), atol=1e-5)
    x = off.clone().requires_grad_(True)
    pot(x).sum().backward()
    cos = torch.nn.functional.cosine_similarity(x.grad, normal.expand(5, 3), dim=1).abs()
    assert float(cos.min()) > 0.999
    with pytest.raises(ValueError, match=r"\(P, 3\)"):
        LidarPotential(pts[:, :2])


def test_paper_scale_lidar_end_to_end(tmp_path):
    f = tmp_path / "rainier.npy"
    np.save(f, _plane_points())
    assert load_lidar(f).shape == (400, 3)
    a, b = lidar_endpoints(load_lidar(f), 10)
    assert a.shape == (10, 3) and a[:, 0].mean() < b[:, 0].mean()
    rec = run_experiment(
        EXPERIMENT,
        "paper",
        seeds=[0],
        out_root=tmp_path / "runs",
        show_progress=False,
        options={**TINY, "paper.lidar": str(f), "paper.knn": "8"},
    )
    lid = json.loads((rec.out_dir / "results.json").read_text())["metrics"]["lidar"]["0"]
    assert set(lid) == {"gamma0", "gamma0_no_potential"}
    assert all(np.isfinite(v["feasibility"]) and v["optimality"] > 0 for v in lid.values())
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((10, 2)))
    with pytest.raises(ExperimentError, match=r"\(P, 3\)"):
        run_experiment(
            EXPERIMENT,
            "paper",
            seeds=[0],
            out_root=tmp_path / "runs",
            show_progress=False,
            options={**TINY, "paper.lidar": str(bad)},
        )


def test_encode_latents_with_a_user_encoder():
    enc = torch.nn.Conv2d(3, 2, 4, stride=4)
    imgs = np.random.default_rng(0).uniform(-1, 1, size=(5, 3, 8, 8)).astype(np.float32)
    z = encode_latents(enc, imgs, batch=2)
    assert z.shape == (5, 8)
    with torch.no_grad():
        assert np.allclose(z[3], enc(torch.tensor(imgs[3:4])).reshape(-1).numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="N, C, H, W"):
        encode_latents(enc, imgs[0])
