"""Byte-level text from the Python standard library's own sources and docs (nothing downloaded).

The corpus is: the ``pydoc_data.topics`` documentation (topics sorted by name), then the stdlib ``*.py``
files sorted by relative path, skipping ``test``/``tests``/``idlelib``/``lib2to3``/``site-packages``
folders, concatenated (each document followed by a NUL byte) until ``max_bytes``. Tokens are bytes
(vocabulary 256). The first 95% is the training split, the last 5% the validation split. It is
deterministic for a given Python version (the stdlib text changes between versions).
"""

from __future__ import annotations

import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

EXCLUDED_DIRS = ("test", "tests", "idlelib", "lib2to3", "site-packages", "__pycache__")


def stdlib_source_files(stdlib_dir: str | Path | None = None) -> tuple[Path, list[str]]:
    """(stdlib root, sorted relative paths of the ``*.py`` files in the corpus)."""
    root = Path(stdlib_dir or sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise FileNotFoundError(f"stdlib folder {root} not found")
    rel = (p.relative_to(root) for p in root.rglob("*.py"))
    return root, sorted(r.as_posix() for r in rel if not any(part in EXCLUDED_DIRS for part in r.parts[:-1]))


def stdlib_documents(stdlib_dir: str | Path | None = None) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every document in corpus order, read lazily: pydoc topics, then sorted sources."""
    import pydoc_data.topics as topics

    for k in sorted(topics.topics):
        yield f"pydoc:{k}", topics.topics[k].encode("utf-8")
    root, files = stdlib_source_files(stdlib_dir)
    for name in files:
        yield name, (root / name).read_bytes()


def stdlib_bytes(max_bytes: int = 2_000_000, stdlib_dir: str | Path | None = None) -> np.ndarray:
    """The first ``max_bytes`` bytes of the corpus as a uint8 array."""
    if max_bytes < 1000:
        raise ValueError(f"max_bytes={max_bytes} is too small for a 95/5 split")
    chunks, n = [], 0
    for _, data in stdlib_documents(stdlib_dir):
        chunks.append(data + b"\0")
        n += len(data) + 1
        if n >= max_bytes:
            break
    arr = np.frombuffer(b"".join(chunks)[:max_bytes], dtype=np.uint8).copy()
    if arr.size < max_bytes:
        raise ValueError(f"the stdlib corpus has only {arr.size} bytes < max_bytes={max_bytes}")
    return arr


@dataclass(frozen=True)
class ByteCorpus:
    """Train/validation byte streams and deterministic batch samplers.

    train, val: uint8 token arrays (95% / 5% of the corpus, in order).
    """

    train: np.ndarray
    val: np.ndarray

    @classmethod
    def from_stdlib(cls, max_bytes: int = 2_000_000, val_fraction: float = 0.05) -> ByteCorpus:
        data = stdlib_bytes(max_bytes)
        cut = int(round(len(data) * (1 - val_fraction)))
        return cls(train=data[:cut], val=data[cut:])

    def train_batch(
        self, seed: int, step: int, batch: int, seq_len: int, rank: int = 0, world: int = 1
    ) -> torch.Tensor:
        """(batch // world, seq_len + 1) random windows of the training split; a function of (seed, step)
        only, so every arm of an experiment sees exactly the same tokens. Under DDP each rank takes its
        slice of the global batch."""
        if batch % world:
            raise ValueError(f"global batch {batch} not divisible by world size {world}")
        rng = np.random.default_rng([seed, step])
        starts = rng.integers(0, len(self.train) - seq_len - 1, size=batch)
        per = batch // world
        starts = starts[rank * per : (rank + 1) * per]
        rows = np.stack([self.train[s : s + seq_len + 1] for s in starts])
        return torch.from_numpy(rows.astype(np.int64))

    def val_batches(self, seq_len: int, max_windows: int, batch: int) -> list[torch.Tensor]:
        """Non-overlapping validation windows (seq_len + 1 tokens) from the start of the split, batched."""
        n = min(max_windows, (len(self.val) - 1) // seq_len)
        if n < 1:
            raise ValueError("validation split shorter than one window")
        rows = np.stack([self.val[i * seq_len : i * seq_len + seq_len + 1] for i in range(n)]).astype(np.int64)
        t = torch.from_numpy(rows)
        return [t[i : i + batch] for i in range(0, n, batch)]
