"""Replay buffers of sample *indices* (into the training set), so stored items are the clean,
non-augmented samples and augmentation (if any) is applied when they are replayed.

Two policies:

* :class:`BalancedReplayBuffer`: the official ``er_balanced`` policy used in the paper. The buffer
  is rebuilt at the end of every task so that every seen class holds ``M // n_seen`` items (the
  first ``M % n_seen`` classes one more); old classes keep their *earliest* stored items, new classes
  add their first items in loader order. Official special case (``models/er_balanced.py``,
  ``end_task``): when ``M`` equals the total number of classes, the *first* task stores one item per
  class and no remainder; from the second task on the general rule applies again, so old classes
  (holding one item) cannot grow while new ones get ``M // n_seen``: with M = 10 classes, 2 per
  task, the buffer holds 2, 6, 8, 8 items after tasks 0-3.
* :class:`ReservoirBuffer`: classic ER reservoir sampling (Vitter's algorithm R). After ``n`` stream
  items each one is in the buffer with probability ``min(1, M / n)``.
"""

from __future__ import annotations

import numpy as np


class ReplayBuffer:
    """Common interface: ``indices`` (stored dataset indices), ``labels`` (their labels)."""

    def __init__(self, capacity: int):
        if capacity < 0:
            raise ValueError(f"buffer capacity must be >= 0, got {capacity}")
        self.capacity = int(capacity)
        self.indices = np.zeros(0, dtype=np.int64)
        self.labels = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.indices)

    def is_empty(self) -> bool:
        return len(self.indices) == 0

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``min(n, len(buffer))`` stored indices drawn without replacement (Mammoth's ``get_data``)."""
        n = min(int(n), len(self.indices))
        if n <= 0:
            return np.zeros(0, dtype=np.int64)
        return self.indices[rng.choice(len(self.indices), size=n, replace=False)]

    def observe(self, indices: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> None:
        """Called with every stream batch (clean indices). No-op unless the policy is online."""

    def end_task(self, task: int, new_classes: dict[int, np.ndarray]) -> None:
        """Called when task ``task`` (0-based) ends. ``new_classes[c]``: class c's indices in loader order."""

    def counts(self) -> dict[int, int]:
        cls, cnt = np.unique(self.labels, return_counts=True)
        return {int(c): int(n) for c, n in zip(cls, cnt)}


class BalancedReplayBuffer(ReplayBuffer):
    """Class-balanced buffer rebuilt at task ends (official ``er_balanced``).

    capacity: M, the number of stored samples.
    total_classes: number of classes of the whole sequence (for the ``M == N_CLASSES`` special case
        of the first task); ``None`` disables the special case.
    """

    def __init__(self, capacity: int, total_classes: int | None = None):
        super().__init__(capacity)
        self.total_classes = total_classes
        self.class_order: list[int] = []  # classes in the order they were seen
        self.per_class: dict[int, np.ndarray] = {}

    def end_task(self, task: int, new_classes: dict[int, np.ndarray]) -> None:
        if self.capacity == 0:
            return
        for c in new_classes:
            if c in self.per_class:
                raise ValueError(f"class {c} was already added to the buffer")
        self.class_order += list(new_classes)
        n_seen = len(self.class_order)
        if task == 0 and self.total_classes is not None and self.capacity == self.total_classes:
            quota = dict.fromkeys(self.class_order, 1)  # official: one per class, remainder 0 (first task only)
        else:
            per, rem = divmod(self.capacity, n_seen)
            quota = {c: per + (1 if k < rem else 0) for k, c in enumerate(self.class_order)}
        for c in self.class_order:
            if c in new_classes:
                self.per_class[c] = np.asarray(new_classes[c], dtype=np.int64)[: quota[c]].copy()
            else:  # shrink: keep the first stored items
                self.per_class[c] = self.per_class[c][: quota[c]]
        self.indices = np.concatenate([self.per_class[c] for c in self.class_order]).astype(np.int64)
        self.labels = np.concatenate([np.full(len(self.per_class[c]), c) for c in self.class_order]).astype(np.int64)


class ReservoirBuffer(ReplayBuffer):
    """Reservoir sampling over the stream (classic ER): uniform over everything seen so far."""

    def __init__(self, capacity: int):
        super().__init__(capacity)
        self.n_seen = 0

    def observe(self, indices: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> None:
        if self.capacity == 0:
            return
        idx_list, lab_list = list(self.indices), list(self.labels)
        for i, y in zip(np.asarray(indices), np.asarray(labels)):
            if len(idx_list) < self.capacity:
                idx_list.append(int(i))
                lab_list.append(int(y))
            else:
                j = int(rng.integers(0, self.n_seen + 1))
                if j < self.capacity:
                    idx_list[j], lab_list[j] = int(i), int(y)
            self.n_seen += 1
        self.indices = np.asarray(idx_list, dtype=np.int64)
        self.labels = np.asarray(lab_list, dtype=np.int64)


def make_buffer(policy: str, capacity: int, total_classes: int | None = None) -> ReplayBuffer:
    """``policy`` in {"balanced", "reservoir"}."""
    if policy == "balanced":
        return BalancedReplayBuffer(capacity, total_classes)
    if policy == "reservoir":
        return ReservoirBuffer(capacity)
    raise ValueError(f"unknown buffer policy '{policy}'; valid: balanced, reservoir")
