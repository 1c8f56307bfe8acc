"""Paper scale: VG150 in the Scene-Graph-Benchmark (SGB) release format, GloVe tables, B0 vs B0 + APT.

Files (local paths, nothing downloads):

* ``VG-SGG-with-attri.h5``: ``split`` (0 train, 2 test), ``img_to_first_box`` / ``img_to_last_box``,
  ``img_to_first_rel`` / ``img_to_last_rel`` (inclusive, -1 for none), ``labels`` [B, 1] (1-based classes),
  ``boxes_1024`` [B, 4] (x_c, y_c, w, h at 1024 scale), ``relationships`` [R, 2] (global box indices),
  ``predicates`` [R, 1] (1-based), as read by SGB's ``maskrcnn_benchmark/data/datasets/visual_genome.py``
  (``load_graphs``);
* ``VG-SGG-dicts-with-attri.json``: ``idx_to_label`` and ``idx_to_predicate`` (string keys "1".."N");
* a GloVe text file (``word v_1 ... v_D`` per line); a multi-word name is the mean of its words' vectors.

``iclr26 run apt --scale paper --set vg_h5=... --set vg_dicts=... --set glove=...`` trains the ShapesSG relation
head on VG150 PredCls with *box-geometry* features (no ROI features: this path has no detector), B0 vs
B0 + APT, and reports R/mR/F@20/50/100. The full recipe (APT inside Motifs / PE-Net on ROI features) wraps
SGB's tables with :meth:`iclr26.apt.APTEmbedding.wrap`; see the README.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from iclr26.apt.shapes_sg import Split

__all__ = ["H5_KEYS", "VGError", "load_glove", "load_vg150", "vg_split"]

H5_KEYS = (
    "split",
    "img_to_first_box",
    "img_to_last_box",
    "img_to_first_rel",
    "img_to_last_rel",
    "labels",
    "boxes_1024",
    "relationships",
    "predicates",
)
DICT_KEYS = ("idx_to_label", "idx_to_predicate")


class VGError(ValueError):
    """A VG150 / GloVe file that is not in the released format (one line naming the problem)."""


def load_vg150(
    h5_path: str | Path, dicts_path: str | Path, split: str = "train", max_images: int | None = None
) -> tuple[list[dict], list[str], list[str]]:
    """Images of one split as dicts (labels [n] 0-based, boxes [n, 4] x1y1x2y2 in [0, 1], rels [m, 3] local (s, o, p
    1-based)), with object and predicate names in id order (SGB ``load_graphs``, filter_empty_rels=True)."""
    import h5py

    with open(dicts_path, encoding="utf-8") as fh:
        info = json.load(fh)
    for key in DICT_KEYS:
        if key not in info:
            raise VGError(f"{Path(dicts_path).name}: missing key '{key}'")
    objects = [info["idx_to_label"][str(i)] for i in range(1, len(info["idx_to_label"]) + 1)]
    preds = [info["idx_to_predicate"][str(i)] for i in range(1, len(info["idx_to_predicate"]) + 1)]
    if split not in ("train", "val", "test"):
        raise VGError(f"split must be train, val or test, got {split!r}")
    with h5py.File(h5_path, "r") as f:
        for key in H5_KEYS:
            if key not in f:
                raise VGError(f"{Path(h5_path).name}: missing key '{key}'")
        d = {k: f[k][:] for k in H5_KEYS}
    mask = (d["split"] == (2 if split == "test" else 0)) & (d["img_to_first_box"] >= 0) & (d["img_to_first_rel"] >= 0)
    images = []
    for i in np.nonzero(mask)[0][:max_images]:
        b0, b1 = d["img_to_first_box"][i], d["img_to_last_box"][i] + 1
        r0, r1 = d["img_to_first_rel"][i], d["img_to_last_rel"][i] + 1
        xywh = d["boxes_1024"][b0:b1].astype(np.float64)
        boxes = np.concatenate([xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2], 1) / 1024.0
        rel = d["relationships"][r0:r1] - b0
        if (rel < 0).any() or (rel >= b1 - b0).any():
            raise VGError(f"{Path(h5_path).name}: image {i} has a relationship outside its boxes")
        pred = d["predicates"][r0:r1, 0]
        images.append(
            {
                "labels": d["labels"][b0:b1, 0].astype(np.int64) - 1,
                "boxes": boxes,
                "rels": np.concatenate([rel, pred[:, None]], 1).astype(np.int64),
            }
        )
    return images, objects, preds


def load_glove(path: str | Path, names: list[str], dim: int | None = None) -> np.ndarray:
    """[len(names), D] vectors from a GloVe text file; multi-word names average their words; unknown -> 0."""
    words = {w for n in names for w in n.lower().split()}
    found: dict[str, np.ndarray] = {}
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            word, _, rest = line.rstrip("\n").partition(" ")
            if word in words:
                vec = np.array(rest.split(), dtype=np.float32)
                if dim is not None and len(vec) != dim:
                    raise VGError(f"{Path(path).name}:{line_no}: vector of width {len(vec)}, expected {dim}")
                dim = len(vec)
                found[word] = vec
    if dim is None:
        raise VGError(f"{Path(path).name}: none of the {len(words)} words found")
    out = np.zeros((len(names), dim), dtype=np.float32)
    for i, n in enumerate(names):
        vecs = [found[w] for w in n.lower().split() if w in found]
        if vecs:
            out[i] = np.mean(vecs, 0)
    return out


def _geo(bs: np.ndarray, bo: np.ndarray) -> np.ndarray:
    ws, hs = bs[2] - bs[0] + 1e-6, bs[3] - bs[1] + 1e-6
    wo, ho = bo[2] - bo[0] + 1e-6, bo[3] - bo[1] + 1e-6
    iw = max(0.0, min(bs[2], bo[2]) - max(bs[0], bo[0]))
    ih = max(0.0, min(bs[3], bo[3]) - max(bs[1], bo[1]))
    iou = iw * ih / (ws * hs + wo * ho - iw * ih)
    cs, co = (bs[:2] + bs[2:]) / 2, (bo[:2] + bo[2:]) / 2
    return np.array([(co[0] - cs[0]) / ws, (co[1] - cs[1]) / hs, np.log(ws / wo), np.log(hs / ho), iou, *cs, *co])


def vg_split(images: list[dict], feat_dim: int) -> Split:
    """A :class:`Split` with box-geometry features: object [x1, y1, x2, y2, w, h, area] and pair geometry, zero-padded
    to ``feat_dim`` (a stand-in for ROI / union features)."""
    cls, vis, s_idx, o_idx, lab, union, geo, img_ids, starts = [], [], [], [], [], [], [], [], [0]
    for k, im in enumerate(images):
        n, base, boxes = len(im["labels"]), starts[-1], im["boxes"]
        wh = boxes[:, 2:] - boxes[:, :2]
        feats = np.concatenate([boxes, wh, wh[:, :1] * wh[:, 1:]], 1)
        vis.append(np.pad(feats, ((0, 0), (0, feat_dim - feats.shape[1]))))
        cls.extend(im["labels"].tolist())
        labels = {(int(s), int(o)): int(p) for s, o, p in im["rels"]}
        for i in range(n):
            for j in range(n):
                if i != j:
                    g = _geo(boxes[i], boxes[j])
                    s_idx.append(base + i)
                    o_idx.append(base + j)
                    lab.append(labels.get((i, j), 0))
                    geo.append(g)
                    union.append(np.pad(g, (0, feat_dim - len(g))))
                    img_ids.append(k)
        starts.append(base + n)
    f32, i64 = torch.float32, torch.long
    return Split(
        obj_cls=torch.tensor(cls, dtype=i64),
        obj_vis=torch.tensor(np.concatenate(vis), dtype=f32),
        pair_s=torch.tensor(s_idx, dtype=i64),
        pair_o=torch.tensor(o_idx, dtype=i64),
        pair_label=torch.tensor(lab, dtype=i64),
        pair_union=torch.tensor(np.asarray(union), dtype=f32),
        pair_geo=torch.tensor(np.asarray(geo), dtype=f32),
        pair_img=torch.tensor(img_ids, dtype=i64),
        img_obj_start=torch.tensor(starts, dtype=i64),
        obj_pose=torch.zeros(len(cls), dtype=i64),
        obj_stride=torch.zeros(len(cls), dtype=i64),
    )


def run_paper(ctx):
    """B0 vs B0 + APT on VG150 PredCls (box-geometry features) from the local files in the config."""
    from iclr26.apt.models import RelationModel
    from iclr26.apt.sgg_metrics import sgg_report
    from iclr26.apt.train_eval import image_graphs, score_pairs, train_model, training_pairs
    from iclr26.core.experiment import ExperimentError, RunOutput

    cfg = ctx.cfg
    h5, dicts, glove = ctx.require_path("vg_h5"), ctx.require_path("vg_dicts"), ctx.require_path("glove")
    try:
        train_imgs, objects, preds = load_vg150(h5, dicts, "train")
        test_imgs, _, _ = load_vg150(h5, dicts, "test")
        obj_t, pred_t = load_glove(glove, objects), load_glove(glove, preds)
    except (VGError, OSError) as exc:
        raise ExperimentError(str(exc)) from exc
    feat_dim = max(cfg.data.feat_dim, 9)
    train, test = vg_split(train_imgs, feat_dim), vg_split(test_imgs, feat_dim)
    out: dict = {}
    for seed in ctx.seeds:
        for variant in cfg.models:
            torch.manual_seed(seed)
            model = RelationModel(
                torch.from_numpy(obj_t), torch.from_numpy(pred_t), variant, cfg.method, cfg.head, feat_dim
            ).to(ctx.device)
            pairs, labels = training_pairs(train, cfg.optim.bg_ratio, seed)
            train_model(model, train, pairs, labels, cfg.optim, seed, log=ctx.logger(f"seed{seed}/{variant}"))
            out[f"seed{seed}/{variant}"] = sgg_report(image_graphs(test, score_pairs(model, test)), (20, 50, 100))
    return RunOutput(metrics={"vg150_predcls_geometry": out}, measured={})
