"""Synthetic scenes, EXIST questions and upstream messages (numpy only; nothing downloads).

A scene is a 32x32 RGB image on a black background: a 4x4 grid of 8x8 cells (16 vision tokens), with
1..max_shapes coloured shapes (circle / square / triangle x red / green / blue / yellow), one per
cell, plus Gaussian pixel noise. An EXIST question ("is there a <colour> <shape>?", POPE-like) is
positive half of the time; a negative is adversarial with probability ``p_adversarial`` (a present
shape in an absent colour, or a present colour on an absent shape). An occluded view shows each agent
a random subset of ``visible_cells`` cells; the others are black.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from iclr26.vif.config import DataConfig

PAD, SYS, ASK, NONE, YES, NO = 0, 1, 2, 3, 4, 5
COLORS = np.array([[1.0, 0.15, 0.15], [0.15, 0.9, 0.15], [0.2, 0.35, 1.0], [1.0, 0.9, 0.1]], dtype=np.float32)
COLOR_NAMES = ("red", "green", "blue", "yellow")
SHAPE_NAMES = ("circle", "square", "triangle")
QUESTION0 = 6  # one token per (colour, shape) question: QUESTION0 + colour * 3 + shape
VOCAB = QUESTION0 + len(COLORS) * len(SHAPE_NAMES)
GRID, CELL = 4, 8
N_CELLS, PATCH_DIM = GRID * GRID, CELL * CELL * 3


def _shape_masks() -> np.ndarray:
    """Binary 8x8 stencils [3, 8, 8] of a circle, a square and a triangle (about 6-7 px wide)."""
    yy, xx = np.mgrid[0:CELL, 0:CELL].astype(np.float32) + 0.5
    circle = (yy - 4) ** 2 + (xx - 4) ** 2 <= 3.2**2
    square = (np.abs(yy - 4) <= 3) & (np.abs(xx - 4) <= 3)
    triangle = (yy >= 1) & (yy <= 7) & (np.abs(xx - 4) <= (yy - 1) * 0.55)
    return np.stack([circle, square, triangle]).astype(np.float32)


STENCILS = _shape_masks()


@dataclass
class Scenes:
    """A batch of scenes and one EXIST question each.

    images [n, 32, 32, 3]; cell/color/shape [n, max_shapes] (-1: no object);
    q_color/q_shape [n]; answer [n] (1 = yes).
    """

    images: np.ndarray
    cell: np.ndarray
    color: np.ndarray
    shape: np.ndarray
    q_color: np.ndarray
    q_shape: np.ndarray
    answer: np.ndarray

    def __len__(self) -> int:
        return len(self.answer)


def _question(rng: np.random.Generator, present: set, cfg: DataConfig) -> tuple[int, int, int]:
    pairs = sorted(present)
    if rng.random() < 0.5:
        c, s = pairs[rng.integers(len(pairs))]
        return c, s, 1
    absent = [(c, s) for c in range(len(COLORS)) for s in range(len(SHAPE_NAMES)) if (c, s) not in present]
    if rng.random() < cfg.p_adversarial:
        colors, shapes = {c for c, _ in pairs}, {s for _, s in pairs}
        adv = [(c, s) for c, s in absent if c in colors or s in shapes]
        if adv:
            c, s = adv[rng.integers(len(adv))]
            return c, s, 0
    c, s = absent[rng.integers(len(absent))]
    return c, s, 0


def make_scenes(rng: np.random.Generator, n: int, cfg: DataConfig) -> Scenes:
    """n scenes with one EXIST question each (see the module docstring)."""
    k = cfg.max_shapes
    images = np.zeros((n, GRID * CELL, GRID * CELL, 3), dtype=np.float32)
    cell = -np.ones((n, k), dtype=np.int64)
    color, shape = cell.copy(), cell.copy()
    q = np.zeros((3, n), dtype=np.int64)
    for i in range(n):
        m = int(rng.integers(1, k + 1))
        cells = rng.choice(N_CELLS, size=m, replace=False)
        present = set()
        for j, c in enumerate(cells):
            col, shp = int(rng.integers(len(COLORS))), int(rng.integers(len(SHAPE_NAMES)))
            r0, c0 = (c // GRID) * CELL, (c % GRID) * CELL
            images[i, r0 : r0 + CELL, c0 : c0 + CELL] = STENCILS[shp][..., None] * COLORS[col]
            cell[i, j], color[i, j], shape[i, j] = c, col, shp
            present.add((col, shp))
        q[:, i] = _question(rng, present, cfg)
    images += rng.normal(0.0, cfg.noise, images.shape).astype(np.float32)
    return Scenes(images, cell, color, shape, q[0], q[1], q[2])


def view_masks(rng: np.random.Generator, n: int, occluded: np.ndarray, visible_cells: int) -> np.ndarray:
    """Visible cells [n, 16] (bool): all cells for full views, a random subset for occluded ones."""
    vis = np.ones((n, N_CELLS), dtype=bool)
    for i in np.flatnonzero(occluded):
        hide = rng.choice(N_CELLS, size=N_CELLS - visible_cells, replace=False)
        vis[i, hide] = False
    return vis


def patches(images: np.ndarray, visible: np.ndarray | None = None) -> np.ndarray:
    """[n, 32, 32, 3] -> [n, 16, 192] row-major 8x8 cells; hidden cells are black (zeros)."""
    n = images.shape[0]
    p = images.reshape(n, GRID, CELL, GRID, CELL, 3).transpose(0, 1, 3, 2, 4, 5).reshape(n, N_CELLS, PATCH_DIM)
    if visible is not None:
        p = p * visible[..., None]
    return np.ascontiguousarray(p, dtype=np.float32)


def train_messages(rng: np.random.Generator, answer: np.ndarray, cfg: DataConfig, k: int | None = None) -> np.ndarray:
    """Upstream messages of training examples [n, max_msgs] (token ids; oldest first, NONE-padded left).

    K ~ U{0..max_msgs}; each message is right with probability p_trust; with probability p_copy per
    example, every message after the first wrong one repeats it (a copy cascade). ``k``: every example
    has exactly k messages and the result is [n, k] (the transcript context: one length per batch).
    """
    n, m = len(answer), cfg.max_msgs if k is None else k
    msgs = np.full((n, m), NONE, dtype=np.int64)
    ks = rng.integers(0, m + 1, size=n) if k is None else np.full(n, k)
    right = rng.random((n, m)) < cfg.p_trust
    cascade = rng.random(n) < cfg.p_copy
    for i in range(n):
        k = int(ks[i])
        ok = right[i, :k].copy()
        if cascade[i] and (~ok).any():
            ok[int(np.argmax(~ok)) :] = False
        truth = YES if answer[i] == 1 else NO
        lie = NO if truth == YES else YES
        msgs[i, m - k :] = np.where(ok, truth, lie)
    return msgs


def instruction(scenes: Scenes, msgs: np.ndarray) -> np.ndarray:
    """Instruction token ids [n, 1 + max_msgs]: the question ("a <colour> <shape>?"), then the message slots."""
    q = QUESTION0 + scenes.q_color * len(SHAPE_NAMES) + scenes.q_shape
    return np.concatenate([q[:, None], msgs], 1)


def transcript(scenes: Scenes, said: np.ndarray) -> np.ndarray:
    """Instruction token ids [n, 1 + 2K] of the transcript context: the question, then one entry per
    earlier turn, oldest first, each the question restated and that agent's answer ("a red circle? yes").

    said [n, K]: YES / NO tokens of the K earlier agents (K = 0: the question alone). The context grows
    by two tokens per turn, as a multi-agent chain passes every earlier response on.
    """
    q = QUESTION0 + np.asarray(scenes.q_color) * len(SHAPE_NAMES) + np.asarray(scenes.q_shape)
    said = np.asarray(said, dtype=np.int64)
    if said.ndim != 2 or said.shape[0] != len(q):
        raise ValueError(f"said must be [n, K] with n = {len(q)}, got shape {said.shape}")
    if said.size and not np.isin(said, (YES, NO)).all():
        raise ValueError("a transcript entry must be YES or NO (no empty slots)")
    entries = np.stack([np.broadcast_to(q[:, None], said.shape), said], -1).reshape(len(q), -1)
    return np.concatenate([q[:, None], entries], 1)


def agent_instruction(scenes: Scenes, said: np.ndarray, cfg: DataConfig) -> np.ndarray:
    """An agent's instruction from its earlier agents' answers said [n, K] (oldest first).

    ``cfg.context="window"``: the question and the last ``max_msgs`` answers in fixed slots, NONE-padded
    left (the context length never changes). ``"transcript"``: :func:`transcript` of every earlier answer.
    """
    if cfg.context == "transcript":
        return transcript(scenes, said)
    said = np.asarray(said, dtype=np.int64)
    m, n = cfg.max_msgs, said.shape[0]
    said = said[:, -m:] if m else said[:, :0]
    msgs = np.full((n, m), NONE, dtype=np.int64)
    if said.shape[1]:
        msgs[:, m - said.shape[1] :] = said
    return instruction(scenes, msgs)


def cell_labels(scenes: Scenes) -> np.ndarray:
    """Per-cell class [n, 16]: 0 = empty, 1 + colour * 3 + shape otherwise (vision-encoder pretraining)."""
    lab = np.zeros((len(scenes), N_CELLS), dtype=np.int64)
    for j in range(scenes.cell.shape[1]):
        has = scenes.cell[:, j] >= 0
        rows = np.flatnonzero(has)
        lab[rows, scenes.cell[rows, j]] = 1 + scenes.color[rows, j] * len(SHAPE_NAMES) + scenes.shape[rows, j]
    return lab
