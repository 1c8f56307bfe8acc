"""Typed run config: overrides, type checks, typo suggestions, provenance, per-step logs."""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
import torch

from iclr26.core.config import ConfigError, config_docs, config_to_dict, flatten, format_config, override, parse_value
from iclr26.core.experiment import RunContext
from iclr26.core.train import TrainConfig, fit, load_checkpoint


@dataclass(frozen=True)
class Inner:
    """Inner settings.

    tau (τ): a temperature.
    mode: which branch.
    """

    tau: float = 0.5
    mode: Literal["paper", "official"] = "paper"
    sizes: tuple[int, ...] = (8, 16)
    path: str | None = None


@dataclass(frozen=True)
class Root:
    """Root.

    inner: the inner block.
    steps: optimiser steps.
    flag: a switch.
    """

    inner: Inner = field(default_factory=Inner)
    steps: int = 10
    flag: bool = False


def test_override_parses_each_type_and_leaves_the_original_alone():
    cfg = Root()
    new = override(
        cfg,
        {
            "inner.tau": "0.25",
            "inner.mode": "official",
            "inner.sizes": "4,5,6",
            "inner.path": "none",
            "steps": "7",
            "flag": "true",
        },
    )
    assert new.inner == Inner(0.25, "official", (4, 5, 6), None)
    assert new.steps == 7 and new.flag is True
    assert cfg == Root()
    assert override(cfg, {"inner.sizes": "[1, 2]"}).inner.sizes == (1, 2)
    assert override(cfg, {"inner.path": "/x"}).inner.path == "/x"


@pytest.mark.parametrize(
    "key,value,needle",
    [
        ("inner.tua", "1", "did you mean inner.tau"),
        ("tau", "1", "inner.tau"),
        ("stepz", "1", "did you mean steps"),
        ("inner", "1", "unknown config key 'inner'"),
        ("steps", "1.5", "expected an integer"),
        ("flag", "maybe", "expected a boolean"),
        ("inner.mode", "both", "expected one of paper, official"),
        ("inner.tau", "abc", "expected a number"),
    ],
)
def test_bad_keys_and_values_are_config_errors_naming_the_field(key, value, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        override(Root(), {key: value})


def test_dataclass_validation_becomes_a_config_error():
    with pytest.raises(ConfigError, match="train.steps"):
        override(_WithTrain(), {"train.steps": "0"})


@dataclass(frozen=True)
class _WithTrain:
    """train: optimisation."""

    train: TrainConfig = TrainConfig()


def test_flatten_docs_and_format():
    keys = [k for k, _, _ in flatten(Root())]
    assert keys == ["inner.tau", "inner.mode", "inner.sizes", "inner.path", "steps", "flag"]
    assert config_docs(Inner)["tau"] == "a temperature."
    text = format_config(Root())
    assert "inner.tau = 0.5" in text and "# a temperature." in text and "steps = 10" in text
    assert config_to_dict(Root())["inner"]["sizes"] == [8, 16]


def test_parse_value_rejects_bool_for_int():
    with pytest.raises(ValueError):
        parse_value(True, int)


def test_ctx_log_writes_jsonl_and_fit_logs_grad_norm_lr_and_loss_fn_metrics(tmp_path):
    ctx = RunContext(scale="smoke", seeds=(0,), out_dir=tmp_path, show_progress=False)
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)

    def loss_fn(m, b):
        loss = ((m(b[0]) - b[1]) ** 2).mean()
        return loss, {"abs_err": (m(b[0]) - b[1]).abs().mean().detach()}

    def get_batch(step, rank, world):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(16, 2, generator=g)
        return x, x.sum(1, keepdim=True)

    cfg = TrainConfig(steps=20, lr=0.05, warmup_steps=2, log_every=5, progress=False, grad_clip=0.0)
    res = fit(model, loss_fn, get_batch, cfg, log=ctx.logger("seed0"))
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [5, 10, 15, 20]
    assert all(r["series"] == "seed0" for r in rows)
    first = rows[0]
    assert set(first) >= {"loss", "lr", "grad_norm", "abs_err"}
    assert first["loss"] == pytest.approx(res.losses[4])
    assert first["grad_norm"] > 0
    # lr logged at step 5 is the schedule's value for the 5th step (index 4)
    from iclr26.core.train import lr_at

    assert first["lr"] == pytest.approx(lr_at(4, cfg))
    ctx.log(3, series="x", acc=float("nan"), n=2)
    last = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert last == {"series": "x", "step": 3, "acc": "nan", "n": 2}


