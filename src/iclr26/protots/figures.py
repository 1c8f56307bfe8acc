"""Figures of the ProtoTS run: root curves with their regimes, a forecast with its top prototypes, and
festival windows before and after the expert split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from iclr26.core.report import _pyplot, save_fig
from iclr26.protots.data import DAY_TYPES, SEASONS


def _regime_name(r: int) -> str:
    return f"{DAY_TYPES[r // 3]}-{SEASONS[r % 3]}" if r >= 0 else "?"


def root_figure(path: Path, model, sp) -> Path:
    """Each root's curve (de-standardised units are not needed: standardised load), titled with the most
    frequent true regime among the test windows whose top root it is."""
    plt = _pyplot()
    with torch.no_grad():
        ex = model.explain(*sp.test.inputs())
    top = ex.root_weights.argmax(1).numpy()
    reg = sp.test.regime.numpy()
    n = len(model.roots)
    fig, axes = plt.subplots(1, n, figsize=(2.4 * n, 2.6), sharey=True, squeeze=False)
    for k, ax in enumerate(axes[0]):
        ax.plot(model.roots[k].p.detach().numpy(), color="k", lw=1.5)
        for c in model.roots[k].kids:
            ax.plot(c.p.detach().numpy(), lw=0.8, alpha=0.8)
        mine = reg[top == k]
        label = _regime_name(int(np.bincount(mine[mine >= 0]).argmax())) if (mine >= 0).any() else "unused"
        ax.set_title(f"root {k}: {label}\n({len(mine)} test days)", fontsize=7)
        ax.set_xlabel("hour ahead", fontsize=7)
    return save_fig(fig, path)


def forecast_figure(path: Path, model, sp, index: int = 0) -> Path:
    """One test window: truth, forecast, and the two heaviest roots' curves with their weights."""
    plt = _pyplot()
    w = sp.test.subset(slice(index, index + 1))
    with torch.no_grad():
        ex = model.explain(*w.inputs(), k=2)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(w.y[0].numpy(), "k", lw=2, label="truth")
    ax.plot(ex.forecast[0].numpy(), "r--", lw=2, label="ProtoTS forecast")
    for k, wt in zip(ex.top_roots[0].tolist(), ex.top_weights[0].tolist()):
        ax.plot(model.roots[k].p.detach().numpy(), alpha=0.7, label=f"root {k} (f={wt:.2f})")
    ax.set_xlabel("hour ahead")
    ax.set_ylabel("load (standardised)")
    ax.legend(fontsize=7)
    return save_fig(fig, path)


def festival_figure(path: Path, sp, before: torch.Tensor, after: torch.Tensor) -> Path:
    """Festival test windows concatenated: truth, forecast before and after the expert split."""
    plt = _pyplot()
    idx = sp.test.festival.nonzero().flatten()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(sp.test.y[idx].flatten().numpy(), "k", lw=1.5, label="truth")
    ax.plot(before[idx].flatten().numpy(), "b--", lw=1, label="flat model")
    ax.plot(after[idx].flatten().numpy(), "r-", lw=1, label="after festival split")
    ax.set_xlabel("hour (festival test windows, concatenated)")
    ax.set_ylabel("load (standardised)")
    ax.legend(fontsize=7)
    return save_fig(fig, path)
