"""The typed config: every setting once, reachable with --set, and eval.py's flags taking its defaults."""

import dataclasses

import pytest

from iclr26.core.config import ConfigError, config_docs, flatten, override
from iclr26.core.experiment import resolve_config
from iclr26.daedal.config import PaperConfig, RunConfig, config_for
from iclr26.daedal.eval import parse_args
from iclr26.daedal.experiment import EXPERIMENT
from iclr26.daedal.generate import DaedalConfig
from iclr26.daedal.model import TinyMDMConfig


def test_every_field_is_documented():
    for scale in ("smoke", "small", "paper"):
        cfg = config_for(scale)
        for key, _, _ in flatten(cfg):
            node, *path = [cfg, *key.split(".")]
            for part in path[:-1]:
                node = getattr(node, part)
            assert path[-1] in config_docs(type(node)), key


def test_scales_differ_only_in_sizes():
    smoke, small = config_for("smoke"), config_for("small")
    assert smoke.daedal == dataclasses.replace(small.daedal, max_length=32)
    assert smoke.paper == small.paper == config_for("paper").paper
    assert (smoke.model.d_model, smoke.model.steps, smoke.n_eval, smoke.lengths) == (32, 80, 8, (8, 16))
    assert small.lengths == (8, 24, 48, 80, 128) and small.daedal.max_length == small.model.train_max_canvas
    # TinyMDMConfig's defaults are the model small trains
    assert small.model == TinyMDMConfig() and small.hidden_length_task in small.model.tasks
    # the paper's thresholds at every scale; lengths scaled down below paper scale
    for d in (small.daedal, small.paper.daedal):
        assert (d.tau_high, d.tau_low, d.tau_eos, d.tau_expand) == (0.9, 0.1, 0.5, 0.9)
    assert small.paper.daedal == DaedalConfig() and small.paper.daedal.anchor_length == 16


def test_paper_thresholds_and_flags_reachable_with_set():
    cfg = resolve_config(
        EXPERIMENT,
        "paper",
        {
            "paper.daedal.tau_eos": "0.6",
            "paper.daedal.eos_window": "16",
            "paper.trust_remote_code": "true",
            "paper.self_check": "false",
            "paper.check_atol": "0.5",
            "paper.attention_mask": "false",
            "paper.fixed_length": "256",
            "device": "cuda",  # the runner's own key, not a config field
        },
    )
    p = cfg.paper
    assert (p.daedal.tau_eos, p.daedal.anchor_length, p.fixed_length) == (0.6, 8, 256)
    assert p.trust_remote_code and not p.self_check and not p.attention_mask and p.resolved_check_atol() == 0.5
    with pytest.raises(ConfigError, match="did you mean"):
        resolve_config(EXPERIMENT, "paper", {"paper.tau_eos": "0.6"})
    with pytest.raises(ConfigError):
        resolve_config(EXPERIMENT, "paper", {"paper.method": "beam"})


def test_check_atol_default_follows_dtype():
    assert PaperConfig(dtype="float32").resolved_check_atol() == 1e-3
    assert PaperConfig().resolved_check_atol() == 0.25
    with pytest.raises(ValueError):
        PaperConfig(check_atol=-1.0)


def test_lengths_must_contain_initial_length():
    with pytest.raises(ConfigError, match="initial_length"):
        override(RunConfig(), {"daedal.initial_length": "12"})
    with pytest.raises(ValueError):
        dataclasses.replace(RunConfig(), lengths=())


def test_eval_flags_take_their_defaults_from_the_config(tmp_path):
    cfg, out = parse_args(["--model", "m", "--data", "d.jsonl", "--out", str(tmp_path)])
    assert cfg == PaperConfig(model_path="m", data_path="d.jsonl") and out == tmp_path
    cfg, _ = parse_args(
        [
            *("--model", "m", "--data", "d", "--out", "o", "--tau-high", "0.8", "--eos-anchor", "0"),
            *("--no-attention-mask", "--trust-remote-code", "--no-self-check", "--gen-length", "128"),
            *("--no-block-local", "--eos-conf-mode", "window_mean", "--method", "fixed"),
        ]
    )
    d = cfg.daedal
    assert (d.tau_high, d.eos_anchor, d.anchor_length, d.block_local, d.eos_conf_mode) == (
        0.8,
        0,
        0,
        False,
        "window_mean",
    )
    assert not cfg.attention_mask and cfg.trust_remote_code and not cfg.self_check
    assert (cfg.fixed_length, cfg.method) == (128, "fixed")


def test_eval_rejects_bad_input(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--model", "m", "--data", "d", "--out", "o", "--tau-high", "high"])
    assert "tau_high" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--data", "d", "--out", "o"])
    assert "--model is required" in capsys.readouterr().err
