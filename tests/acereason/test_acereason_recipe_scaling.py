"""The stage table as data, its verl overrides, and the SFT scaling regression."""

import numpy as np
import pytest

from iclr26.acereason.recipe import VERL_KEYS, AceReasonRecipe, to_verl_overrides
from iclr26.acereason.scaling import sft_scaling_regression


def test_stage_table_values():
    rec = AceReasonRecipe()
    math = [s for s in rec.stages if s.domain == "math"]
    code = [s for s in rec.stages if s.domain == "code"]
    assert [s.max_response_length for s in math] == [8192, 16384, 24576, 32768]
    assert [s.max_response_length for s in code] == [24576, 32768]
    assert [s.name for s in rec.stages][-1] == "math-32k" and rec.stages[-1].domain == "math"
    assert [s.group_size for s in math] == [8, 16, 16, 16]  # G = 8 only at 8K
    assert [s.overlong_filter for s in rec.stages] == [True] * 5 + [False]  # off only at the end
    assert {s.lr for s in math} == {1e-6} and {s.lr for s in code} == {5e-6}
    assert rec.eval_temperature == 0.6 and rec.entropy_target == 0.3 and rec.ppo_epochs == 1
    assert rec.stage("math-24k").prompt_filter == "pass_rate<=6/16"
    with pytest.raises(KeyError):
        rec.stage("math-64k")


def test_verl_overrides_use_recorded_keys_and_the_calibrated_temperature():
    rec = AceReasonRecipe()
    ov = to_verl_overrides(rec, "math-16k", 0.85, model_path="/m", train_files="/d.parquet", reward_path="/r.py")
    kv = dict(o.split("=", 1) for o in ov)
    assert set(kv) <= set(VERL_KEYS)
    assert kv["actor_rollout_ref.rollout.temperature"] == "0.85"
    assert kv["actor_rollout_ref.rollout.n"] == "16" and kv["data.max_response_length"] == "16384"
    assert kv["actor_rollout_ref.actor.ppo_epochs"] == "1"
    assert kv["actor_rollout_ref.actor.ppo_mini_batch_size"] == kv["data.train_batch_size"] == "128"
    assert kv["actor_rollout_ref.actor.use_kl_loss"] == "False" and kv["algorithm.use_kl_in_reward"] == "False"
    assert kv["actor_rollout_ref.actor.entropy_coeff"] == "0"
    assert kv["actor_rollout_ref.actor.loss_agg_mode"] == "token-mean"
    assert kv["algorithm.adv_estimator"] == "grpo"
    assert kv["actor_rollout_ref.rollout.val_kwargs.temperature"] == "0.6"
    assert kv["actor_rollout_ref.actor.optim.lr"] == "1e-06"
    code = dict(o.split("=", 1) for o in to_verl_overrides(rec, "code-24k", 1.0))
    assert code["actor_rollout_ref.actor.optim.lr"] == "5e-06" and code["actor_rollout_ref.rollout.n"] == "8"
    assert "actor_rollout_ref.model.path" not in code
    with pytest.raises(ValueError):
        to_verl_overrides(rec, "math-8k", 0.0)


def test_regression_recovers_known_coefficients():
    n = np.array([36, 72, 144, 288, 288, 576, 576]) * 1000.0
    r = np.array([1, 1, 1, 1, 2, 2, 4], dtype=float)
    x, y = np.log2(n), np.log2(r)
    xs, ys = (x - x.mean()) / x.std(), (y - y.mean()) / y.std()
    z = 4.831 * xs + 2.635 * ys + 50.0
    fit = sft_scaling_regression(list(zip(n, r, z, strict=True)))
    assert fit.a == pytest.approx(4.831, abs=1e-9) and fit.b == pytest.approx(2.635, abs=1e-9)
    assert fit.c == pytest.approx(50.0, abs=1e-9) and fit.r2 == pytest.approx(1.0)
    noisy = z + np.array([0.5, -0.5, 0.3, -0.2, 0.1, 0.4, -0.6])
    f2 = sft_scaling_regression(list(zip(n, r, noisy, strict=True)))
    assert 0.9 < f2.r2 < 1.0
    with pytest.raises(ValueError):
        sft_scaling_regression([(1, 1, 1.0)] * 5)  # constant regressors
