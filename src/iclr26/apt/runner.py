"""The smoke / small run: per-seed training of every model, claims' measured values, tables and figures."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from iclr26.apt.apt import added_parameters
from iclr26.apt.config import RunConfig
from iclr26.apt.models import RelationModel
from iclr26.apt.names import PREDICATES, load_table, synonym_cosines
from iclr26.apt.sgg_metrics import linear_cka, mi_proxy, pca_dims, silhouette
from iclr26.apt.shapes_sg import generate
from iclr26.apt.train_eval import evaluate, train_model, training_pairs
from iclr26.core.experiment import METRICS_FILE, RunContext, RunOutput, mean_std, to_jsonable
from iclr26.core.parallel import seed_map

__all__ = ["run_seed", "run_small"]


class FileLog:
    """A picklable ``log(step, **scalars)`` appending RunContext.log's jsonl rows (usable in worker processes)."""

    def __init__(self, path: Path, series: str) -> None:
        self.path, self.series = Path(path), series

    def __call__(self, step: int, **scalars) -> None:
        row = {"series": self.series, "step": int(step), **{k: to_jsonable(v) for k, v in scalars.items()}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")


def _tables() -> tuple[torch.Tensor, torch.Tensor]:
    obj, pred = load_table()
    return torch.from_numpy(obj), torch.from_numpy(pred)


def _fit_eval(cfg: RunConfig, data, variant: str, seed: int, novel_ids=(), log: Callable | None = None):
    obj, pred = _tables()
    torch.manual_seed(seed * 101 + 7)
    model = RelationModel(obj, pred, variant, cfg.method, cfg.head, cfg.data.feat_dim, data.train.union_dim)
    pairs, labels = training_pairs(data.train, cfg.optim.bg_ratio, seed, novel_ids)
    timing = train_model(model, data.train, pairs, labels, cfg.optim, seed, log=log)
    res = evaluate(model, data.test, cfg.ks, cfg.head_k, cfg.tail_k, novel_ids)
    res.update(timing, added_params=model.added_parameters())
    return model, res


@torch.no_grad()
def diagnostics(model: RelationModel, data, n_clusters: int, seed: int) -> dict:
    """Adapted (D-prompt) vs frozen subject embeddings of the annotated test pairs, grouped by predicate."""
    test = data.test
    pos = torch.nonzero(test.pair_label > 0).squeeze(1)
    s, y = test.pair_s[pos], test.pair_label[pos].numpy()
    cls = test.obj_cls[s]
    adapted = model.obj_apt(cls, test.obj_vis[s], "detection").numpy()
    frozen = model.obj_static[cls].numpy()
    person = (cls == 0).numpy()
    # the same cluster count for both: frozen vectors have one point per subject class, so k <= #classes
    k = min(n_clusters, len(np.unique(cls.numpy())))
    out = {
        "mi_adapted": mi_proxy(adapted, y, k, seed),
        "mi_frozen": mi_proxy(frozen, y, k, seed),
        "mi_clusters": k,
        "pca90_adapted": pca_dims(adapted, 0.9),
        "pca90_frozen": pca_dims(frozen, 0.9),
        "pca95_adapted": pca_dims(adapted, 0.95),
        "pca95_frozen": pca_dims(frozen, 0.95),
        "cka_adapted_frozen": linear_cka(adapted, frozen),
    }
    if len(np.unique(y[person])) >= 2:
        out["silhouette_person_adapted"] = silhouette(adapted[person], y[person])
        out["silhouette_person_frozen"] = silhouette(frozen[person], y[person])
    out["_person"] = {"adapted": adapted[person], "frozen": frozen[person], "label": y[person]}
    return out


def run_seed(seed: int, cfg: RunConfig, log_factory: Callable[[str], Callable] | None = None) -> dict:
    """Every model of one seed: closed-set variants, the open-vocabulary pair, diagnostics."""
    torch.manual_seed(seed)
    out: dict = {"models": {}, "ov": {}}
    if cfg.render:
        from iclr26.apt.render import rendered_dataset

        data, out["render"] = rendered_dataset(cfg.data, cfg.rendering, seed)
        r = out["render"]
        print(
            f"[apt] seed {seed}: rendered {r['n_images']} images, CNN detector ({r['cnn_params']} params) crop "
            f"accuracy on test objects: class {r['cnn_class_acc']:.3f}, pose {r['cnn_pose_acc']:.3f}, "
            f"stride {r['cnn_stride_acc']:.3f} ({r['total_s']:.0f} s)",
            flush=True,
        )
    else:
        data = generate(cfg.data, seed)
    novel_ids = tuple(PREDICATES.index(n) + 1 for n in cfg.novel)
    for variant in cfg.models:
        log = log_factory(f"seed{seed}/{variant}") if log_factory else None
        model, res = _fit_eval(cfg, data, variant, seed, log=log)
        out["models"][variant] = res
        if variant == "apt":
            out["diag"] = diagnostics(model, data, cfg.mi_clusters, seed)
    for variant in ("b0", "cgp"):
        log = log_factory(f"seed{seed}/ov_{variant}") if log_factory else None
        out["ov"][variant] = _fit_eval(cfg, data, variant, seed, novel_ids, log=log)[1]
    return out


def _measured(cfg: RunConfig, per_seed: list[dict]) -> dict:
    def col(path: Callable[[dict], float]) -> list[float]:
        return [float(path(r)) for r in per_seed]

    b0_r = col(lambda r: r["models"]["b0"]["R@20"])
    gap = col(lambda r: r["models"]["b0"]["head_R@20"] - r["models"]["b0"]["tail_R@20"])
    gate = bool(np.mean(b0_r) >= 60.0 and np.mean(gap) >= 15.0)
    apt_mr, b0_mr = col(lambda r: r["models"]["apt"]["mR@20"]), col(lambda r: r["models"]["b0"]["mR@20"])
    common = {"competence_gate": gate, "n_seeds": len(per_seed)}
    return {
        "C1": {
            "mi_adapted": float(np.mean(col(lambda r: r["diag"]["mi_adapted"]))),
            "mi_frozen": float(np.mean(col(lambda r: r["diag"]["mi_frozen"]))),
        },
        "C2": {
            **common,
            "apt_mR@20": float(np.mean(apt_mr)),
            "b0_mR@20": float(np.mean(b0_mr)),
            "apt_R@20": float(np.mean(col(lambda r: r["models"]["apt"]["R@20"]))),
            "b0_R@20": float(np.mean(b0_r)),
            "seeds_apt_higher": int(sum(a > b for a, b in zip(apt_mr, b0_mr, strict=True))),
        },
        "C3": {
            **common,
            "cgp_novel_mR@20": float(np.mean(col(lambda r: r["ov"]["cgp"]["novel_mR@20"]))),
            "b0_novel_mR@20": float(np.mean(col(lambda r: r["ov"]["b0"]["novel_mR@20"]))),
        },
        "_gate": {"b0_R@20": float(np.mean(b0_r)), "b0_head_minus_tail_R@20": float(np.mean(gap)), "passed": gate},
    }


def efficiency(cfg: RunConfig, per_seed: list[dict]) -> dict:
    """Added parameters at paper / official-code sizes (formula) and B0+APT vs B0 time per step (ratio)."""
    ratio = [
        r["models"]["apt"]["sec_per_step"] / r["models"]["b0"]["sec_per_step"]
        for r in per_seed
        if "apt" in r["models"] and "b0" in r["models"]
    ]
    return {
        "added_params_paper_sizes": added_parameters((150, 50), 300, 2048, 512, 6, per_class=True),
        "added_params_code_sizes": added_parameters(1, 300, 2048, 512, 5, per_class=False),
        "added_params_shared_v512_h256": added_parameters(1, 300, 512, 256, 6, per_class=False),
        "added_params_shapes_sg": per_seed[0]["models"].get("apt", {}).get("added_params"),
        "apt_over_b0_time_per_step": mean_std(ratio) if ratio else None,
    }


def run_small(ctx: RunContext) -> RunOutput:
    from iclr26.apt.report import figures, tables

    cfg: RunConfig = ctx.cfg
    _, pred = load_table()
    cos = {g: np.round(m, 3).tolist() for g, m in synonym_cosines(pred).items()}
    for g, m in cos.items():
        print(f"[apt] MiniLM cosines within '{g}': {m}")
    fn = functools.partial(run_seed, cfg=cfg, log_factory=functools.partial(FileLog, ctx.out_dir / METRICS_FILE))
    per_seed = seed_map(fn, ctx.seeds, workers=cfg.workers, threads_per_worker=1, progress=ctx.progress)
    measured = _measured(cfg, per_seed)
    gate = measured.pop("_gate")
    print(f"[apt] competence gate: {gate}")
    if cfg.render:
        print(f"[apt] rendered world: glyph images ({cfg.rendering.image_size} px) and a CNN detector per seed")
    metrics = {
        "competence_gate": gate,
        "synonym_cosines": cos,
        "efficiency": efficiency(cfg, per_seed),
        "per_seed": {str(s): _strip(r) for s, r in zip(ctx.seeds, per_seed, strict=True)},
    }
    if cfg.render:
        keys = ("cnn_class_acc", "cnn_pose_acc", "cnn_stride_acc", "total_s")
        metrics["render"] = {k: mean_std([r["render"][k] for r in per_seed]) for k in keys}
    figures(ctx, cfg, per_seed)
    return RunOutput(metrics=metrics, measured=measured, tables=tables(cfg, per_seed, metrics))


def _strip(r: dict) -> dict:
    out = dict(r)
    if "diag" in out:
        out["diag"] = {k: v for k, v in out["diag"].items() if not k.startswith("_")}
    return out
