"""The real scale's steering sweep (no model needed): each alpha adds the probe's raw direction at the probe
layer with strength alpha x the lie-truth separation, lie rate read from the strategic answers against their
twins' answers and accuracy from the twins."""

import numpy as np
import pytest

from iclr26.dishonesty import real_scale, steering
from iclr26.dishonesty.real_scale import RealConfig, steering_sweep


class _Tok:
    def decode(self, row, skip_special_tokens=True):
        return " ".join(str(t) for t in row)


class _Probe:
    def __init__(self, v):
        self.v = v

    def direction(self, kind):
        assert kind == "raw"
        return self.v


class _NoCache:
    def get(self, name, make):
        return make()


def test_steering_strength_is_alpha_times_separation(monkeypatch):
    active: list = []
    seen: list = []

    class Hook:
        def __init__(self, model, layer, v, strength):
            self.args = (layer, v, strength)

        def __enter__(self):
            active.append(self.args)

        def __exit__(self, *exc):
            active.pop()

    def fake_generate(model, tok, prompts, **kw):
        (layer, v, strength) = active[-1]  # generation only happens under the hook
        seen.append((layer, v, strength))
        # strategic answers lie (7 instead of the gold 5) once the strength is positive
        return [[7] if strength > 0 and p == "s" else [5] for p in prompts]

    monkeypatch.setattr(steering, "SteeringHook", Hook)
    monkeypatch.setattr(real_scale, "generate", fake_generate)
    v = np.array([0.6, -0.8])
    cfg = RealConfig(alphas=(-2.0, 0.0, 1.5))
    qs = [{"q": "What is 2 plus 3?", "gold": "5"}]
    P = {"strategic": ["s"], "twin": ["t"]}
    txt = {"twin": ["5"]}
    lie, acc = steering_sweep(None, _Tok(), _Probe(v), 12, 2.5, P, txt, qs, _NoCache(), cfg, {}, seed=0)
    strengths = [s for _, _, s in seen]
    assert strengths == pytest.approx([-5.0, -5.0, 0.0, 0.0, 3.75, 3.75])
    assert all(layer == 12 and w is v for layer, w, _ in seen)
    assert lie == {-2.0: 0.0, 0.0: 0.0, 1.5: 1.0}
    assert acc == {-2.0: 1.0, 0.0: 1.0, 1.5: 1.0}
