"""Paper-scale inputs from local files (nothing downloads).

* :func:`load_snapshots` - time-stamped snapshots from an ``.npz``: either one array per time key
  (``"0.25"``, ``"t0.25"``, ``"t=0.25"``), or TorchCFM's embryoid-body layout ``eb_velocity_v5.npz``
  (``pcs`` (N, 100) float, ``sample_labels`` (N,) day index 0..4), mapped to times ``label / max label``.
* :class:`LidarPotential` - a k-NN tangent-plane potential from a LiDAR point cloud ``.npy`` (P, 3), as
  in GSBM's LiDAR task: ``U(x) = c·((x − m_x)·n_x)²`` with ``m_x, n_x`` the mean and normal of the k nearest
  scan points.
* :func:`encode_latents` / :func:`load_autoencoder_kl` - images to latent particles through a user encoder
  (a diffusers ``AutoencoderKL`` from a local folder), where the paper runs its image tasks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

_TIME_KEY = re.compile(r"^(?:t\s*=?\s*)?([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)$")


class SnapshotError(ValueError):
    """A snapshot file that cannot be used; the message names the offending key."""


def _validate(snaps: dict[float, np.ndarray], keys: dict[float, str]) -> dict[float, np.ndarray]:
    if len(snaps) < 2:
        raise SnapshotError(f"need at least two marginals (times), got {len(snaps)}")
    dims = {keys[t]: a.shape[1] for t, a in snaps.items()}
    if len(set(dims.values())) != 1:
        raise SnapshotError(f"snapshots have mixed dimensions: {dims}")
    for t, a in snaps.items():
        if not np.isfinite(a).all():
            raise SnapshotError(f"snapshot '{keys[t]}' contains NaN or inf")
        if not 0.0 <= t <= 1.0:
            raise SnapshotError(f"snapshot '{keys[t]}': time {t} is outside [0, 1]")
    if 0.0 not in snaps or 1.0 not in snaps:
        raise SnapshotError(f"snapshots must include t = 0 and t = 1 (the bridge ends), got {sorted(snaps)}")
    return dict(sorted(snaps.items()))


def load_snapshots(path: str | Path, n_dims: int = 0) -> dict[float, np.ndarray]:
    """``{t: (N_t, D) float32}`` from an ``.npz`` (see the module docstring); ``n_dims > 0`` keeps the
    leading dimensions (e.g. 5 PCA components). Raises :class:`SnapshotError` (naming the key) for NaN,
    mixed dimensions, times outside [0, 1] or duplicated, or fewer than two marginals."""
    with np.load(Path(path), allow_pickle=False) as z:
        files = list(z.files)
        if "pcs" in files and "sample_labels" in files:
            x, lab = np.asarray(z["pcs"], np.float64), np.asarray(z["sample_labels"])
            if x.ndim != 2 or lab.shape[0] != x.shape[0]:
                raise SnapshotError(f"'pcs' {x.shape} and 'sample_labels' {lab.shape} do not match")
            levels = np.unique(lab)
            top = float(levels.max()) if levels.size and float(levels.max()) > 0 else 1.0
            raw = {float(v) / top: x[lab == v] for v in levels}
            keys = {t: f"sample_labels={v}" for t, v in zip(raw, levels)}
        else:
            raw, keys = {}, {}
            for key in files:
                m = _TIME_KEY.match(key.strip())
                if not m:
                    raise SnapshotError(f"key '{key}' is not a time (expected e.g. '0.25' or 't0.25')")
                t = float(m.group(1))
                if t in raw:
                    raise SnapshotError(f"key '{key}': time {t} is duplicated (also '{keys[t]}')")
                arr = np.asarray(z[key], np.float64)
                if arr.ndim != 2:
                    raise SnapshotError(f"key '{key}': expected an (N, D) array, got shape {arr.shape}")
                raw[t], keys[t] = arr, key
    if n_dims > 0:
        raw = {t: a[:, :n_dims] for t, a in raw.items()}
    return {t: a.astype(np.float32) for t, a in _validate(raw, keys).items()}


def standardise(snaps: dict[float, np.ndarray]) -> tuple[dict[float, np.ndarray], np.ndarray, float]:
    """Centre by the pooled mean and divide by the pooled std (one scalar), so blur is in unit-spread units."""
    pooled = np.concatenate(list(snaps.values()))
    mean, scale = pooled.mean(0), float(pooled.std()) or 1.0
    return {t: ((a - mean) / scale).astype(np.float32) for t, a in snaps.items()}, mean, scale


class LidarPotential:
    """``U(x) = c·((x − m_x)·n_x)²``: squared distance to the tangent plane of the k nearest scan points
    (plane by PCA: m = mean, n = eigenvector of the smallest covariance eigenvalue). Gradients flow
    through x; the neighbour search and the plane are treated as constants."""

    def __init__(self, points, k: int = 20, cost: float = 100.0):
        pts = torch.as_tensor(np.asarray(points, dtype=np.float32))
        if pts.ndim != 2 or pts.shape[1] != 3:
            raise ValueError(f"LiDAR points must be (P, 3), got {tuple(pts.shape)}")
        if not torch.isfinite(pts).all():
            raise ValueError("LiDAR points contain NaN or inf")
        if pts.shape[0] < k:
            raise ValueError(f"LiDAR cloud has {pts.shape[0]} points, fewer than k = {k}")
        self.points, self.k, self.cost = pts, int(k), float(cost)

    def planes(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            if self.points.device != x.device:
                self.points = self.points.to(x.device)
            idx = torch.cdist(x.detach().float(), self.points).topk(self.k, largest=False).indices
            nb = self.points[idx]  # (N, k, 3)
            mean = nb.mean(1)
            cov = (nb - mean[:, None]).transpose(1, 2) @ (nb - mean[:, None]) / self.k
            normal = torch.linalg.eigh(cov).eigenvectors[..., 0]
        return mean.to(x.dtype), normal.to(x.dtype)

    def distance(self, x: torch.Tensor) -> torch.Tensor:
        """Signed distance to the local tangent plane."""
        mean, normal = self.planes(x)
        return ((x - mean) * normal).sum(-1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.cost * self.distance(x) ** 2


def load_lidar(path: str | Path) -> np.ndarray:
    """A LiDAR scan ``.npy`` of shape (P, 3) (x, y, z), float."""
    pts = np.load(Path(path), allow_pickle=False)
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise ValueError(f"{path}: LiDAR array must be (P, 3), got {pts.shape}")
    return pts.astype(np.float32)


def lidar_endpoints(points: np.ndarray, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Source and target clouds on the scan: the scan points nearest to two Gaussian blobs placed at 25% and
    75% of the x-range (mid y), following the layout of GSBM's LiDAR task."""
    rng = np.random.default_rng(seed)
    lo, hi = points.min(0), points.max(0)
    span = hi - lo
    out = []
    for frac in (0.25, 0.75):
        centre = lo[:2] + np.array([frac, 0.5]) * span[:2]
        xy = centre + 0.05 * span[:2].mean() * rng.standard_normal((n, 2))
        d = ((xy[:, None, :] - points[None, :, :2]) ** 2).sum(-1)
        out.append(points[d.argmin(1)])
    return out[0], out[1]


