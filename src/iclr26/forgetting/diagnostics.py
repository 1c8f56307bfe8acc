"""End-of-training diagnostics of one continual run: buffer vs population statistics, Neural
Collapse metrics, the LDA counterfactual table and the buffer-only probe.

"Old classes" are those of tasks 0..T-2. The *buffer view* is what the head saw during the last
task: the replay buffer for the old classes plus the full training set of the last task.
Accuracies are measured on the pooled test sets of the old tasks.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .data import ContinualData
from .lda import lda_counterfactuals
from .models import ContinualNet
from .neural_collapse import buffer_population_stats, centre_means, nc_metrics, projection_norms, subspace_projector
from .probe import LinearProbe
from .replay import ContinualResult


def final_diagnostics(
    net: ContinualNet,
    data: ContinualData,
    res: ContinualResult,
    setting: str,
    seed: int = 0,
    probe_factory: Callable[[], LinearProbe] | None = None,
    ridge: float = 1e-2,
    rtol: float = 1e-6,
) -> dict:
    """Buffer/population stats of the old classes, NC metrics, LDA counterfactuals, probes (see module doc)."""
    if res.final is None:
        raise ValueError("run_continual was called with evaluate=False; no features to diagnose")
    probe_factory = probe_factory or (lambda: LinearProbe())
    T = data.n_tasks
    f = res.final
    y_tr, y_te = data.y_train.numpy(), data.y_test.numpy()
    old_classes = [c for t in range(T - 1) for c in data.task_classes[t]]
    all_classes = list(range(data.n_classes))
    groups = [list(cls) for cls in data.task_classes]
    head_w = net.head.weight.detach().double().cpu().numpy()
    old_test = data.task_indices(list(range(T - 1)), "test")
    n_test = np.array([len(data.task_indices(j, "test")) for j in range(T - 1)])
    out: dict = {
        "own_head_old": float((res.acc_shallow[T - 1, : T - 1] * n_test).sum() / n_test.sum()),
        "probe_old": float((res.acc_deep[T - 1, : T - 1] * n_test).sum() / n_test.sum()),
        "nc_train": nc_metrics(f.z_train, y_tr, all_classes, head_w, groups, setting, rtol),
        "nc_test": nc_metrics(f.z_test, y_te, all_classes, head_w, groups, setting, rtol),
    }
    buf_idx, buf_lab = res.buffer_last_task
    old_in_buf = np.isin(buf_lab, old_classes)
    if set(np.unique(buf_lab[old_in_buf]).tolist()) != set(old_classes):
        return out  # no replay (M = 0) or an online buffer that lost a class: no buffer statistics
    buf_idx = buf_idx[old_in_buf]
    cur = data.task_indices(T - 1)
    seen_idx = np.concatenate([buf_idx, cur])
    z_seen, y_seen = f.z_train[seen_idx], y_tr[seen_idx]
    stats = buffer_population_stats(
        f.z_train, y_tr, f.z_train[buf_idx], y_tr[buf_idx], old_classes, rtol, rng=np.random.default_rng([seed, 7])
    )
    out["buffer_stats"] = stats
    out["nc_buffer_view"] = nc_metrics(z_seen, y_seen, all_classes, head_w, groups, setting, rtol)
    # active subspace S = span of the centred buffer-view class means; per task: mean ||P phi||, ||(I-P) phi||
    mu_seen = np.stack([z_seen[y_seen == c].mean(0) for c in all_classes])
    proj = subspace_projector(centre_means(mu_seen, None if setting == "cil" else groups), rtol)
    out["subspace"] = {f"task{t}": projection_norms(f.z_train[data.task_indices(t)], proj) for t in range(T)}
    if setting == "cil":
        out["lda"] = lda_counterfactuals(
            f.z_train, y_tr, z_seen, y_seen, f.z_test[old_test], y_te[old_test], all_classes, ridge=ridge
        )
        out["lda_pinv"] = lda_counterfactuals(
            f.z_train,
            y_tr,
            z_seen,
            y_seen,
            f.z_test[old_test],
            y_te[old_test],
            all_classes,
            ridge=ridge,
            inverse="pinv",
        )
        out["probe_buffer_old"] = probe_factory().fit(z_seen, y_seen).score(f.z_test[old_test], y_te[old_test])
    return out
