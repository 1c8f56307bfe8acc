"""ShapesSG: a synthetic scene-graph world at feature level (the PredCls setting of Sec. 4).

Each image holds 5-8 objects of 12 classes. A few disjoint ordered pairs carry one of 16 predicates drawn
from a Zipf-like prior ("on", "standing on", "near", "has" dominate); the predicate fixes the pair's
geometry, contact and the subject's pose by rule:

* support: the subject's box bottom touches the object's top (contact); person/dog subjects are
  *standing on* (tall, still), *walking on* (tall, striding; road only), *lying on* (wide) or *sitting on*
  (seated); *on* is for cup/phone/bag; *parked on* for car/bike on a road; *riding* a seated person on a
  horse/bike;
* possession (person -> cup/phone/bag, contact): *holding* (object at the side, in the hand, still),
  *carrying* (in the hand, striding), *has* (object at the torso, no grip);
* *near* (no contact, 0.25-0.4 apart) vs *next to* (level, 0.1-0.18 gap); *above* / *under* (vertical gap);
  *behind* / *in front of* (overlap, depth order).

Near-synonyms thus share class pairs and differ only in what the "detector" sees. Detector features are a
fixed random MLP of object attributes (class, pose, stride, size) plus noise; union features a fixed random
MLP of pair attributes (classes, poses, strides, offsets, IoU, contact, grip, depth order) plus noise; box
geometry is 9-d. Every unannotated ordered pair is background.

Language-aligned union channel (``text_align`` a > 0), a CLIP-like stand-in: open-vocabulary SGG models read
region features from an image encoder trained to agree with a text encoder (the paper's SDSGG and OvSGTR build
on CLIP and GroundingDINO), so what a region shows lies near the text of its description. Here every ordered
pair gets a 384-d channel in the frozen name table's space,

    t_ij = a·√D·e(p_{ij}) + ε,   ε ~ N(0, I_D),

where e(p_{ij}) is the L2-normalised MiniLM vector of the predicate annotated on the *unordered* pair {i, j}
(the union region is the same crop for (i, j) and (j, i); the order stays in the geometry) and 0 for a pair
without one. a is the channel's signal-to-noise ratio in norm (‖a·√D·e‖ = a·√D, E‖ε‖² = D); the noise comes
from its own generator, so a = 0 (channel off) gives the world without it bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from iclr26.apt.names import OBJECTS, PREDICATES, load_table

__all__ = ["ShapesSG", "Split", "aligned_channel", "generate", "generate_with_scenes", "predicate_id"]

N_OBJ, N_PRED = len(OBJECTS), len(PREDICATES)
O = {n: i for i, n in enumerate(OBJECTS)}
TALL, WIDE, SEATED = 0, 1, 2
# Frequency rank of each predicate (1 = most frequent); the prior is ∝ rank^-zipf.
LONGTAIL_ORDER = (
    "on",
    "near",
    "has",
    "standing on",
    "next to",
    "holding",
    "behind",
    "in front of",
    "above",
    "under",
    "sitting on",
    "riding",
    "parked on",
    "walking on",
    "carrying",
    "lying on",
)
ANY = tuple(OBJECTS)
PEOPLE, SUPPORTS, SMALL = ("person", "dog"), ("road", "table", "chair"), ("cup", "phone", "bag")
# predicate -> (subject classes, object classes)
COMPAT: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "on": (SMALL, ("table", "chair")),
    "standing on": (PEOPLE, SUPPORTS),
    "lying on": (PEOPLE, SUPPORTS),
    "sitting on": (PEOPLE, SUPPORTS),
    "walking on": (PEOPLE, ("road",)),
    "parked on": (("car", "bike"), ("road",)),
    "holding": (("person",), SMALL),
    "carrying": (("person",), SMALL),
    "has": (("person",), SMALL),
    "near": (ANY, ANY),
    "next to": (ANY, ANY),
    "above": (ANY, ANY),
    "under": (ANY, ANY),
    "behind": (ANY, ANY),
    "in front of": (ANY, ANY),
    "riding": (("person",), ("horse", "bike")),
}
BASE_SIZE = {
    "person": 0.12,
    "dog": 0.08,
    "horse": 0.16,
    "bike": 0.12,
    "car": 0.2,
    "road": 0.3,
    "table": 0.18,
    "chair": 0.12,
    "cup": 0.04,
    "phone": 0.04,
    "bag": 0.06,
    "tree": 0.22,
}
SUBJECT_POSE = {
    "standing on": (TALL, 0),
    "walking on": (TALL, 1),
    "lying on": (WIDE, 0),
    "sitting on": (SEATED, 0),
    "riding": (SEATED, 0),
    "holding": (TALL, 0),
    "carrying": (TALL, 1),
    "has": (TALL, 0),
}


def predicate_id(name: str) -> int:
    """1-based predicate id (0 is background)."""
    return PREDICATES.index(name) + 1


@dataclass
class Split:
    """One split as flat tensors: objects, ordered pairs (all of them), and per-image pair ranges.

    obj_cls [No], obj_vis [No, F]; pair_s / pair_o [Np] global object indices; pair_label [Np] (0 = background);
    pair_union [Np, F]; pair_geo [Np, 9]; pair_img [Np]; img_obj_start [I + 1] object offsets per image;
    pair_text [Np, D] the language-aligned union channel, or None when it is off.
    """

    obj_cls: torch.Tensor
    obj_vis: torch.Tensor
    pair_s: torch.Tensor
    pair_o: torch.Tensor
    pair_label: torch.Tensor
    pair_union: torch.Tensor
    pair_geo: torch.Tensor
    pair_img: torch.Tensor
    img_obj_start: torch.Tensor
    obj_pose: torch.Tensor
    obj_stride: torch.Tensor
    pair_text: torch.Tensor | None = None

    @property
    def n_images(self) -> int:
        return len(self.img_obj_start) - 1

    @property
    def union_dim(self) -> int:
        """Width of the union input the models read: ``pair_union`` plus the aligned channel when present."""
        return self.pair_union.shape[1] + (0 if self.pair_text is None else self.pair_text.shape[1])


@dataclass
class ShapesSG:
    train: Split
    val: Split
    test: Split


class _World:
    """The fixed random 'detector': two tanh MLPs with weights drawn from ``world_seed``."""

    def __init__(self, world_seed: int, feat_dim: int, obj_in: int, pair_in: int) -> None:
        g = np.random.default_rng(world_seed)
        self.obj = [g.normal(0, 1 / np.sqrt(obj_in), (obj_in, 128)), g.normal(0, 1 / np.sqrt(128), (128, feat_dim))]
        self.pair = [g.normal(0, 1 / np.sqrt(pair_in), (pair_in, 128)), g.normal(0, 1 / np.sqrt(128), (128, feat_dim))]

    @staticmethod
    def _mlp(w, x):
        return np.tanh(np.tanh(x @ w[0]) @ w[1]) * 2.0


def _box(rng, cls: str, pose: int, cue: float = 1.0) -> np.ndarray:
    """Box (cx, cy, w, h); with cue c < 1 the pose's aspect a is shrunk towards a near-square one:
    log a' = c·log a + (1 - c)·log a_0, a_0 ~ U(0.9, 1.1)."""
    s = BASE_SIZE[cls] * rng.uniform(0.8, 1.2)
    aspect = {TALL: rng.uniform(1.6, 2.2), WIDE: rng.uniform(0.4, 0.6), SEATED: rng.uniform(0.9, 1.1)}[pose]
    if cue < 1.0:
        aspect = aspect**cue * rng.uniform(0.9, 1.1) ** (1.0 - cue)
    w, h = s / np.sqrt(aspect), s * np.sqrt(aspect)
    return np.array([rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.8), w, h])


