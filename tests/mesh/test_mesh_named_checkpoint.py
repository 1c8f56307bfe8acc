"""A registered checkpoint name (``iclr26 models``) works wherever the MeSH path takes a checkpoint folder
(``pythia_config`` / ``load_pythia``, also outside the CLI, e.g. the torchrun script's ``--init-from``); a checkpoint
of another architecture (the registered SmolLM2 is Llama) is refused with a one-line error naming it."""

import pytest
import torch

from iclr26.mesh.pythia import load_pythia, pythia_config


def test_a_registered_name_loads_its_folder(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    from iclr26.core.hf import tiny_random_causal_lm
    from iclr26.mesh.model import passthrough_slots

    ckpt = tmp_path / "neox"
    hf, _ = tiny_random_causal_lm(ckpt, hidden=32, layers=4, heads=2, arch="gpt_neox", max_positions=64)
    monkeypatch.setattr("iclr26.core.checkpoints.local_checkpoint", lambda name: ckpt)
    assert pythia_config("smollm2-135m-instruct", layout="1+1R2+1").d_model == 32
    m = load_pythia("smollm2-135m-instruct", layout="1+1R2+1", scheme="mesh", share_core=False)
    m.routers.set_one_hot(passthrough_slots(2))
    x = torch.randint(0, 259, (1, 6), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(m(x), hf(x).logits, atol=1e-5, rtol=1e-4)


@pytest.mark.real
def test_the_real_llama_checkpoint_is_refused_by_name(smollm2_dir):
    with pytest.raises(ValueError, match="expected a gpt_neox config, got model_type='llama'"):
        pythia_config("smollm2-135m-instruct")
    with pytest.raises(ValueError, match="gpt_neox"):
        load_pythia(str(smollm2_dir))
