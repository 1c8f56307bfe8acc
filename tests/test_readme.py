"""The top-level README's Python quickstart runs as written (docs that work)."""

import json
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _quickstart_source() -> str:
    text = README.read_text()
    section = text.split("## Quickstart in Python", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, "the Quickstart section has no ```python block"
    return blocks[0]


def test_readme_quickstart_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exec(compile(_quickstart_source(), "README.md:quickstart", "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out
    assert "fit.lr" in printed  # the config tree was printed with its documentation
    runs = list((tmp_path / "runs").rglob("config.json"))
    assert len(runs) == 1
    cfg = json.loads(runs[0].read_text())
    # the keyword override reached the resolved config that the run recorded
    assert "0.002" in json.dumps(cfg)


def test_readme_cli_commands_name_real_options():
    from iclr26.cli import build_parser

    text = README.read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for cmd, sp in sub.choices.items():
        known = {opt for a in sp._actions for opt in a.option_strings}
        for line in re.findall(rf"^iclr26 {cmd} .*$", text, flags=re.M):
            for opt in re.findall(r"--[a-z][a-z-]*", line):
                assert opt in known, f"README names `iclr26 {cmd} {opt}`, which the CLI does not have"


# Internal process notes a reader of the repository cannot use: lock files of the machine that ran the
# numbers, paths outside the repository, the names of who ran what.
_PROCESS_NOTE = re.compile(r"flock |iclr26-heavy|/tmp/iclr26|\.\./shared|/work/shared|\bhelper-\d+|spec section", re.I)


def test_readmes_hold_no_internal_process_notes():
    root = README.parent
    offenders = []
    for path in [README, *sorted((root / "src" / "iclr26").glob("*/README.md"))]:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _PROCESS_NOTE.search(line):
                offenders.append(f"{path.relative_to(root)}:{n}: {line.strip()[:100]}")
    assert not offenders, "\n".join(offenders)
