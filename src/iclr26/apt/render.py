"""ShapesSG rendered (``--set render=true``): glyph images of the feature-level world's scenes and a tiny CNN
"detector" whose frozen features replace the random-MLP ones (spec Sec. 6, "Data" and "Visual features").

The scenes are those of :func:`iclr26.apt.shapes_sg.generate_with_scenes` for the same seed: classes, poses,
strides, boxes, depths and relations, hence every label and every ordered pair, are the feature-level world's.
Each image is ``image_size``² RGB (96 in the spec):

* every class is a glyph with its own shape, colour and texture (:data:`GLYPHS`), filled inside its box;
* objects are painted far to near (painter's order by depth), so nearer objects occlude;
* the pose is the box aspect, which the scene generator already draws (and shrinks towards square by c);
* a striding subject gets a "legs apart" notch at the bottom of its glyph, and a gripping pair a small
  magenta "hand" mark inside the subject's box next to the held object;
* Gaussian pixel noise on top.

Cue strength. The feature-level world multiplies the synonym-separating cues (pose one-hot, stride, grip) by
``data.cue_strength`` = c before its detector sees them. Here the same cues are drawn with contrast c: the notch
and the mark are blended into the picture as ``(1 - c)·pixel + c·mark_colour``, so at c = 1 the notch is
background and the mark pure magenta, and as c -> 0 both vanish into the glyph. The analogy is deliberate: the
rendered world is as hard on the synonyms as the feature-level one, but the detector has to learn to see it.

Detector: :class:`GlyphCNN` (3 conv layers, ~40 k parameters) on ``crop``² square crops around each box (side
= the longer box side plus a margin, so the aspect stays visible), cropped from the image tensor and resized
with ``F.interpolate``. It is pretrained for ``epochs`` on the training split's object crops to predict the
class, with pose and stride as auxiliary heads (as VG detectors carry attribute heads), then frozen. Object
features are its penultimate layer on the object crop, union features the same on the union-box crop (the
same for (i, j) and (j, i); the 9-d box geometry carries the order). Both are standardised with the training
split's statistics.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from iclr26.apt.names import OBJECTS
from iclr26.apt.shapes_sg import ShapesSG, Split, generate_with_scenes

__all__ = ["GLYPHS", "GlyphCNN", "crops", "render_scene", "rendered_dataset"]

BACKGROUND = np.array([0.5, 0.5, 0.5])
GRIP_COLOUR = np.array([1.0, 0.0, 1.0])
TEXTURE_DEPTH = 0.3  # a textured pixel is (1 - 0.3 · pattern) · colour
CROP_MARGIN = 1.2
# class -> (shape, RGB colour, texture); every colour is distinct and none is magenta or the background.
GLYPHS: dict[str, tuple[str, tuple[float, float, float], str]] = {
    "person": ("ellipse", (0.95, 0.8, 0.6), "solid"),
    "dog": ("diamond", (0.65, 0.4, 0.2), "dots"),
    "horse": ("octagon", (0.8, 0.55, 0.95), "hstripes"),
    "bike": ("triangle", (0.1, 0.8, 0.9), "vstripes"),
    "car": ("rect", (0.9, 0.1, 0.1), "solid"),
    "road": ("rect", (0.15, 0.15, 0.15), "hstripes"),
    "table": ("rect", (0.6, 0.9, 0.2), "checker"),
    "chair": ("invtriangle", (0.1, 0.3, 0.9), "solid"),
    "cup": ("ellipse", (1.0, 1.0, 0.2), "solid"),
    "phone": ("rect", (0.05, 0.05, 0.5), "vstripes"),
    "bag": ("diamond", (1.0, 0.5, 0.05), "checker"),
    "tree": ("triangle", (0.1, 0.55, 0.15), "dots"),
}
SHAPES = {
    "rect": lambda u, v: np.ones(u.shape, dtype=bool),
    "ellipse": lambda u, v: u**2 + v**2 <= 1.0,
    "diamond": lambda u, v: np.abs(u) + np.abs(v) <= 1.0,
    "octagon": lambda u, v: np.abs(u) + np.abs(v) <= 1.5,
    "triangle": lambda u, v: np.abs(u) <= (v + 1.0) / 2,
    "invtriangle": lambda u, v: np.abs(u) <= (1.0 - v) / 2,
}
TEXTURES = {  # pattern in {0, 1} of the pixel offsets (r, q) from the box's top-left corner
    "solid": lambda r, q: np.zeros(r.shape),
    "hstripes": lambda r, q: (r // 2) % 2,
    "vstripes": lambda r, q: (q // 2) % 2,
    "checker": lambda r, q: (r // 2 + q // 2) % 2,
    "dots": lambda r, q: ((r % 3 == 1) & (q % 3 == 1)).astype(float),
}


def _pixels(box: np.ndarray, size: int) -> tuple[int, int, int, int]:
    """Pixel rows/cols [y0, y1) x [x0, x1) of a normalised (cx, cy, w, h) box, at least one pixel each way."""
    x0, y0 = int(round((box[0] - box[2] / 2) * size)), int(round((box[1] - box[3] / 2) * size))
    x1 = max(x0 + 1, int(round((box[0] + box[2] / 2) * size)))
    y1 = max(y0 + 1, int(round((box[1] + box[3] / 2) * size)))
    return y0, y1, x0, x1


def _draw_glyph(img: np.ndarray, cls: str, box: np.ndarray, stride: int, cue: float) -> None:
    """Fill the class glyph inside ``box`` (in place); a striding subject gets the notch with contrast ``cue``."""
    size = img.shape[0]
    y0, y1, x0, x1 = _pixels(box, size)
    r, q = np.arange(y0, y1)[:, None], np.arange(x0, x1)[None, :]
    r, q = np.broadcast_arrays(r, q)
    v, u = (r + 0.5 - y0) / (y1 - y0) * 2 - 1, (q + 0.5 - x0) / (x1 - x0) * 2 - 1  # box coords in [-1, 1]
    shape, colour, texture = GLYPHS[cls]
    mask = SHAPES[shape](u, v)
    rgb = (1.0 - TEXTURE_DEPTH * TEXTURES[texture](r - y0, q - x0))[..., None] * np.asarray(colour)
    if stride:  # "legs apart": an inverted-V notch in the lower 40% of the glyph, blended towards background
        notch = mask & (v > 0.2) & (np.abs(u) < 0.6 * (v - 0.2))
        rgb = np.where(notch[..., None], (1.0 - cue) * rgb + cue * BACKGROUND, rgb)
    cy0, cy1, cx0, cx1 = max(y0, 0), min(y1, size), max(x0, 0), min(x1, size)
    if cy1 <= cy0 or cx1 <= cx0:
        return
    sub = (slice(cy0 - y0, cy1 - y0), slice(cx0 - x0, cx1 - x0))
    region = img[cy0:cy1, cx0:cx1]
    region[mask[sub]] = rgb[sub][mask[sub]]


def _draw_grip(img: np.ndarray, sbox: np.ndarray, obox: np.ndarray, cue: float) -> None:
    """A small 'hand' mark inside the subject's box, between its side and the held object (contrast ``cue``)."""
    size = img.shape[0]
    g = max(2, int(round(0.02 * size)))
    side = 1.0 if obox[0] >= sbox[0] else -1.0
    mx = (sbox[0] + side * sbox[2] / 2) * size - side * (obox[2] * size / 2 + g / 2)
    x0, y0 = int(round(mx - g / 2)), int(round(obox[1] * size - g / 2))
    x0, y0 = min(max(x0, 0), size - g), min(max(y0, 0), size - g)
    region = img[y0 : y0 + g, x0 : x0 + g]
    region[:] = (1.0 - cue) * region + cue * GRIP_COLOUR


