"""The registered experiment: claim rules on crafted values, the smoke run end to end, the small run (slow)."""

import json

import pytest

from iclr26.apt.config import config_for
from iclr26.apt.experiment import CLAIMS, EXPERIMENT
from iclr26.core.experiment import evaluate_claims, run_experiment

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _c2(**kw):
    base = {
        "competence_gate": True,
        "n_seeds": 3,
        "apt_mR@20": 30.0,
        "b0_mR@20": 27.0,
        "apt_R@20": 70.0,
        "b0_R@20": 70.5,
        "seeds_apt_higher": 2,
    }
    return {**base, **kw}


def _c3(**kw):
    return {"competence_gate": True, "n_seeds": 3, "cgp_novel_mR@20": 12.0, "b0_novel_mR@20": 10.0, **kw}


def _verdicts(measured):
    return {r.name: (r.passed, r.error) for r in evaluate_claims(CLAIMS, measured)}


def test_claim_rules():
    v = _verdicts({"C1": {"mi_adapted": 1.71, "mi_frozen": 1.5}, "C2": _c2(), "C3": _c3()})
    assert v["C1"][0] and v["C2"][0] and v["C3"][0]
    v = _verdicts(
        {
            "C1": {"mi_adapted": 1.69, "mi_frozen": 1.5},
            "C2": _c2(**{"apt_mR@20": 28.9}),
            "C3": _c3(**{"cgp_novel_mR@20": 11.9}),
        }
    )
    assert not v["C1"][0] and not v["C2"][0] and not v["C3"][0]
    assert not _verdicts({"C2": _c2(seeds_apt_higher=1)})["C2"][0]  # 2 of 3 seeds needed
    assert not _verdicts({"C2": _c2(**{"apt_R@20": 69.4})})["C2"][0]  # R@20 at most 1 point lower
    gate = _verdicts({"C2": _c2(competence_gate=False), "C3": _c3(competence_gate=False)})
    assert not gate["C2"][0] and "untestable" in gate["C2"][1] and "untestable" in gate["C3"][1]


def test_config_scales():
    small, smoke = config_for("small"), config_for("smoke")
    assert (small.data.n_train, small.data.n_val, small.data.n_test) == (2000, 300, 600)
    assert small.method.prompt_len == 6 and small.method.per_class and small.method.num_basis == 16
    assert smoke.data.n_train < small.data.n_train
    with pytest.raises(ValueError):
        config_for("huge")


def test_smoke_run_end_to_end(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert {c["name"] for c in res["claims"]} == {"C1", "C2", "C3"}
    m = res["metrics"]
    assert "competence_gate" in m and set(m["per_seed"]["0"]["models"]) == {"b0", "apt", "adapter"}
    for r in m["per_seed"]["0"]["models"].values():
        assert 0 <= r["mR@20"] <= r["mR@50"] <= 100 and r["R@10"] <= r["R@20"]
    assert (rec.out_dir / "person_embeddings.png").exists() and (rec.out_dir / "metrics.jsonl").exists()


def test_render_flag_runs_the_rendered_world(tmp_path, capsys):
    from iclr26.core.experiment import ExperimentError

    opts = {"render": "true", "rendering.epochs": "1"}
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False, options=opts)
    m = json.loads((rec.out_dir / "results.json").read_text())["metrics"]
    info = m["per_seed"]["0"]["render"]
    assert info["n_images"] == 230 and 0 <= info["cnn_class_acc"] <= 1 and "render" in m
    assert "CNN detector" in capsys.readouterr().out
    with pytest.raises(ExperimentError, match="not to paper scale"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path, show_progress=False, options={"render": "true"})


@pytest.mark.slow
def test_small_claims(tmp_path):
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert len(res["claims"]) == 3 and "competence_gate" in res["metrics"]
