import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from iclr26.core.experiment import Claim, evaluate_claims, mean_std, to_jsonable

HERE = Path(__file__).parent
ENV = {
    **os.environ,
    "ICLR26_EXTRA_EXPERIMENTS": "toy_experiment",
    "PYTHONPATH": str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""),
}


def cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "iclr26.cli", *args], capture_output=True, text=True, env=ENV, cwd=cwd, timeout=300
    )


def test_help_on_every_command():
    for args in ([], ["list"], ["run"], ["report"]):
        r = cli(*args, "--help")
        assert r.returncode == 0, r.stderr
        assert "usage: iclr26" in r.stdout


def test_list_shows_toy():
    r = cli("list")
    assert r.returncode == 0, r.stderr
    assert any(line.startswith("toy ") and "C1, C2" in line for line in r.stdout.splitlines())


def test_run_end_to_end_writes_contract(tmp_path):
    r = cli("run", "toy", "--scale", "smoke", "--seeds", "0,1", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "2 claims (not judged at smoke)" in r.stdout
    (run_dir,) = list((tmp_path / "toy").iterdir())
    res = json.loads((run_dir / "results.json").read_text())
    assert set(res) >= {"slug", "scale", "seeds", "wall_seconds", "claims", "metrics"}
    assert res["slug"] == "toy" and res["scale"] == "smoke" and res["seeds"] == [0, 1]
    assert isinstance(res["wall_seconds"], float)
    assert [c["name"] for c in res["claims"]] == ["C1", "C2"]
    assert [c["passed"] for c in res["claims"]] == [True, False]
    for c in res["claims"]:
        assert set(c) >= {"name", "statement", "paper_value", "measured", "rule", "passed"}
    assert len(res["metrics"]["slope_per_seed"]) == 2
    assert (run_dir / "report.md").read_text().count("n/a (smoke)") == 2
    assert (run_dir / "loss.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((run_dir / "config.json").read_text())["seeds"] == [0, 1]
    # same seed, same numbers
    r2 = cli("run", "toy", "--scale", "smoke", "--seeds", "0,1", "--out", str(tmp_path))
    assert r2.returncode == 0
    runs = sorted((tmp_path / "toy").iterdir())
    assert len(runs) == 2
    res2 = json.loads((runs[1] / "results.json").read_text())
    assert res2["metrics"] == res["metrics"]
    # the overview
    rep = cli("report", "--runs", str(tmp_path))
    assert rep.returncode == 0, rep.stderr
    assert "| toy |" in rep.stdout and "1/2" in rep.stdout and "0,1" in rep.stdout
    assert (tmp_path / "overview.md").exists()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["run", "nope"], "valid: "),
        (["run", "toy", "--scale", "huge"], "valid: smoke, small, paper"),
        (["run", "toy", "--seeds", "1,x"], "comma-separated integers"),
        (["run", "toy", "--seeds", "-1"], "non-negative"),
        (["run", "toy", "--set", "novalue"], "KEY=VALUE"),
        (["report", "--runs", "/nonexistent/dir"], "does not exist"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, needle):
    r = cli(*args)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("iclr26: error")]
    assert len(lines) == 1 and needle in lines[0], r.stderr


