"""A host folder kept inside the sandbox's work dir (kernel mode keeps import paths under /tmp visible, read-only,
inside the private /tmp) is not the sandbox's own: open() of a file there is refused, as for any host file, while
the rest of the work dir stays the sandbox's. This is what a clone of the project under /tmp exercises."""

import os

import pytest

from iclr26.core.sandbox_child import _Jail, _SandboxError


def test_host_folder_inside_the_work_dir_is_not_the_sandboxs(tmp_path):
    lib = tmp_path / "clone" / "src"
    lib.mkdir(parents=True)
    (lib / "secret.py").write_text("SECRET = 1\n")
    jail = _Jail(frozenset(), str(tmp_path), (str(lib),))
    assert jail.in_workdir(os.path.realpath(tmp_path / "scratch.txt"))
    assert jail.in_workdir(os.path.realpath(tmp_path / "clone" / "notes.txt"))  # beside the kept folder: ours
    assert not jail.in_workdir(os.path.realpath(lib / "secret.py"))
    assert not jail.in_workdir(os.path.realpath(lib))
    assert jail.in_workdir(os.path.realpath(tmp_path / "clone" / "srcx" / "a.txt"))  # a prefix is not a parent
    with pytest.raises(_SandboxError, match="outside the sandbox"):
        jail.open_(str(lib / "secret.py"))
    jail.open_(str(tmp_path / "scratch.txt"), "w").close()


def test_no_kept_folder_leaves_the_work_dir_whole(tmp_path):
    jail = _Jail(frozenset(), str(tmp_path), ("/usr/lib",))
    assert jail.host_roots == ()
    assert jail.in_workdir(os.path.realpath(tmp_path / "a" / "b.txt"))
