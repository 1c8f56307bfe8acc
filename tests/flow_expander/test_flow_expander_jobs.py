"""The run as (task, seed) jobs: each job seeds itself, so order and worker processes leave the numbers unchanged."""

import json
from dataclasses import replace

import pytest

from iclr26.core.config import override
from iclr26.core.experiment import run_experiment
from iclr26.flow_expander.adjoint_matching import AMConfig
from iclr26.flow_expander.config import config_for
from iclr26.flow_expander.experiment import EXPERIMENT, run_job
from iclr26.flow_expander.flow import FMConfig


def _tiny():
    cfg = config_for("smoke")
    am = AMConfig(n_traj=16, steps=6, n_datasets=1, grad_steps=2, batch_size=32)
    toy = replace(
        cfg.toy,
        hidden=16,
        depth=1,
        n_data=300,
        fm=FMConfig(steps=5, batch_size=32),
        expand_am=am,
        project_am=am,
        K=1,
        n_eval=200,
        ode_steps=5,
        curve_n=100,
    )
    return replace(cfg, toy=toy)


def test_a_job_gives_the_same_numbers_whatever_ran_before_it():
    cfg = _tiny()
    (m1, s1), rows1 = run_job(("T1", 1), cfg)
    run_job(("T2", 0), cfg)  # consumes the global RNGs in this process
    (m2, s2), rows2 = run_job(("T1", 1), cfg)
    drop = {"seconds"}
    assert {k: {a: b for a, b in v.items() if a not in drop} for k, v in m1.items()} == {
        k: {a: b for a, b in v.items() if a not in drop} for k, v in m2.items()
    }
    assert all((s1[k] == s2[k]).all() for k in s1)
    assert rows1 == rows2 and rows1[0][1] == "seed1/T1_fm"  # log rows recorded in the job, with their series


TINY_SETS = {
    "toy.hidden": "16",
    "toy.depth": "1",
    "toy.n_data": "300",
    "toy.fm.steps": "5",
    "toy.fm.batch_size": "32",
    "toy.K": "1",
    "toy.n_eval": "200",
    "toy.ode_steps": "5",
    "toy.curve_n": "100",
    **{
        f"toy.{o}.{k}": v
        for o in ("expand_am", "project_am")
        for k, v in (("n_traj", "16"), ("steps", "6"), ("n_datasets", "1"), ("grad_steps", "2"), ("batch_size", "32"))
    },
}


def test_run_files_each_job_under_its_own_seed(tmp_path):
    """Per-seed lists in results.json follow --seeds (here 2, 0), each entry the output of that seed's job."""
    rec = run_experiment(EXPERIMENT, "smoke", seeds=(2, 0), out_root=tmp_path, options=TINY_SETS, show_progress=False)
    assert override(config_for("smoke"), TINY_SETS) == _tiny()  # the run used the config the jobs below use
    m = rec.results["metrics"]
    for i, seed in enumerate((2, 0)):
        for tname in ("T1", "T2"):
            (job, _), _ = run_job((tname, seed), _tiny())
            for meth, vals in job.items():
                assert m[tname][meth]["H_kl"][i] == vals["H_kl"] and m[tname][meth]["validity"][i] == vals["validity"]


def _metrics(rec):
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k != "seconds"}
        return x

    return strip(rec.results["metrics"]), (rec.out_dir / "metrics.jsonl").read_text()


@pytest.mark.slow
def test_worker_processes_do_not_change_the_numbers(tmp_path):
    """workers=2 (spawned processes) and workers=1 (in-process): identical metrics and metrics.jsonl."""
    opts = {"toy.K": "1", "toy.fm.steps": "20", "toy.n_data": "500", "toy.n_eval": "300", "toy.curve_n": "100"}
    one = run_experiment(
        EXPERIMENT,
        "smoke",
        seeds=(0, 1),
        out_root=tmp_path / "a",
        options={**opts, "workers": "1"},
        show_progress=False,
    )
    two = run_experiment(
        EXPERIMENT,
        "smoke",
        seeds=(0, 1),
        out_root=tmp_path / "b",
        options={**opts, "workers": "2"},
        show_progress=False,
    )
    assert _metrics(one) == _metrics(two)
    assert json.loads((two.out_dir / "config.json").read_text())["config"]["workers"] == 2