def render_scene(scene: dict, size: int, cue: float, noise: float, rng: np.random.Generator) -> np.ndarray:
    """One scene dict (as :func:`generate_with_scenes` returns) as a [size, size, 3] float image in [0, 1]."""
    img = np.broadcast_to(BACKGROUND, (size, size, 3)).copy()
    for i in np.argsort(-np.asarray(scene["depth"]), kind="stable"):  # far first: nearer objects occlude
        _draw_glyph(img, scene["cls"][i], scene["boxes"][i], scene["stride"][i], cue)
    for (s, o), (_, grip) in sorted(scene["cues"].items()):
        if grip > 0:
            _draw_grip(img, scene["boxes"][s], scene["boxes"][o], cue)
    if noise > 0:
        img += rng.normal(0.0, noise, img.shape)
    return np.clip(img, 0.0, 1.0)


def crops(image: torch.Tensor, boxes: np.ndarray, crop: int) -> torch.Tensor:
    """Square crops [n, 3, crop, crop] of a [3, S, S] image around normalised (cx, cy, w, h) boxes: side = the
    longer box side x 1.2 + 2 px (the aspect stays visible), background outside the image, bilinear resize."""
    size = image.shape[-1]
    pad = size
    bg = torch.tensor(BACKGROUND, dtype=image.dtype)[:, None, None]
    padded = bg.expand(3, size + 2 * pad, size + 2 * pad).clone()
    padded[:, pad : pad + size, pad : pad + size] = image
    out = []
    for b in np.asarray(boxes, dtype=float).reshape(-1, 4):
        side = max(1, int(round(max(b[2], b[3]) * size * CROP_MARGIN + 2)))
        x0 = min(max(int(round(b[0] * size - side / 2)) + pad, 0), padded.shape[-1] - side)
        y0 = min(max(int(round(b[1] * size - side / 2)) + pad, 0), padded.shape[-2] - side)
        patch = padded[None, :, y0 : y0 + side, x0 : x0 + side]
        out.append(F.interpolate(patch, size=(crop, crop), mode="bilinear", align_corners=False)[0])
    return torch.stack(out) if out else torch.zeros(0, 3, crop, crop)


