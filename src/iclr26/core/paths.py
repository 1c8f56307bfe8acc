"""Paths named by untrusted data files: a row may name a file, never one outside the data's root.

A dataset file (JSONL, parquet) is input, not a licence to open any file of the machine: an image path
``../../etc/shadow``, ``/root/.ssh/id_rsa`` or a symlink that leads out of the root is refused before
anything opens it. Loaders turn the refusal into a row error (the row fails, the run continues).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PathOutsideRoot", "path_inside"]


class PathOutsideRoot(ValueError):
    """A path from a data file that is absolute, climbs out with ``..``, or resolves (symlinks) outside its root."""


def path_inside(root: str | Path, name: object) -> Path:
    """``root / name`` when it stays inside ``root`` after resolving symlinks, else :class:`PathOutsideRoot`.

    ``name`` must be a relative path without ``..`` components (a str or os.PathLike); the check is on the
    real paths, so a symlink inside the root that points elsewhere is refused too."""
    if not isinstance(name, str | os.PathLike):
        raise PathOutsideRoot(f"path {name!r} is not a string")
    text = os.fspath(name)
    if not text or "\x00" in text:
        raise PathOutsideRoot(f"path {text!r} is empty or holds a NUL byte")
    if os.path.isabs(text) or ".." in Path(text).parts:
        raise PathOutsideRoot(f"path {text!r} is outside the data root (absolute or '..')")
    path = Path(root) / text
    real_root = os.path.join(os.path.realpath(root), "")
    if not os.path.realpath(path).startswith(real_root):
        raise PathOutsideRoot(f"path {text!r} resolves outside the data root")
    return path