def test_unwritable_out_dir(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    target = ro / "sub"
    if os.access(ro, os.W_OK):  # root ignores permission bits: use a path under a file instead
        (tmp_path / "afile").write_text("x")
        target = tmp_path / "afile" / "sub"
    r = cli("run", "toy", "--scale", "smoke", "--out", str(target))
    assert r.returncode == 2 and "not writable" in r.stderr


def test_claim_evaluation_rules():
    claims = [
        Claim("A", "s", 1, "x > 0", lambda m: m > 0),
        Claim("B", "s", 1, "x > 0", lambda m: m > 0),
        Claim("C", "s", 1, "boom", lambda m: m["missing"]),
        Claim("D", "s", 1, "x > 0", lambda m: m > 0),
    ]
    res = evaluate_claims(claims, {"A": 1.0, "B": float("nan"), "C": {}})
    assert [r.passed for r in res] == [True, False, False, False]
    assert "NaN" in res[1].error and "KeyError" in res[2].error and "not measured" in res[3].error


def test_mean_std_and_jsonable():
    import numpy as np
    import torch

    s = mean_std([1.0, 2.0, 3.0])
    assert s["mean"] == 2.0 and s["std"] == pytest.approx(1.0) and s["n"] == 3
    assert mean_std([5.0])["std"] == 0.0
    out = to_jsonable({"a": np.float32(0.5), "b": torch.tensor([1, 2]), "c": (np.int64(3),), "d": float("inf")})
    assert out == {"a": 0.5, "b": [1, 2], "c": [3], "d": "inf"}
    json.dumps(out)


def test_every_paper_package_loads():
    """strict discovery: a paper whose experiment module is broken fails here, not silently."""
    from iclr26.core.experiment import discover

    exps = discover(strict=True)
    for slug, exp in exps.items():
        assert exp.claims, f"{slug} registers no claims"
        assert "smoke" in exp.scales and "small" in exp.scales


@pytest.mark.parametrize(
    "args,needle",
    [
        (["run", "toy", "--seeds", str(2**64 + 1)], "at most 2**32-1"),
        (["run", "toy", "--set", "train.lrr=0.1"], "did you mean train.lr"),
        (["run", "toy", "--set", "train.steps=many"], "expected an integer"),
        (["run", "toy", "--set", "slope=1", "--set", "nope=2"], "unknown config key 'nope'"),
    ],
)
def test_bad_inputs_exit_2_without_traceback(args, needle):
    r = cli(*args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("iclr26: error")]
    assert len(lines) == 1 and needle in lines[0], r.stderr


def test_out_slug_being_a_file_is_a_one_line_error(tmp_path):
    (tmp_path / "toy").write_text("not a folder")
    r = cli("run", "toy", "--scale", "smoke", "--out", str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "not a directory" in r.stderr


def test_show_config_prints_the_resolved_tree_and_set_is_applied(tmp_path):
    r = cli("run", "toy", "--scale", "smoke", "--show-config", "--set", "train.lr=0.05")
    assert r.returncode == 0, r.stderr
    assert "train.lr = 0.05" in r.stdout and "train.steps = 150" in r.stdout and "# true slope" not in r.stdout
    assert "slope = 3.0" in r.stdout and "# the true slope of the data." in r.stdout
    r = cli("run", "toy", "--scale", "smoke", "--seeds", "0", "--set", "slope=2", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    (run_dir,) = list((tmp_path / "toy").iterdir())
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["config"]["slope"] == 2.0 and cfg["config"]["train"]["steps"] == 150
    prov = cfg["provenance"]
    assert set(prov) >= {"argv", "python", "torch", "numpy", "iclr26"} and "--set" in prov["argv"]
    res = json.loads((run_dir / "results.json").read_text())
    assert abs(res["metrics"]["slope"]["mean"] - 2.0) < 0.3  # the override reached the run
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {r["series"] for r in rows} == {"seed0"} and all("grad_norm" in r for r in rows)
    assert "curve_loss.png" in res["figures"] and (run_dir / "curve_loss.png").exists()


def test_report_skips_malformed_results_with_a_warning(tmp_path):
    r = cli("run", "toy", "--scale", "smoke", "--seeds", "0", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    for name, text in [("bad1", "{not json"), ("bad2", "[1, 2]"), ("bad3", '{"slug": 3}')]:
        (tmp_path / "toy" / name).mkdir()
        (tmp_path / "toy" / name / "results.json").write_text(text)
    rep = cli("report", "--runs", str(tmp_path), "--html", str(tmp_path / "site"))
    assert rep.returncode == 0, rep.stderr
    assert "Traceback" not in rep.stderr
    warnings = [ln for ln in rep.stderr.splitlines() if ln.startswith("iclr26: warning: skipped")]
    assert len(warnings) == 3 and all("results.json" in w for w in warnings)
    assert "| toy |" in rep.stdout
    index = (tmp_path / "site" / "index.html").read_text()
    assert "toy" in index and "n/a (smoke)" in index


def test_list_is_static_and_matches_discover():
    """`iclr26 list` reads the papers without importing torch or scipy, and agrees with discover()."""
    import subprocess

    code = (
        "import sys; from iclr26.cli import main; main(['list']); "
        "bad = [m for m in ('torch', 'scipy', 'sklearn', 'matplotlib') if m in sys.modules]; "
        "assert not bad, bad"
    )
    env = {k: v for k, v in os.environ.items() if k != "ICLR26_EXTRA_EXPERIMENTS"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    from iclr26.core.experiment import discover
    from iclr26.core.registry import static_index

    entries, warnings = static_index()
    assert not warnings
    exps = {s: e for s, e in discover(strict=True).items() if s != "toy"}
    static = {e.slug: (e.title, e.arxiv, e.claims) for e in entries if e.slug != "toy"}
    assert static == {s: (e.title, e.arxiv, tuple(c.name for c in e.claims)) for s, e in exps.items()}


def test_python_entry_point(tmp_path, monkeypatch):
    import iclr26
    from iclr26.core.config import ConfigError

    monkeypatch.syspath_prepend(str(HERE))
    import toy_experiment  # noqa: F401  (registers "toy")

    rec = iclr26.run("toy", scale="smoke", seeds=[1], out=str(tmp_path), show_progress=False, slope=1.5)
    assert rec.results["seeds"] == [1] and abs(rec.results["metrics"]["slope"]["mean"] - 1.5) < 0.3
    with pytest.raises(ConfigError, match="train.lr"):
        iclr26.run("toy", scale="smoke", out=str(tmp_path), train__lrr=0.1)


def test_distributed_main_runs_one_process_and_rejects_bad_keys(tmp_path, monkeypatch, capsys):
    from iclr26.core.config import ConfigError
    from iclr26.core.experiment import ExperimentError, distributed_main, load_experiment

    monkeypatch.syspath_prepend(str(HERE))
    import toy_experiment  # noqa: F401  (registers "toy")

    assert load_experiment("toy").slug == "toy"
    with pytest.raises(ExperimentError, match="no experiment named"):
        load_experiment("no_such_paper")
    argv = ["--set", "slope=2.0", "--seeds", "3", "--out", str(tmp_path)]
    assert distributed_main("toy", argv, scale="smoke") == 0
    (run_dir,) = (tmp_path / "toy").iterdir()
    assert capsys.readouterr().out.strip().endswith(run_dir.name)
    res = json.loads((run_dir / "results.json").read_text())
    assert res["seeds"] == [3] and abs(res["metrics"]["slope"]["mean"] - 2.0) < 0.3
    with pytest.raises(ConfigError, match="slope"):
        distributed_main("toy", ["--set", "slopee=2.0", "--out", str(tmp_path)], scale="smoke")
    with pytest.raises(SystemExit):
        distributed_main("toy", ["--seeds", "a,b"], scale="smoke")
