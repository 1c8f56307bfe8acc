"""The paper path takes a registered checkpoint name (``iclr26 models``) for ``model_path``; a text-only causal LM
(the registered SmolLM2, Llama) is not a VLM and stops the run with a one-line error naming its config class."""

import json

import pytest

from iclr26.core.experiment import ExperimentError, run_experiment
from iclr26.vif.experiment import EXPERIMENT


@pytest.mark.real
def test_a_text_only_checkpoint_is_refused_by_name_in_one_line(smollm2_dir, tmp_path):
    pytest.importorskip("transformers")
    data = tmp_path / "pope.jsonl"
    data.write_text(json.dumps({"question_id": 1, "image": "a.jpg", "text": "Is there a dog?", "label": "no"}) + "\n")
    opts = {"model_path": "smollm2-135m-instruct", "data_path": str(data)}
    with pytest.raises(ExperimentError) as err:
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", show_progress=False, options=opts)
    msg = str(err.value)
    assert msg.startswith(f"cannot load a VLM from {smollm2_dir}") and "LlamaConfig" in msg and "\n" not in msg
