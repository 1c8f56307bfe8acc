"""core.paths.path_inside: a path named by a data file stays inside its root, by name and after symlinks."""

import os

import pytest

from iclr26.core.paths import PathOutsideRoot, path_inside


def test_path_inside_allows_plain_relative_paths_and_refuses_the_rest(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a.png").write_bytes(b"x")
    (tmp_path / "out.png").write_bytes(b"y")
    os.symlink(tmp_path / "out.png", root / "link.png")
    os.symlink(root / "a.png", root / "inner.png")
    assert path_inside(root, "a.png") == root / "a.png"
    assert path_inside(root, "sub/new.png") == root / "sub" / "new.png"  # need not exist
    assert path_inside(root, "inner.png") == root / "inner.png"  # a symlink that stays inside
    for bad, why in [
        ("../out.png", "absolute or '..'"),
        ("sub/../a.png", "absolute or '..'"),  # '..' is refused even when it lands inside
        (str(root / "a.png"), "absolute or '..'"),  # absolute, even inside the root
        ("link.png", "resolves outside"),
        ("", "empty"),
        ("a\x00.png", "NUL"),
        (3, "not a string"),
    ]:
        with pytest.raises(PathOutsideRoot, match=why):
            path_inside(root, bad)
    assert issubclass(PathOutsideRoot, ValueError)
