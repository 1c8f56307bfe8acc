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
    assert set(names) == {"C1", "C2", "C3"}
    for c in (names["C1"], names["C2"]):
        assert c["measured"] is not None and "error" not in c
    assert names["C3"]["measured"] is None and not names["C3"]["passed"]  # smoke runs T1 + T2 only
    m = res["metrics"]
    assert set(m["T1"]) == {"PRE", "CONSTR", "S-MEME", "NSE", "G-FE"}
    assert set(m["T2"]) == {"PRE", "FDC", "NSE", "L-FE"}
    for task in ("T1", "T2"):
        for meth in m[task].values():
            assert all(np.isfinite(meth["H_kl"])) and all(0 <= v <= 1 for v in meth["validity"])
    assert (rec.out_dir / "samples_T1.png").exists() and (rec.out_dir / "samples_T2.png").exists()


def _tiny_conformer_sets(path):
    return {
        "t3.conformers": str(path),
        "t3.validity": "mindist",
        "t3.fm.steps": "20",
        "t3.K": "1",
        "t3.n_eval": "40",
        "t3.vendi_n": "40",
        "t3.hidden": "32",
        "t3.threads": "1",
        "t3.dihedral": "0,1,2,3",
        "t3.am.n_traj": "16",
        "t3.am.steps": "8",
        "t3.am.n_datasets": "1",
        "t3.am.grad_steps": "2",
    }


def test_paper_path_on_tiny_local_conformers(tmp_path):
    """The paper-scale code path (local conformers, positions-only FM, FDC/NSE/L-FE), min-distance validity."""
    rng = np.random.default_rng(0)
    base = np.array([[0, 0, 0], [1.4, 0, 0], [2.1, 1.2, 0], [-0.7, 1.2, 0.1]], dtype=float)
    conf = base[None] + 0.05 * rng.normal(size=(64, 4, 3))
    path = tmp_path / "conf.npy"
    np.save(path, conf)
    rec = run_experiment(
        EXPERIMENT, "paper", out_root=tmp_path, options=_tiny_conformer_sets(path), show_progress=False
    )
    summ = rec.results["metrics"]["T3_summary"]
    assert set(summ) == {"PRE", "FDC", "NSE", "L-FE"}
    assert all(1.0 <= s["vendi"]["mean"] <= 40 for s in summ.values())
    claims = {c["name"]: c for c in rec.results["claims"]}
    assert claims["C3"]["measured"] is not None and claims["C1"]["measured"] is None
    cfg = json.loads((rec.out_dir / "config.json").read_text())["config"]
    assert cfg["t3"]["conformers"] == str(path) and cfg["task"] == "t3"


def test_bad_options_raise_one_line_errors(tmp_path):
    from iclr26.core.config import ConfigError

    with pytest.raises(ConfigError):
        run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, options={"task": "t9"}, show_progress=False)
    with pytest.raises(ConfigError):
        run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, options={"t1.g_fe.etaa": "1"}, show_progress=False)
    with pytest.raises(ExperimentError, match="device=nodevice"):
        run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, options={"device": "nodevice"}, show_progress=False)
    with pytest.raises(ExperimentError, match="no paper scale"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path, options={"task": "toys"}, show_progress=False)
    with pytest.raises(ExperimentError, match="t3.conformers"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path, show_progress=False)
    missing = {"t3.conformers": str(tmp_path / "none.npy")}
    with pytest.raises(ExperimentError, match="no such file"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path, options=missing, show_progress=False)
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((3, 2)))
    with pytest.raises(ExperimentError, match="expected an array"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path, options=_tiny_conformer_sets(bad), show_progress=False)


def test_config_tree_and_method_settings():
    """One tree per scale; --set keys reach the FEConfig each method runs with."""
    from iclr26.core.config import override
    from iclr26.flow_expander.config import config_for
    from iclr26.flow_expander.experiment import T1_NAMES, T2_NAMES, toy_methods

    small, smoke = config_for("small"), config_for("smoke")
    assert small.task == "all" and smoke.task == "toys" and config_for("paper").task == "t3"
    assert smoke.toy.K < small.toy.K and smoke.t1 == small.t1 and smoke.t2 == small.t2
    cfg = override(small, {"t1.g_fe.eta": "2.5", "toy.projection_anchor": "previous", "toy.K": "3"})
    m = toy_methods(cfg.t1, T1_NAMES, cfg.toy)
    assert m["G-FE"].eta == 2.5 and m["G-FE"].K == 3 and m["G-FE"].projection_anchor == "previous"
    assert m["S-MEME"].traj is False and m["S-MEME"].eta == 0 and m["CONSTR"].gamma == 0
    m2 = toy_methods(small.t2, T2_NAMES, small.toy)
    assert m2["L-FE"].beta == 0.5 and m2["FDC"].traj is False and m2["NSE"].eta == 0


@pytest.mark.slow
def test_small_scale_claims(tmp_path):
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    assert {c.name for c in rec.claims} == {"C1", "C2", "C3"}
    assert rec.results["wall_seconds"] < 900


def test_t3_smoke_runs_with_rdkit_or_gives_the_install_hint(tmp_path):
    """T3 end to end at smoke size: RDKit torsion-driven conformers, RDKit validity, Vendi, claim C3."""
    try:
        import rdkit  # noqa: F401
    except ImportError:
        with pytest.raises(ExperimentError, match=r"iclr26\[chem\]"):
            run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, options={"task": "t3"}, show_progress=False)
        return
    rec = run_experiment(
        EXPERIMENT, "smoke", seeds=(0,), out_root=tmp_path, options={"task": "t3"}, show_progress=False
    )
    m = rec.results["metrics"]
    data = m["T3"]["data"]
    assert data["n"] == [100] and 30.0 <= data["dihedral_min"][0] < data["dihedral_max"][0] <= 90.0
    assert data["dihedral_max"][0] - data["dihedral_min"][0] > 40.0  # the data fill the g+ range
    assert set(m["T3_summary"]) == {"PRE", "FDC", "NSE", "L-FE"}
    for s in m["T3_summary"].values():
        assert 0.0 <= s["validity"]["mean"] <= 1.0 and s["vendi"]["mean"] >= 1.0
    claims = {c["name"]: c for c in rec.results["claims"]}
    assert claims["C3"]["measured"] is not None and "error" not in claims["C3"]


def test_t3_without_rdkit_is_a_one_line_error(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "rdkit", None)
    with pytest.raises(ExperimentError, match=r"iclr26\[chem\]"):
        run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, options={"task": "t3"}, show_progress=False)
