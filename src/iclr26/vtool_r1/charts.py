"""Synthetic bar-chart question answering, rendered with PIL (the CPU-scale stand-in for ReFocus ChartQA).

A chart is a 48x48 RGB image with eight 6-px slots; K in {5..8} random slots hold a grey bar of height
1-9 units (4 px per unit, baseline at y=40) and, below it, a 3x3 colour swatch whose colour name is the
bar's label ("x value"). The metadata ``bboxes`` maps each label to the bbox of its 6-px slot (the bar
column with its swatch and the blank pixel on each side), in ReFocus's ``{"x1","y1","x2","y2"}`` format, so
the real ReFocus tools run on it unchanged (a box of only the 4-px bar would be refused by the v1 tools,
whose 2-px inset on each side leaves nothing of it).

Question types (:data:`QUESTION_TYPES`):

* ``VAL`` (L): "What is the value of L?" -> digit. Masking the other bars makes this easy.
* ``CMP`` (L1, L2): "Is L1 taller than L2?" -> yes/no. Masking helps.
* ``CNT``: "How many bars are there?" -> digit. Tools cannot help (masking removes bars).
* ``MAX``: "What is the largest value?" -> digit. Tools cannot help.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

__all__ = ["COLORS", "QUESTION_TYPES", "ChartSample", "make_chart", "make_dataset", "question_text"]

SIZE = 48
SLOTS = 8
SLOT_W = 6
UNIT = 4
BASE_Y = 40
SWATCH_Y = 42
QUESTION_TYPES = ("VAL", "CMP", "CNT", "MAX")
TOOL_HELPS = {"VAL": True, "CMP": True, "CNT": False, "MAX": False}
COLORS = {  # name -> RGB; none is the pure red the draw / highlight tools use
    "green": (0, 160, 0),
    "blue": (0, 0, 230),
    "yellow": (230, 200, 0),
    "purple": (130, 0, 160),
    "orange": (255, 130, 0),
    "cyan": (0, 200, 220),
    "pink": (250, 120, 190),
    "brown": (120, 70, 20),
}
BAR_RGB = (110, 110, 110)
AXIS_RGB = (0, 0, 0)


@dataclass(frozen=True)
class ChartSample:
    """One chart question with its ground truth and ReFocus-style metadata."""

    image: np.ndarray
    """[48, 48, 3] uint8 chart."""
    bboxes: dict
    """label -> {"x1","y1","x2","y2"} of the bar column (used as both columns_bbox and rows_bbox)."""
    labels: tuple
    """Labels of the bars, left to right."""
    heights: tuple
    """Heights (1-9) of the bars, left to right."""
    qtype: str
    """One of QUESTION_TYPES."""
    args: tuple
    """The labels the question mentions (VAL: 1, CMP: 2, CNT/MAX: 0)."""
    answer: str
    """Ground truth ("1".."9", "yes" or "no")."""

    @property
    def question(self) -> str:
        return question_text(self.qtype, self.args)


def question_text(qtype: str, args: tuple) -> str:
    return {
        "VAL": lambda: f"What is the value of {args[0]}?",
        "CMP": lambda: f"Is {args[0]} taller than {args[1]}?",
        "CNT": lambda: "How many bars are there?",
        "MAX": lambda: "What is the largest value?",
    }[qtype]()


def render(
    slots: list[int], labels: list[str], heights: list[int], noise: float = 0.0, rng: np.random.Generator | None = None
) -> tuple[np.ndarray, dict]:
    """Draw the chart with PIL; returns (uint8 image, bboxes)."""
    img = Image.new("RGB", (SIZE, SIZE), (255, 255, 255))
    d = ImageDraw.Draw(img)
    d.line([(0, BASE_Y), (SIZE - 1, BASE_Y)], fill=AXIS_RGB, width=1)
    bboxes = {}
    for s, lab, h in zip(slots, labels, heights, strict=True):
        x1 = s * SLOT_W + 1
        d.rectangle([x1, BASE_Y - UNIT * h, x1 + 3, BASE_Y - 1], fill=BAR_RGB)
        d.rectangle([x1, SWATCH_Y, x1 + 2, SWATCH_Y + 2], fill=COLORS[lab])
        bboxes[lab] = {"x1": s * SLOT_W, "y1": 2, "x2": s * SLOT_W + SLOT_W - 1, "y2": SWATCH_Y + 3}
    arr = np.asarray(img, dtype=np.uint8).copy()
    if noise > 0 and rng is not None:
        arr = np.clip(arr.astype(np.int16) + rng.integers(-noise, noise + 1, arr.shape), 0, 255).astype(np.uint8)
    return arr, bboxes


def make_chart(
    rng: np.random.Generator, qtype: str | None = None, noise: float = 0.0, k_range: tuple[int, int] = (5, 8)
) -> ChartSample:
    """One random chart and question (``qtype`` None = uniform over the four types)."""
    qtype = qtype or QUESTION_TYPES[int(rng.integers(len(QUESTION_TYPES)))]
    if qtype not in QUESTION_TYPES:
        raise ValueError(f"qtype must be one of {QUESTION_TYPES}, got {qtype!r}")
    k = int(rng.integers(k_range[0], k_range[1] + 1))
    slots = sorted(rng.choice(SLOTS, size=k, replace=False).tolist())
    labels = [str(x) for x in rng.choice(list(COLORS), size=k, replace=False)]
    heights = [int(x) for x in rng.integers(1, 10, size=k)]
    if qtype == "CMP":
        i, j = (int(x) for x in rng.choice(k, size=2, replace=False))
        while heights[i] == heights[j]:
            heights[j] = int(rng.integers(1, 10))
        args, answer = (labels[i], labels[j]), "yes" if heights[i] > heights[j] else "no"
    elif qtype == "VAL":
        i = int(rng.integers(k))
        args, answer = (labels[i],), str(heights[i])
    elif qtype == "CNT":
        args, answer = (), str(k)
    else:
        args, answer = (), str(max(heights))
    image, bboxes = render(slots, labels, heights, noise, rng)
    return ChartSample(image, bboxes, tuple(labels), tuple(heights), qtype, args, answer)


def make_dataset(n: int, seed: int, noise: float = 0.0, balanced: bool = True) -> list[ChartSample]:
    """``n`` charts; ``balanced``: question types in turn (n/4 each), else uniform at random."""
    rng = np.random.default_rng(seed)
    return [make_chart(rng, QUESTION_TYPES[i % 4] if balanced else None, noise) for i in range(n)]