def _place(rng, pred: str, sb: np.ndarray, ob: np.ndarray) -> tuple[np.ndarray, float, float, float]:
    """Object box relative to the subject box by rule; returns (object box, contact, grip, depth_s - depth_o)."""
    ob = ob.copy()
    contact, grip, ddepth = 0.0, 0.0, rng.choice([-1.0, 1.0]) * rng.uniform(0.05, 0.5)
    if pred in ("on", "standing on", "lying on", "sitting on", "walking on", "parked on", "riding"):
        ob[0] = sb[0] + rng.uniform(-0.03, 0.03)
        ob[1] = sb[1] + sb[3] / 2 + ob[3] / 2
        contact, ddepth = 1.0, -rng.uniform(0.05, 0.3)
    elif pred in ("holding", "carrying"):
        ob[0] = sb[0] + rng.choice([-1, 1]) * sb[2] / 2
        ob[1] = sb[1] + rng.uniform(-0.02, 0.02)
        contact, grip = 1.0, 1.0
    elif pred == "has":
        ob[0], ob[1] = sb[0] + rng.uniform(-0.01, 0.01), sb[1] + rng.uniform(-0.03, 0.03)
        contact, ddepth = 1.0, -rng.uniform(0.05, 0.3)
    elif pred == "near":
        ang, dist = rng.uniform(0, 2 * np.pi), rng.uniform(0.25, 0.4)
        ob[0], ob[1] = sb[0] + dist * np.cos(ang), sb[1] + dist * np.sin(ang)
    elif pred == "next to":
        ob[0] = sb[0] + rng.choice([-1, 1]) * ((sb[2] + ob[2]) / 2 + rng.uniform(0.1, 0.18) - 0.08)
        ob[1] = sb[1] + rng.uniform(-0.02, 0.02)
    elif pred in ("above", "under"):
        sign = 1 if pred == "above" else -1
        ob[0] = sb[0] + rng.uniform(-0.05, 0.05)
        ob[1] = sb[1] + sign * ((sb[3] + ob[3]) / 2 + rng.uniform(0.08, 0.2))
    elif pred in ("behind", "in front of"):
        ob[0], ob[1] = sb[0] + rng.uniform(-0.05, 0.05), sb[1] + rng.uniform(-0.05, 0.05)
        ddepth = (1.0 if pred == "behind" else -1.0) * rng.uniform(0.2, 0.6)
    else:
        raise ValueError(f"no placement rule for predicate {pred!r}")
    return ob, contact, grip, ddepth


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    ax0, ay0, ax1, ay1 = a[0] - a[2] / 2, a[1] - a[3] / 2, a[0] + a[2] / 2, a[1] + a[3] / 2
    bx0, by0, bx1, by1 = b[0] - b[2] / 2, b[1] - b[3] / 2, b[0] + b[2] / 2, b[1] + b[3] / 2
    iw, ih = max(0.0, min(ax1, bx1) - max(ax0, bx0)), max(0.0, min(ay1, by1) - max(ay0, by0))
    inter = iw * ih
    return inter / (a[2] * a[3] + b[2] * b[3] - inter + 1e-9)