def test_checkpoint_loading_is_weights_only_and_refuses_a_different_config(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    cfg = TrainConfig(steps=4, lr=0.01, warmup_steps=1, progress=False)

    def get_batch(step, rank, world):
        return torch.ones(4, 2), torch.ones(4, 1)

    fit(model, lambda m, b: ((m(b[0]) - b[1]) ** 2).mean(), get_batch, cfg, ckpt_dir=tmp_path)
    ckpt = tmp_path / "checkpoint.pt"
    assert load_checkpoint(ckpt, cfg)["step"] == 4
    # a cosmetic difference is fine, an optimisation difference is refused with the field named
    load_checkpoint(ckpt, TrainConfig(steps=4, lr=0.01, warmup_steps=1, progress=True, log_every=1))
    with pytest.raises(ValueError, match="lr: checkpoint 0.01 vs now 0.02"):
        fit(
            model,
            lambda m, b: ((m(b[0]) - b[1]) ** 2).mean(),
            get_batch,
            TrainConfig(steps=4, lr=0.02, warmup_steps=1, progress=False),
            ckpt_dir=tmp_path,
        )
    # a checkpoint carrying an arbitrary object is refused without running anything
    evil = tmp_path / "evil"
    evil.mkdir()
    torch.save({"model": {}, "x": Path("/etc")}, evil / "checkpoint.pt")
    with pytest.raises(ValueError, match="not a checkpoint"):
        load_checkpoint(evil / "checkpoint.pt")


def test_secrets_never_reach_config_json(tmp_path):
    """An API key given with --set is used by the run but recorded as <redacted> (config tree, options, argv)."""
    import json
    from dataclasses import dataclass

    from iclr26.core.experiment import REDACTED, Experiment, RunOutput, redact, run_experiment

    @dataclass(frozen=True)
    class Remote:
        """remote.

        api_key: the key.
        tokens: a token-id file (a path, not a secret).
        """

        api_key: str = ""
        tokens: str = ""

    @dataclass(frozen=True)
    class Root:
        """root.

        remote: endpoint.
        """

        remote: Remote = Remote()

    seen = {}

    def run(ctx):
        seen["key"] = ctx.cfg.remote.api_key
        return RunOutput(metrics={}, measured={})

    exp = Experiment(slug="secret_toy", title="t", arxiv="", claims=(), run=run, config=lambda s: Root())
    argv = ["iclr26", "run", "secret_toy", "--set", "remote.api_key=sk-live-123", "--set", "remote.tokens=/d/t.npy"]
    rec = run_experiment(
        exp,
        "smoke",
        [0],
        tmp_path,
        {"remote.api_key": "sk-live-123", "remote.tokens": "/d/t.npy"},
        show_progress=False,
        argv=argv,
    )
    assert seen["key"] == "sk-live-123"  # the run itself gets the key
    text = (rec.out_dir / "config.json").read_text()
    assert "sk-live-123" not in text
    cfg = json.loads(text)
    assert cfg["config"]["remote"] == {"api_key": REDACTED, "tokens": "/d/t.npy"}
    assert cfg["options"]["remote.api_key"] == REDACTED and cfg["options"]["remote.tokens"] == "/d/t.npy"
    assert (
        "remote.api_key=" + REDACTED in cfg["provenance"]["argv"]
        and "remote.tokens=/d/t.npy" in cfg["provenance"]["argv"]
    )
    assert redact({"hf_token": "x", "max_tokens": 5, "password": "", "nested": {"secret": 1}}) == {
        "hf_token": REDACTED,
        "max_tokens": 5,
        "password": "",
        "nested": {"secret": REDACTED},
    }
