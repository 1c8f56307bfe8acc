"""Range checks of ``--set`` values (counts, sizes, probabilities), generic over every paper's config."""

import dataclasses
import math
import re
from dataclasses import dataclass, field

import pytest

from iclr26.cli import main
from iclr26.core.config import ConfigError, _hints, field_range, override


@dataclass(frozen=True)
class Fit:
    """Toy settings named like the papers' fields.

    steps: optimiser steps.
    batch_size: rows per step.
    p_drop: a probability.
    p_mean: a log-normal mean (not a probability).
    buffer_fracs: fractions.
    lr: learning rate (no range by name).
    shift: explicit range.
    offset: opted out.
    n_extra: optional count.
    """

    steps: int = 10
    batch_size: int = 4
    p_drop: float = 0.1
    p_mean: float = -1.2
    buffer_fracs: tuple[float, ...] = (0.0, 0.5)
    lr: float = 1e-3
    shift: int = field(default=2, metadata={"range": (-3, 3)})
    max_len: int = field(default=8, metadata={"range": None})
    n_extra: int | None = None


@dataclass(frozen=True)
class Root:
    """fit: the fit."""

    fit: Fit = Fit()


@pytest.mark.parametrize(
    "key,value,needle",
    [
        ("fit.steps", "-5", ">= 0"),
        ("fit.batch_size", "0", ">= 1"),
        ("fit.p_drop", "1.5", r"in \[0.0, 1.0\]"),
        ("fit.p_drop", "-0.1", r"in \[0.0, 1.0\]"),
        ("fit.p_drop", "nan", r"in \[0.0, 1.0\]"),
        ("fit.buffer_fracs", "0.1,2", r"in \[0.0, 1.0\]"),
        ("fit.shift", "4", r"in \[-3, 3\]"),
        ("fit.n_extra", "-1", ">= 0"),
    ],
)
def test_out_of_range_values_are_config_errors_naming_the_key(key, value, needle):
    with pytest.raises(ConfigError, match=re.escape(f"--set {key}={value}: must be ") + needle):
        override(Root(), {key: value})


def test_in_range_values_and_unranged_fields_pass():
    new = override(
        Root(),
        {
            "fit.steps": "0",
            "fit.batch_size": "1",
            "fit.p_drop": "1",
            "fit.p_mean": "-5",
            "fit.buffer_fracs": "0,1",
            "fit.lr": "-1",
            "fit.shift": "-3",
            "fit.max_len": "-2",
            "fit.n_extra": "none",
        },
    )
    assert (new.fit.steps, new.fit.batch_size, new.fit.p_drop, new.fit.p_mean) == (0, 1, 1.0, -5.0)
    assert (new.fit.shift, new.fit.max_len, new.fit.n_extra) == (-3, -2, None)
    assert math.isclose(new.fit.lr, -1.0)


def _ranged_leaves(cfg, prefix=""):
    hints = _hints(type(cfg))
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            yield from _ranged_leaves(value, f"{prefix}{f.name}.")
        else:
            rng = field_range(f, hints.get(f.name))
            if rng is not None:
                yield f"{prefix}{f.name}", value, rng


def test_every_shipped_config_is_inside_its_ranges_and_ranges_reach_many_papers():
    from iclr26.core.experiment import discover

    papers_with_ranges, bad = set(), []
    for slug, exp in discover().items():
        if exp.config is None:
            continue
        for scale in exp.scales:
            for key, value, (low, high, _) in _ranged_leaves(exp.config(scale)):
                papers_with_ranges.add(slug)
                for v in value if isinstance(value, tuple | list) else (value,):
                    if v is not None and ((low is not None and v < low) or (high is not None and v > high)):
                        bad.append(f"{slug}/{scale}: {key}={value}")
    assert not bad, bad
    assert len(papers_with_ranges) >= 15


@pytest.mark.parametrize(
    "slug,setting,needle",
    [
        ("ncgsb", "fit.steps=-5", ">= 0"),
        ("acereason", "rl.group_size=0", ">= 1"),
        ("vif", "data.p_trust=1.5", r"in \[0.0, 1.0\]"),
        ("rosetta", "standin.runtime_rate=-0.2", r"in \[0.0, 1.0\]"),
        ("d_ar", "gpt.class_dropout_prob=2", r"in \[0.0, 1.0\]"),
    ],
)
def test_cli_exits_2_with_one_line_on_an_out_of_range_set(slug, setting, needle, tmp_path, capsys):
    code = main(["run", slug, "--scale", "smoke", "--out", str(tmp_path), "--no-progress", "--set", setting])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("iclr26: error: --set ")
    assert re.search(f"must be {needle}", err), err
    assert not any(tmp_path.iterdir())  # nothing ran
