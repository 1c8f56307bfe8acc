"""The typed config: every field documented, scales differ only where config_for says, settings reach the run."""

import dataclasses

import pytest

from iclr26.core.config import config_docs, flatten
from iclr26.core.experiment import ExperimentError, resolve_config
from iclr26.infgen.config import RunConfig, check_config, config_for
from iclr26.infgen.experiment import EXPERIMENT, build


def _nodes(cfg):
    yield cfg
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if dataclasses.is_dataclass(v):
            yield from _nodes(v)


@pytest.mark.parametrize("scale", ["smoke", "small", "paper"])
def test_every_field_has_a_doc_line(scale):
    cfg = config_for(scale)
    for node in _nodes(cfg):
        docs = config_docs(type(node))
        missing = [f.name for f in dataclasses.fields(node) if f.name not in docs]
        assert not missing, f"{type(node).__name__}: undocumented {missing}"
    check_config(cfg)  # every scale's tree is consistent as shipped


def test_scales():
    small, smoke, paper = config_for("small"), config_for("smoke"), config_for("paper")
    assert small == RunConfig()
    assert (smoke.motion.n_bins, smoke.model.n_actions, smoke.train.steps) == (13, 169, 6)
    assert (paper.model.d_model, paper.model.n_slots, paper.train.lr, paper.rollout.max_agents) == (128, 128, 3e-4, 120)
    assert not small.motion.clamp_speed  # the official kinematics by default


def test_clamp_speed_reaches_the_tokenizer():
    cfg = resolve_config(EXPERIMENT, "smoke", {"motion.clamp_speed": "true"})
    assert cfg.motion.clamp_speed
    tok, model = build(cfg, 0)
    assert tok.motion.clamp_speed and tok.n_slots == model.cfg.n_slots == cfg.model.n_slots
    assert not build(config_for("smoke"), 0)[0].motion.clamp_speed


def test_inconsistent_settings_are_clear_errors():
    cfg = config_for("smoke")
    with pytest.raises(ExperimentError, match="n_bins"):
        check_config(dataclasses.replace(cfg, motion=dataclasses.replace(cfg.motion, n_bins=15)))
    with pytest.raises(ExperimentError, match="warmup"):
        check_config(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, warmup_steps=7)))
    with pytest.raises(ExperimentError, match="eval_from"):
        check_config(dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, eval_from=40)))
    keys = {k for k, _, _ in flatten(cfg)}
    assert {"motion.clamp_speed", "model.official_residual", "paper.data_dir", "threads"} <= keys