def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    x0, y0 = min(a[0] - a[2] / 2, b[0] - b[2] / 2), min(a[1] - a[3] / 2, b[1] - b[3] / 2)
    x1, y1 = max(a[0] + a[2] / 2, b[0] + b[2] / 2), max(a[1] + a[3] / 2, b[1] + b[3] / 2)
    return np.array([(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0])


class GlyphCNN(nn.Module):
    """3 conv layers (16, 32, 64 channels, 3x3) -> 2x2 average pool -> a ``feat_dim`` ReLU layer (the features);
    heads: class (12), pose (3: tall / wide / seated) and stride (2). ~40 k parameters at feat_dim 64."""

    def __init__(self, feat_dim: int = 64, n_cls: int = len(OBJECTS)) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
            nn.Flatten(),
            nn.Linear(256, feat_dim),
            nn.ReLU(),
        )
        self.n_cls = n_cls
        self.head = nn.Linear(feat_dim, n_cls + 3 + 2)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body((x - 0.5) / 0.25)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        z = self.head(self.features(x))
        return z[:, : self.n_cls], z[:, self.n_cls : self.n_cls + 3], z[:, self.n_cls + 3 :]


def _check(cfg, rcfg) -> None:
    if rcfg.image_size < 32:
        raise ValueError(
            f"rendering.image_size must be >= 32 pixels (glyphs of 4% boxes vanish), got {rcfg.image_size}"
        )
    if rcfg.crop < 8:
        raise ValueError(f"rendering.crop must be >= 8 pixels (the CNN pools twice), got {rcfg.crop}")
    if rcfg.pixel_noise < 0 or rcfg.epochs < 1 or rcfg.batch_size < 1:
        raise ValueError("rendering.pixel_noise must be >= 0, epochs and batch_size >= 1")


def _render_split(scenes: list, cfg, rcfg, seed: int, part: int) -> torch.Tensor:
    rng = np.random.default_rng([seed, 7002, part])
    imgs = [render_scene(sc, rcfg.image_size, cfg.cue_strength, rcfg.pixel_noise, rng) for sc in scenes]
    return torch.from_numpy(np.stack(imgs).astype(np.float32)).permute(0, 3, 1, 2).contiguous()


def _object_crops(images: torch.Tensor, scenes: list, crop: int) -> torch.Tensor:
    return torch.cat([crops(images[k], np.stack(sc["boxes"]), crop) for k, sc in enumerate(scenes)])


def _pretrain(x: torch.Tensor, split: Split, cfg, rcfg, seed: int) -> GlyphCNN:
    """Class + pose + stride heads on the training split's object crops, ``epochs`` passes, then frozen."""
    torch.manual_seed(seed * 7919 + 3)
    cnn = GlyphCNN(cfg.feat_dim)
    opt = torch.optim.Adam(cnn.parameters(), lr=rcfg.lr)
    gen = torch.Generator().manual_seed(seed * 7919 + 5)
    targets = (split.obj_cls, split.obj_pose, split.obj_stride)
    for _ in range(rcfg.epochs):
        for idx in torch.randperm(len(x), generator=gen).split(rcfg.batch_size):
            logits = cnn(x[idx])
            loss = sum(F.cross_entropy(z, t[idx]) for z, t in zip(logits, targets, strict=True))
            opt.zero_grad()
            loss.backward()
            opt.step()
    cnn.eval()
    for p in cnn.parameters():
        p.requires_grad_(False)
    return cnn


