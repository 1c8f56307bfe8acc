"""Claim bookkeeping: Δ against the control student, claim rules on hand values, the competence gate."""

import pytest

from iclr26.subliminal.experiment import CLAIMS, CONDITIONS, _gate, _measured, _summaries

RULES = {c.name: c.check for c in CLAIMS}


def _students(p_a, p_b):
    """p_a / p_b: condition -> p(owl) / p(raven) in points, the same for seeds 0 and 1."""
    return {
        (s, name): {"p_A": p_a.get(name, 5.0) + s, "p_B": p_b.get(name, 4.0) + s} for s in (0, 1) for name in CONDITIONS
    }


def _per_seed(agreement=1.0, mismatch=0, ok=True, parse=1.0, frac=0.1):
    one = {
        "agreement": {"A": agreement, "B": 1.0},
        "brute_force_mismatch": {"A": mismatch, "B": 0},
        "partition_ok": {"A": ok, "B": True},
        "parse_rate": {"A": parse, "B": 1.0},
        "div_fraction": {"A": frac},
    }
    return {0: one, 1: one}


def test_delta_is_student_minus_control_per_seed_and_targets_follow_the_teacher():
    summ = _summaries((0, 1), _students({"control": 5.0, "A_all": 9.0, "A_div_only": 8.0}, {"B_all": 3.0}))
    assert summ["A_all"]["delta_per_seed"] == [4.0, 4.0] and summ["A_all"]["target"] == "A"
    assert summ["A_div_only"]["delta"]["mean"] == pytest.approx(3.0)
    assert summ["B_all"]["target"] == "B" and summ["B_all"]["delta"]["mean"] == pytest.approx(-1.0)
    assert summ["control"]["delta"]["mean"] == 0.0


def test_claim_rules_on_hand_values():
    good = _measured(
        _summaries(
            (0, 1),
            _students(
                {"control": 5.0, "A_all": 10.0, "A_div_only": 9.0, "A_without_div": 6.0, "A_random": 9.5},
                {"B_all": 5.0, "B_div_only": 5.0, "B_without_div": 4.5},
            ),
        ),
        _per_seed(),
    )
    assert all(RULES[k](good[k]) for k in ("C1", "C2", "C3", "C4"))
    weak = _measured(_summaries((0, 1), _students({"control": 5.0, "A_all": 7.0}, {})), _per_seed())
    assert not RULES["C2"](weak["C2"])  # Δ = 2 < 3 points
    leaky = _measured(
        _summaries(
            (0, 1),
            _students({"control": 5.0, "A_all": 10.0, "A_div_only": 9.0, "A_without_div": 8.0, "A_random": 9.5}, {}),
        ),
        _per_seed(),
    )
    assert not RULES["C3"](leaky["C3"])  # without-div keeps 60% > 40%
    random_drop = _measured(
        _summaries(
            (0, 1),
            _students({"control": 5.0, "A_all": 10.0, "A_div_only": 9.0, "A_without_div": 6.0, "A_random": 6.0}, {}),
        ),
        _per_seed(),
    )
    assert not RULES["C3"](random_drop["C3"])  # random masking must keep >= 60%
    reversed_b = _measured(
        _summaries((0, 1), _students({}, {"B_all": 5.0, "B_div_only": 4.1, "B_without_div": 4.6})), _per_seed()
    )
    assert not RULES["C4"](reversed_b["C4"])
    assert not RULES["C1"](_measured(_summaries((0, 1), _students({}, {})), _per_seed(agreement=0.998))["C1"])
    assert not RULES["C1"](_measured(_summaries((0, 1), _students({}, {})), _per_seed(mismatch=1))["C1"])
    assert not RULES["C1"](_measured(_summaries((0, 1), _students({}, {})), _per_seed(ok=False))["C1"])


def test_competence_gate():
    info = {"base_persona_following": 0.95, "teacher_A_p_target": 0.9}
    assert _gate(info, _per_seed())["passed"]
    assert not _gate({**info, "base_persona_following": 0.5}, _per_seed())["passed"]
    assert not _gate({**info, "teacher_A_p_target": 0.7}, _per_seed())["passed"]
    assert not _gate(info, _per_seed(parse=0.9))["passed"]
    assert not _gate(info, _per_seed(frac=0.005))["passed"]
    assert not _gate(info, _per_seed(frac=0.6))["passed"]
