"""Data, evaluator metrics, claim rules, and one smoke run of the registered experiment."""

import numpy as np
import pytest
import torch

from iclr26.core.experiment import run_experiment
from iclr26.d_ar.config import config_for
from iclr26.d_ar.data import frechet_distance, load_digits_split, random_shift
from iclr26.d_ar.evaluate import unigram_nll
from iclr26.d_ar.experiment import CLAIMS, EXPERIMENT

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_digits_split_is_stratified_and_scaled():
    d = load_digits_split(1500, 0)
    assert d.x_train.shape == (1500, 1, 8, 8) and d.x_test.shape == (297, 1, 8, 8)
    assert float(d.x_train.min()) == -1.0 and float(d.x_train.max()) == 1.0
    counts = torch.bincount(d.y_test, minlength=10)
    assert counts.min() >= 28 and counts.max() <= 31
    with pytest.raises(ValueError):
        load_digits_split(1797)


def test_random_shift_translates_with_background_fill():
    x = torch.full((64, 1, 8, 8), -1.0)
    x[:, 0, 3, 4] = 1.0
    y = random_shift(x, 1, torch.Generator().manual_seed(0))
    pos = torch.nonzero(y[:, 0] == 1.0)[:, 1:]
    assert len(pos) == 64 and (pos - torch.tensor([3, 4])).abs().max() <= 1
    assert len({tuple(p.tolist()) for p in pos}) == 9  # all 9 translations occur
    assert torch.equal(random_shift(x, 0, torch.Generator()), x)


def test_frechet_distance_values():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4000, 3))
    assert abs(frechet_distance(a, a)) < 1e-8
    b = a + np.array([1.0, 2.0, 0.0])
    assert abs(frechet_distance(a, b) - 5.0) < 1e-6  # pure mean shift: ||d mu||^2
    c = a * 2.0  # covariances I and 4I: tr(I + 4I - 2 * 2I) = 3
    assert abs(frechet_distance(a, c) - 3.0) < 0.15


def test_unigram_nll():
    train = torch.tensor([0, 0, 1, 1])
    assert abs(unigram_nll(train, torch.tensor([0]), 2) - np.log(2)) < 1e-9
    assert abs(unigram_nll(train, torch.tensor([2]), 4) - np.log(8)) < 1e-9  # add-one smoothing


def test_claim_rules():
    c1, c2, c3, c4 = CLAIMS
    assert c1.check({"all_exact": True, "mean_dist_strictly_decreasing": True})
    assert not c1.check({"all_exact": False, "mean_dist_strictly_decreasing": True})
    assert c2.check({"ratio_mean": 1.5}) and not c2.check({"ratio_mean": 1.49})
    ok = {"fd_forward": 9.0, "fd_reversed": 10.0, "nll_forward": 1.0, "nll_reversed": 1.1}
    assert c3.check(ok)
    assert not c3.check({**ok, "fd_forward": 9.1})
    assert not c3.check({**ok, "nll_forward": 1.1})
    assert c4.check({"ratio_mean": 0.75}) and not c4.check({"ratio_mean": 0.76})


def test_scales_differ_only_in_sizes():
    small, smoke, paper = config_for("small"), config_for("smoke"), config_for("paper")
    assert small.tokenizer == smoke.tokenizer and small.gpt == smoke.gpt
    assert small.tokenizer.num_all_queries == 16 and small.tokenizer.num_query_groups == 4
    assert small.tokenizer.vq_codebook_size == 64 and small.tok_train.train.steps == 1000
    assert small.ar_train.train.steps == 400 and small.ar_train.batch == 128
    assert paper.eval.cfg_scale == (1.2, 8.0) and paper.gpt.n_layer == 24
    with pytest.raises(ValueError):
        config_for("huge")


def test_smoke_run(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False)
    res = rec.results
    assert [c["name"] for c in res["claims"]] == ["C1", "C2", "C3", "C4"]
    c1 = res["claims"][0]
    assert c1["passed"] and c1["measured"]["all_exact"]  # exact by construction, whatever the training
    seed = res["metrics"]["per_seed"][0]
    assert set(seed["orders"]) == {"forward", "reversed"}
    assert len(seed["orders"]["forward"]["nll_per_step"]) == 16
    assert np.isfinite(seed["orders"]["forward"]["fd"]) and np.isfinite(seed["layout"]["ratio"])
    gate = res["metrics"]["competence_gate"]
    assert isinstance(gate["passed"], bool) and len(gate["per_seed"]) == 1
    assert (rec.out_dir / "previews.png").exists() and (rec.out_dir / "layout_control.png").exists()


@pytest.mark.slow
def test_small_claims(tmp_path):
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    claims = {c["name"]: c for c in rec.results["claims"]}
    # C1 (exact decoding-order invariance) holds by construction; the others are measured outcomes (2/4 in
    # the README), so this checks that each is evaluated and reported, not that it passes
    assert claims["C1"]["passed"]
    assert all(isinstance(c["passed"], bool) and c["measured"] for c in claims.values())
