"""Seed-parallel runs and torch thread pinning, written once for every paper.

A ``small`` run trains one model per seed. On a 2-core laptop the fastest layout is usually one
process per seed with one torch thread each; on a bigger machine, more. :func:`seed_map` runs
``fn(item)`` for every item, in-process when ``workers <= 1`` (the default, and what tests use) or in
a ``spawn`` process pool otherwise, with each worker pinned to ``threads_per_worker`` torch threads.
Results come back in the order of ``items`` whatever the finishing order, so the same seeds give the
same numbers with any worker count. :func:`torch_threads` sets the thread count for a block and
restores the previous value on exit, also on error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["seed_map", "torch_threads"]


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """``torch.set_num_threads(n)`` inside the block, the previous count restored after (None: unchanged)."""
    import torch

    previous = torch.get_num_threads()
    if n is not None:
        if n < 1:
            raise ValueError(f"thread count must be >= 1, got {n}")
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def seed_map(
    fn: Callable[[T], R],
    items: Sequence[T] | Iterable[T],
    *,
    workers: int = 1,
    threads_per_worker: int = 1,
    progress: Callable[..., Any] | None = None,
    desc: str = "seeds",
) -> list[R]:
    """``[fn(x) for x in items]``, optionally over a spawn process pool; results in input order.

    fn: a module-level function (picklable) when ``workers > 1``.
    workers: processes; ``<= 1`` runs in this process under :func:`torch_threads` (``threads_per_worker``).
    progress: e.g. ``RunContext.progress``; called as ``progress(iterable, total=, desc=)``.
    A worker's exception is re-raised here with the item it failed on.
    """
    items = list(items)
    wrap = progress or (lambda it, total=None, desc="": it)
    if workers <= 1 or len(items) <= 1:
        out = []
        with torch_threads(threads_per_worker):
            for item in wrap(items, total=len(items), desc=desc):
                out.append(fn(item))
        return out
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    results: dict[int, R] = {}
    with ProcessPoolExecutor(
        max_workers=min(workers, len(items)),
        mp_context=mp.get_context("spawn"),
        initializer=_init_worker,
        initargs=(threads_per_worker,),
    ) as pool:
        futures = {pool.submit(fn, item): k for k, item in enumerate(items)}
        for fut in wrap(as_completed(futures), total=len(futures), desc=desc):
            k = futures[fut]
            try:
                results[k] = fut.result()
            except Exception as exc:
                raise RuntimeError(f"worker failed on {items[k]!r}: {type(exc).__name__}: {exc}") from exc
    return [results[k] for k in range(len(items))]