def encode_latents(
    encoder: Callable[[torch.Tensor], torch.Tensor], images, batch: int = 16, device: str = "cpu"
) -> np.ndarray:
    """Flattened latents ``encoder(images)`` for an (N, C, H, W) image array in [-1, 1], batched."""
    imgs = torch.as_tensor(np.asarray(images, dtype=np.float32))
    if imgs.ndim != 4:
        raise ValueError(f"images must be (N, C, H, W), got {tuple(imgs.shape)}")
    out = []
    with torch.no_grad():
        for i in range(0, imgs.shape[0], batch):
            z = encoder(imgs[i : i + batch].to(device))
            out.append(z.reshape(z.shape[0], -1).float().cpu())
    return torch.cat(out).numpy()


def load_autoencoder_kl(path: str | Path, device: str = "cpu") -> Callable[[torch.Tensor], torch.Tensor]:
    """A diffusers ``AutoencoderKL`` from a local folder, as an encoder returning the posterior mean."""
    try:
        from diffusers import AutoencoderKL
    except ImportError as exc:
        raise ImportError("image latents need the 'diffusers' package (pip install diffusers)") from exc
    vae = AutoencoderKL.from_pretrained(str(path), local_files_only=True).to(device).eval()
    return lambda x: vae.encode(x).latent_dist.mean