@torch.no_grad()
def _union_features(cnn: GlyphCNN, images: torch.Tensor, scenes: list, split: Split, crop: int) -> torch.Tensor:
    """Features of the union-box crop of every unordered pair, gathered onto the split's ordered pairs."""
    feats = []
    for k, sc in enumerate(scenes):
        b, n = sc["boxes"], len(sc["boxes"])
        ub = [_union(b[a], b[c]) for a in range(n) for c in range(a + 1, n)]
        feats.append(_batched(cnn.features, crops(images[k], np.stack(ub), crop)))
    table = torch.cat(feats)
    counts = split.img_obj_start[1:] - split.img_obj_start[:-1]
    offset = torch.cumsum(counts * (counts - 1) // 2, 0) - counts * (counts - 1) // 2
    start, n = split.img_obj_start[split.pair_img], counts[split.pair_img]
    i, j = split.pair_s - start, split.pair_o - start
    a, c = torch.minimum(i, j), torch.maximum(i, j)
    return table[offset[split.pair_img] + a * n - a * (a + 1) // 2 + (c - a - 1)]


def _batched(fn, x: torch.Tensor, bs: int = 512) -> torch.Tensor:
    return torch.cat([fn(x[i : i + bs]) for i in range(0, len(x), bs)]) if len(x) else fn(x)


@torch.no_grad()
def _accuracy(cnn: GlyphCNN, x: torch.Tensor, split: Split) -> dict:
    cls, pose, stride = (torch.cat(z) for z in zip(*(cnn(x[i : i + 512]) for i in range(0, len(x), 512)), strict=True))
    striders = split.obj_stride == 1
    return {
        "cnn_class_acc": float((cls.argmax(1) == split.obj_cls).float().mean()),
        "cnn_pose_acc": float((pose.argmax(1) == split.obj_pose).float().mean()),
        "cnn_stride_acc": float((stride.argmax(1) == split.obj_stride).float().mean()),
        "cnn_stride_recall": float((stride.argmax(1)[striders] == 1).float().mean()) if striders.any() else None,
    }


def rendered_dataset(cfg, rcfg, seed: int) -> tuple[ShapesSG, dict]:
    """The feature-level world's splits for ``seed`` with CNN features on rendered images in place of the
    random-MLP ones (labels, pairs and geometry unchanged), and a dict of CNN crop accuracies and timings."""
    _check(cfg, rcfg)
    t0 = time.perf_counter()
    data, scenes = generate_with_scenes(cfg, seed)
    splits = (data.train, data.val, data.test)
    images = [_render_split(sc, cfg, rcfg, seed, part) for part, sc in enumerate(scenes)]
    t_render = time.perf_counter() - t0
    obj_x = [_object_crops(im, sc, rcfg.crop) for im, sc in zip(images, scenes, strict=True)]
    cnn = _pretrain(obj_x[0], data.train, cfg, rcfg, seed)
    t_train = time.perf_counter() - t0 - t_render
    obj = [_batched(cnn.features, x) for x in obj_x]
    uni = [_union_features(cnn, im, sc, sp, rcfg.crop) for im, sc, sp in zip(images, scenes, splits, strict=True)]
    mo, so = obj[0].mean(0), obj[0].std(0).clamp_min(1e-6)
    mu, su = uni[0].mean(0), uni[0].std(0).clamp_min(1e-6)
    new = [
        replace(sp, obj_vis=(o - mo) / so, pair_union=(u - mu) / su) for sp, o, u in zip(splits, obj, uni, strict=True)
    ]
    info = {
        **_accuracy(cnn, obj_x[2], data.test),
        "cnn_params": sum(p.numel() for p in cnn.parameters()),
        "n_images": sum(len(sc) for sc in scenes),
        "render_s": t_render,
        "cnn_train_s": t_train,
        "total_s": time.perf_counter() - t0,
    }
    return ShapesSG(*new), info
