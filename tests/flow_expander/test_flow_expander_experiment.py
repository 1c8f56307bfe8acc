"""The registered experiment: smoke scale end to end, the conformer/paper path on tiny local files."""

import json

import numpy as np
import pytest

from iclr26.core.experiment import ExperimentError, run_experiment
from iclr26.flow_expander.experiment import EXPERIMENT


def test_smoke_scale_end_to_end(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    names = {c["name"]: c for c in res["claims"]}
    assert set(names) == {"C1", "C2"}
    for c in names.values():
        assert c["measured"] is not None and "error" not in c
    m = res["metrics"]
    assert set(m["T1"]) == {"PRE", "CONSTR", "S-MEME", "NSE", "G-FE"}
    assert set(m["T2"]) == {"PRE", "FDC", "NSE", "L-FE"}
    for task in ("T1", "T2"):
        for meth in m[task].values():
            assert all(np.isfinite(meth["H_kl"])) and all(0 <= v <= 1 for v in meth["validity"])
    assert (rec.out_dir / "samples_T1.png").exists() and (rec.out_dir / "samples_T2.png").exists()


def test_paper_path_on_tiny_local_conformers(tmp_path):
    """The paper-scale code path (local conformers, positions-only FM, FDC/NSE/L-FE), min-distance validity."""
    rng = np.random.default_rng(0)
    base = np.array([[0, 0, 0], [1.4, 0, 0], [2.1, 1.2, 0], [-0.7, 1.2, 0.1]], dtype=float)
    conf = base[None] + 0.05 * rng.normal(size=(64, 4, 3))
    path = tmp_path / "conf.npy"
    np.save(path, conf)
    opts = {"conformers": str(path), "validity": "mindist", "fm_steps": "20", "K": "1", "n_eval": "40",
            "hidden": "32", "threads": "1", "am_traj": "16", "am_steps": "8", "am_datasets": "1",
            "am_grad_steps": "2"}
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path, options=opts, show_progress=False)
    summ = rec.results["metrics"]["conformer_summary"]
    assert set(summ) == {"PRE", "FDC", "NSE", "L-FE"}
    assert all(1.0 <= s["vendi"]["mean"] <= 40 for s in summ.values())
    assert all(not c["passed"] for c in rec.results["claims"])  # C1/C2 are not measured here


def test_bad_options_raise_one_line_errors(tmp_path):
    with pytest.raises(ExperimentError):
        run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, options={"task": "t9"}, show_progress=False)
    with pytest.raises(ExperimentError):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path, options={"task": "toys"}, show_progress=False)
    with pytest.raises(ExperimentError):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path, options={"conformers": str(tmp_path / "none.npy")},
                       show_progress=False)
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((3, 2)))
    with pytest.raises(ExperimentError):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path, options={"conformers": str(bad), "validity": "mindist"},
                       show_progress=False)


@pytest.mark.slow
def test_small_scale_claims(tmp_path):
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    assert {c.name for c in rec.claims} == {"C1", "C2"}
    assert rec.results["wall_seconds"] < 900


def test_t3_without_rdkit_is_a_one_line_error(tmp_path):
    try:
        import rdkit  # noqa: F401
    except ImportError:
        with pytest.raises(ExperimentError, match=r"iclr26\[chem\]"):
            run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, options={"task": "t3"}, show_progress=False)
    else:
        pytest.skip("rdkit is installed")
