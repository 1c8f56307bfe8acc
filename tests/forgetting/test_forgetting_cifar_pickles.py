"""load_cifar unpickles CIFAR's python batches only with trust_pickles=True: a payload does not run without it."""

import pickle

import numpy as np
import pytest

from iclr26.core.experiment import ExperimentError, run_experiment
from iclr26.forgetting import load_cifar
from iclr26.forgetting.experiment import EXPERIMENT

MARKER = []


class _Payload:
    """Unpickling this calls ``_ran`` (stands for os.system & co. in a hostile file)."""

    def __reduce__(self):
        return (_ran, ("payload ran",))


def _ran(text):
    MARKER.append(text)
    return {"data": np.zeros((2, 3072), np.uint8), "labels": [0, 1]}


def _hostile_cifar10(root):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for f in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(folder / f, "wb") as fh:
            pickle.dump(_Payload(), fh)
    return root


def test_payload_does_not_run_without_the_opt_in(tmp_path):
    root = _hostile_cifar10(tmp_path / "c10")
    MARKER.clear()
    with pytest.raises(ValueError, match="pickles, which can run code.*trust_pickles=True"):
        load_cifar(root, 2, use_torchvision=False)
    with pytest.raises(ValueError, match="trust_pickles"):
        load_cifar(root, 2)  # the torchvision reader unpickles too
    assert MARKER == []
    with pytest.raises(ExperimentError, match="data.trust_pickles=true"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", options={"data.path": str(root)})
    assert MARKER == []
    # the opt-in is what lets the (official) pickle format load: here the file's code then runs
    data = load_cifar(root, 2, use_torchvision=False, trust_pickles=True)
    assert MARKER and data.x_train.shape == (10, 3, 32, 32)