def _scene(rng, prior: np.ndarray, min_obj: int, max_obj: int, min_rel: int, max_rel: int, cue: float = 1.0) -> dict:
    """One image: object classes/poses/strides/boxes/depths and its annotated (s, o, predicate id) triplets."""
    n = int(rng.integers(min_obj, max_obj + 1))
    n_rel = min(n // 2, int(rng.integers(min_rel, max_rel + 1)))
    cls = [str(rng.choice(OBJECTS)) for _ in range(n)]
    pose = [int(rng.choice([TALL, WIDE, SEATED] if c in PEOPLE else [TALL, WIDE])) for c in cls]
    stride = [0] * n
    boxes = [_box(rng, c, p, cue) for c, p in zip(cls, pose, strict=True)]
    depth = list(rng.uniform(0, 1, n))
    cues: dict[tuple[int, int], tuple[float, float]] = {}
    rels = []
    for r in range(n_rel):
        s, o = 2 * r, 2 * r + 1
        pred = PREDICATES[int(rng.choice(N_PRED, p=prior))]
        subj, obj = COMPAT[pred]
        cls[s], cls[o] = str(rng.choice(subj)), str(rng.choice(obj))
        if cls[s] == cls[o] and len(obj) > 1:
            cls[o] = str(rng.choice([c for c in obj if c != cls[s]]))
        pose[s], stride[s] = SUBJECT_POSE.get(pred, (pose[s] if cls[s] in PEOPLE else min(pose[s], WIDE), 0))
        pose[o] = pose[o] if cls[o] in PEOPLE else min(pose[o], WIDE)
        boxes[s], boxes[o] = _box(rng, cls[s], pose[s], cue), _box(rng, cls[o], pose[o], cue)
        boxes[o], contact, grip, ddepth = _place(rng, pred, boxes[s], boxes[o])
        depth[o] = depth[s] - ddepth
        cues[(s, o)] = (contact, grip)
        cues[(o, s)] = (contact, 0.0)
        rels.append((s, o, predicate_id(pred)))
    order = rng.permutation(n)  # objects in random order (relations are not at fixed slots)
    inv = np.argsort(order)
    return {
        "cls": [cls[i] for i in order],
        "pose": [pose[i] for i in order],
        "stride": [stride[i] for i in order],
        "boxes": [boxes[i] for i in order],
        "depth": [depth[i] for i in order],
        "cues": {(int(inv[a]), int(inv[b])): v for (a, b), v in cues.items()},
        "rels": [(int(inv[s]), int(inv[o]), p) for s, o, p in rels],
    }


def _obj_input(sc: dict, cue: float = 1.0) -> np.ndarray:
    """Detector input per object: class one-hot, pose one-hot and stride (both scaled by ``cue``), box size."""
    rows = []
    for c, p, st, b in zip(sc["cls"], sc["pose"], sc["stride"], sc["boxes"], strict=True):
        rows.append(np.concatenate([np.eye(N_OBJ)[O[c]], cue * np.eye(3)[p], [cue * st, 5 * b[2], 5 * b[3]]]))
    return np.asarray(rows)


def _pair_input(sc: dict, i: int, j: int, cue: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(union-attribute vector, 9-d box geometry) for the ordered pair (i, j); poses, strides and grip are
    scaled by ``cue`` (the synonym-separating cues)."""
    bs, bo = sc["boxes"][i], sc["boxes"][j]
    contact, grip = sc["cues"].get((i, j), (0.0, 0.0))
    dx, dy = (bo[0] - bs[0]) / bs[2], (bo[1] - bs[1]) / bs[3]
    lw, lh, iou = np.log(bs[2] / bo[2]), np.log(bs[3] / bo[3]), _iou(bs, bo)
    geo = np.array([dx, dy, lw, lh, iou, bs[0], bs[1], bo[0], bo[1]])
    attrs = np.concatenate(
        [
            np.eye(N_OBJ)[O[sc["cls"][i]]],
            np.eye(N_OBJ)[O[sc["cls"][j]]],
            cue * np.eye(3)[sc["pose"][i]],
            cue * np.eye(3)[sc["pose"][j]],
            [
                cue * sc["stride"][i],
                cue * sc["stride"][j],
                np.tanh(dx),
                np.tanh(dy),
                lw,
                lh,
                iou,
                contact,
                cue * grip,
                np.sign(sc["depth"][i] - sc["depth"][j]),
            ],
        ]
    )
    return attrs, geo


def _split(rng, world: _World, n_images: int, prior: np.ndarray, cfg, scenes: list | None = None) -> Split:
    cols: dict[str, list] = {
        k: [] for k in ("cls", "pose", "stride", "obj_in", "s", "o", "label", "pair_in", "geo", "img")
    }
    starts = [0]
    for img in range(n_images):
        sc = _scene(
            rng, prior, cfg.min_objects, cfg.max_objects, cfg.min_relations, cfg.max_relations, cfg.cue_strength
        )
        if scenes is not None:
            scenes.append(sc)
        base, n = starts[-1], len(sc["cls"])
        cols["cls"] += [O[c] for c in sc["cls"]]
        cols["pose"] += sc["pose"]
        cols["stride"] += sc["stride"]
        cols["obj_in"].append(_obj_input(sc, cfg.cue_strength))
        labels = {(s, o): p for s, o, p in sc["rels"]}
        for i in range(n):
            for j in range(n):
                if i != j:
                    attrs, geo = _pair_input(sc, i, j, cfg.cue_strength)
                    cols["s"].append(base + i)
                    cols["o"].append(base + j)
                    cols["label"].append(labels.get((i, j), 0))
                    cols["pair_in"].append(attrs)
                    cols["geo"].append(geo)
                    cols["img"].append(img)
        starts.append(base + n)
    obj_in, pair_in = np.concatenate(cols["obj_in"]), np.asarray(cols["pair_in"])
    obj_vis = world._mlp(world.obj, obj_in) + rng.normal(0, cfg.feat_noise, (len(obj_in), cfg.feat_dim))
    union = world._mlp(world.pair, pair_in) + rng.normal(0, cfg.feat_noise, (len(pair_in), cfg.feat_dim))

    def t(x, dtype=torch.float32):
        return torch.as_tensor(np.asarray(x), dtype=dtype)

    return Split(
        obj_cls=t(cols["cls"], torch.long),
        obj_vis=t(obj_vis),
        pair_s=t(cols["s"], torch.long),
        pair_o=t(cols["o"], torch.long),
        pair_label=t(cols["label"], torch.long),
        pair_union=t(union),
        pair_geo=t(cols["geo"]),
        pair_img=t(cols["img"], torch.long),
        img_obj_start=t(starts, torch.long),
        obj_pose=t(cols["pose"], torch.long),
        obj_stride=t(cols["stride"], torch.long),
    )


def aligned_channel(split: Split, pred_table: np.ndarray, strength: float, rng) -> torch.Tensor:
    """The language-aligned union channel t_ij = a·√D·e(p_{ij}) + ε of every ordered pair (module docstring).

    p_{ij} is the predicate annotated on (i, j) or on (j, i) (pairs are disjoint, so at most one); pairs with
    none get e = 0. ``pred_table`` rows are predicates 1..R (L2-normalised); returns [Np, D] float32.
    """
    lab = split.pair_label.numpy()
    s, o = split.pair_s.numpy(), split.pair_o.numpy()
    pair_pred = lab.copy()
    index = {(int(a), int(b)): n for n, (a, b) in enumerate(zip(s, o, strict=True))}
    for n in np.nonzero(lab > 0)[0]:
        pair_pred[index[(int(o[n]), int(s[n]))]] = lab[n]
    d = pred_table.shape[1]
    signal = np.zeros((len(lab), d))
    fg = pair_pred > 0
    signal[fg] = pred_table[pair_pred[fg] - 1]
    noise = rng.normal(0.0, 1.0, (len(lab), d))
    return torch.as_tensor(strength * np.sqrt(d) * signal + noise, dtype=torch.float32)


def longtail_prior(zipf: float) -> np.ndarray:
    """Predicate prior in PREDICATES order: p(k) ∝ rank(k)^-zipf with ranks from LONGTAIL_ORDER."""
    rank = np.array([LONGTAIL_ORDER.index(p) + 1 for p in PREDICATES], dtype=float)
    prior = rank ** -float(zipf)
    return prior / prior.sum()


def generate_with_scenes(cfg, seed: int) -> tuple[ShapesSG, tuple[list, list, list]]:
    """:func:`generate` plus the scene dicts (classes, poses, strides, boxes, depths, cues, relations) of the
    train / val / test images, in split order; the rendered world draws exactly these scenes."""
    if cfg.min_objects < 2 or cfg.max_objects < cfg.min_objects or cfg.min_relations < 1:
        raise ValueError("need 2 <= min_objects <= max_objects and min_relations >= 1")
    if not 0.0 < cfg.cue_strength <= 1.0:
        raise ValueError(f"cue_strength must be in (0, 1], got {cfg.cue_strength}")
    if not (np.isfinite(cfg.text_align) and cfg.text_align >= 0.0):
        raise ValueError(f"text_align must be a finite number >= 0, got {cfg.text_align}")
    obj_in = N_OBJ + 3 + 3
    pair_in = 2 * N_OBJ + 6 + 10
    world = _World(cfg.world_seed, cfg.feat_dim, obj_in, pair_in)
    prior = longtail_prior(cfg.zipf)
    rng = np.random.default_rng([seed, 7001])
    scenes: tuple[list, list, list] = ([], [], [])
    sizes = (cfg.n_train, cfg.n_val, cfg.n_test)
    data = ShapesSG(*(_split(rng, world, n, prior, cfg, sc) for n, sc in zip(sizes, scenes, strict=True)))
    if cfg.text_align > 0.0:
        pred = load_table()[1]
        text_rng = np.random.default_rng([seed, 7003])  # its own stream: the rest of the world is unchanged
        for sp in (data.train, data.val, data.test):
            sp.pair_text = aligned_channel(sp, pred, cfg.text_align, text_rng)
    return data, scenes


def generate(cfg, seed: int) -> ShapesSG:
    """Train / val / test splits for ``cfg`` (a :class:`iclr26.apt.config.DataConfig`); same seed, same data."""
    return generate_with_scenes(cfg, seed)[0]
