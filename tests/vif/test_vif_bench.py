"""The cost benchmark runs and counts ViF's extra passes (no absolute times asserted)."""

import pytest

from iclr26.vif.bench import measure
from iclr26.vif.config import config_for

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_vif_costs_probe_plus_answer_pass():
    out = measure(config_for("smoke"), episodes=4)
    assert out["text"]["flops_per_episode"] > 0
    # probe + reallocated answering pass (+ f, a few relay slots): about twice the text-only turn
    assert 1.8 < out["flops_ratio"] < 2.6
