"""Progress bars on or off for a whole run, worker processes included.

``iclr26 run --no-progress`` (or output that is not a terminal) turns the bars off. The flag
travels as the environment variable ``ICLR26_NO_PROGRESS=1`` so that worker processes started
by :func:`iclr26.core.parallel.seed_map` inherit it, and :func:`iclr26.core.train.fit` draws no
bar there whatever its own ``TrainConfig.progress`` says.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

NO_PROGRESS_ENV = "ICLR26_NO_PROGRESS"


@contextlib.contextmanager
def progress_env(show: bool) -> Iterator[None]:
    """While a run without progress bars is in flight, set ``ICLR26_NO_PROGRESS=1``.

    Worker processes (``seed_map``, ``core.parallel``) inherit the environment, so ``fit`` and any
    bar drawn there stays off too, whatever its own ``TrainConfig.progress`` says.
    """
    if show:
        yield
        return
    old = os.environ.get(NO_PROGRESS_ENV)
    os.environ[NO_PROGRESS_ENV] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(NO_PROGRESS_ENV, None)
        else:
            os.environ[NO_PROGRESS_ENV] = old


def progress_disabled() -> bool:
    """True inside a run started without progress bars (see :func:`progress_env`)."""
    return os.environ.get(NO_PROGRESS_ENV) == "1"
