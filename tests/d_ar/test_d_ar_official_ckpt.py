"""Official D-AR checkpoint layouts the paper path must read: tokenizer *training* checkpoints pickle their config
as an object of the training script's own class (not importable here), and files holding both ``model`` and
``ema`` weights, of which the official evaluation loads ``model``."""

import os
import sys
import types

import pytest
import torch
from test_d_ar_paper import official_dict, official_tiny_cfg

from iclr26.d_ar.paper import PickledRecord, _read, load_tokenizer
from iclr26.d_ar.tokenizer import VQModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _official_model_dict():
    d = official_dict(official_tiny_cfg())
    d.update(head_dim=16)
    d["diff_decoder"].update(repa_layer=1, repa_hidden=16, repa_out_dim=8)
    return d


@pytest.fixture()
def training_ckpt(tmp_path):
    """A checkpoint as the official tokenizer training script writes it: ``config`` is an instance of a class of
    the script's module, plus the optimizer state; the module is gone when the file is read."""
    mod = types.ModuleType("dar_official_train_args")

    class TrainArgs:
        def __init__(self, model, lr):
            self.model, self.lr = model, lr

    TrainArgs.__module__ = mod.__name__
    TrainArgs.__qualname__ = "TrainArgs"
    mod.TrainArgs = TrainArgs
    sys.modules[mod.__name__] = mod
    torch.manual_seed(0)
    tok = VQModel(official_tiny_cfg())
    path = tmp_path / "tokenizer_train_0100000.pt"
    opt = torch.optim.AdamW(tok.parameters())
    torch.save(
        {"config": TrainArgs(_official_model_dict(), 1e-4), "model": tok.state_dict(), "optimizer": opt.state_dict()},
        path,
    )
    del sys.modules[mod.__name__]
    return tok, path


def test_training_checkpoint_with_a_pickled_config_class_loads_without_that_class(training_ckpt):
    tok, path = training_ckpt
    with pytest.raises(Exception):  # noqa: B017 - what every plain load mode does with this file
        torch.load(path, weights_only=True)
    raw = _read(path)
    assert isinstance(raw["config"], PickledRecord)
    assert (raw["config"].module, raw["config"].name) == ("dar_official_train_args", "TrainArgs")
    assert raw["config"].as_dict()["lr"] == 1e-4
    loaded = load_tokenizer(path)
    assert loaded.cfg == official_tiny_cfg()
    codes, eps = torch.randint(0, 16, (2, 4)), torch.randn(2, 3, 16, 16)
    assert torch.equal(loaded.decode_code(codes, eps), tok.eval().decode_code(codes, eps))


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_record_reading_never_calls_a_pickled_callable(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "hostile.pt"
    torch.save({"config": _Payload(marker), "model": {"w": torch.ones(2)}}, path)
    raw = _read(path)
    assert not marker.exists()
    assert isinstance(raw["config"], PickledRecord) and raw["config"].name == "system"
    assert raw["config"].args == (f"touch {marker}",)
    assert torch.equal(raw["model"]["w"], torch.ones(2))
    assert type(raw["config"]) is PickledRecord  # plain data, not an instance of any class from the file
    with pytest.raises(ValueError, match="config"):
        load_tokenizer(path)
    assert not marker.exists()


def test_state_entry_model_is_the_default_and_ema_is_a_flag(tmp_path):
    """The official evaluation loads ``model`` before ``ema``; ``paper.state_entry=ema`` takes the EMA weights."""
    torch.manual_seed(0)
    a = VQModel(official_tiny_cfg())
    torch.manual_seed(1)
    b = VQModel(official_tiny_cfg())
    path = tmp_path / "both.pt"
    torch.save({"config": {"model": _official_model_dict()}, "model": a.state_dict(), "ema": b.state_dict()}, path)
    first = "query_linear.weight"
    assert not torch.equal(a.state_dict()[first], b.state_dict()[first])
    assert torch.equal(load_tokenizer(path).state_dict()[first], a.state_dict()[first])
    assert torch.equal(load_tokenizer(path, prefer_state="ema").state_dict()[first], b.state_dict()[first])
    with pytest.raises(ValueError, match="prefer"):
        load_tokenizer(path, prefer_state="best")
