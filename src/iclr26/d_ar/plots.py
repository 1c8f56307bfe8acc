"""Figures of the digits reproduction (image grids); matplotlib is imported lazily."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from iclr26.core.report import _pyplot, save_fig


def _grid(ax, imgs: np.ndarray, title: str = "") -> None:
    ax.imshow(np.clip(imgs, -1, 1), cmap="gray_r", vmin=-1, vmax=1)
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=8)


def plot_previews(path: Path, previews: np.ndarray, originals: np.ndarray) -> Path:
    """Rows: test digits; columns: preview with k = 1..K groups, then the original."""
    plt = _pyplot()
    K, n = previews.shape[0], previews.shape[1]
    fig, axes = plt.subplots(n, K + 1, figsize=(1.2 * (K + 1), 1.2 * n), squeeze=False)
    for i in range(n):
        for k in range(K):
            _grid(axes[i][k], previews[k, i, 0], f"k={k + 1}" if i == 0 else "")
        _grid(axes[i][K], originals[i, 0], "image" if i == 0 else "")
    return save_fig(fig, path)


def plot_samples(path: Path, imgs: np.ndarray, title: str, per_class: int = 10) -> Path:
    """10 classes (rows) x up to ``per_class`` samples; imgs are ordered class by class."""
    plt = _pyplot()
    n_per = len(imgs) // 10
    cols = min(per_class, n_per)
    fig, axes = plt.subplots(10, cols, figsize=(0.9 * cols, 9), squeeze=False)
    for c in range(10):
        for j in range(cols):
            _grid(axes[c][j], imgs[c * n_per + j, 0])
    fig.suptitle(title, fontsize=9)
    return save_fig(fig, path)


def plot_layout(path: Path, layout: dict, n: int = 8) -> Path:
    """Columns: reference digit, sample of the target class from its first group, free sample."""
    plt = _pyplot()
    n = min(n, len(layout["ref"]))
    fig, axes = plt.subplots(n, 3, figsize=(3.6, 1.2 * n), squeeze=False)
    for i in range(n):
        _grid(axes[i][0], layout["ref"][i, 0], "reference" if i == 0 else "")
        _grid(axes[i][1], layout["controlled"][i, 0], f"prefix -> {int(layout['target'][i])}")
        _grid(axes[i][2], layout["free"][i, 0], "free" if i == 0 else "")
    return save_fig(fig, path)
