"""The registered experiment: a smoke run end to end, the claims' rules, and the small claim run (slow)."""

import json

import pytest

from iclr26.core.experiment import run_experiment
from iclr26.rosetta.experiment import CLAIMS, EXPERIMENT

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_smoke_run(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False)
    res = rec.results
    assert res["slug"] == "rosetta" and [c["name"] for c in res["claims"]] == ["C1", "C2", "C3"]
    m = res["metrics"]
    assert set(m["auroc"]) == {"rosetta", "no_grounding", "no_staging", "no_follow_up", "eureka", "oracle"}
    assert m["auroc"]["oracle"]["mean"] > 0.9  # the intent's own bug-free reward ranks its behaviours first
    assert {r["arm"] for r in m["rl"]} == {"rosetta", "oracle"} and "competence_gate" in m
    lines = (rec.out_dir / "transcript_seed0.jsonl").read_text().splitlines()
    verdicts = [json.loads(x) for x in lines if '"event": "verdict"' in x]
    assert verdicts and all("code" in v and "usable" in v for v in verdicts)


def test_claim_rules():
    c1, c2, c3 = CLAIMS
    assert c1.check({"final_share": 1.0, "draft_share": 0.7, "monotone_share": 1.0})
    assert not c1.check({"final_share": 1.0, "draft_share": 0.85, "monotone_share": 1.0})
    assert not c1.check({"final_share": 0.9, "draft_share": 0.5, "monotone_share": 1.0})
    assert not c1.check({"final_share": 1.0, "draft_share": 0.5, "monotone_share": 0.9})
    assert c2.check({"gate": True, "rosetta": 0.8, "no_staging": 0.5})
    assert not c2.check({"gate": False, "rosetta": 0.8, "no_staging": 0.1})
    assert not c2.check({"gate": True, "rosetta": 0.6, "no_staging": 0.4})
    assert c3.check({"gate": True, "rosetta": 0.7, "eureka": 0.5})
    assert not c3.check({"gate": True, "rosetta": 0.6, "eureka": 0.45})


@pytest.mark.slow
def test_small_claims(tmp_path):
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    assert all(c.passed for c in rec.claims), [(c.name, c.measured) for c in rec.claims]


def test_small_config_trains_the_stated_preference_kinds():
    from iclr26.rosetta.config import config_for
    from iclr26.rosetta.intent import make_preferences

    p = config_for("small").pipeline
    for seed in (0, 7):
        singles = [x for x in make_preferences(16, seed, n_chains=p.n_chains) if x.chain is None][: p.n_preferences]
        kinds = sorted(singles[i].kind for i in p.rl_preferences)
        assert kinds == ["not_that_one", "other_bin", "return_home", "return_home"]
