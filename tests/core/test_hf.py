"""Tests of iclr26.core.hf: local-only loading, tiny random models, decoder-block lookup. No network."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import iclr26
from iclr26.core import hf

pytest.importorskip("transformers")

TEXT = "Hello wörld! 2+2=4\n\tünïcode 你好  "


@pytest.fixture()
def no_network(monkeypatch):
    """Any socket connection attempt fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args[1:]!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture(scope="module")
def saved_gpt2(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_gpt2")
    model, tok = hf.tiny_random_causal_lm(d, hidden=32, layers=3, heads=2, arch="gpt2", seed=1)
    return d, model, tok


def test_save_and_load_local_same_logits(saved_gpt2, no_network, monkeypatch):
    d, model, tok = saved_gpt2
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded, loaded_tok = hf.load_local(d)
    assert type(loaded).__name__ == "GPT2LMHeadModel"
    assert not loaded.training
    ids = torch.tensor([tok(TEXT)["input_ids"]])
    with torch.no_grad():
        a = model(ids).logits
        b = loaded(ids).logits
    assert a.shape == (1, ids.shape[1], 259)
    torch.testing.assert_close(b, a, rtol=0, atol=1e-6)
    assert loaded_tok(TEXT)["input_ids"] == tok(TEXT)["input_ids"]


def test_load_local_sets_offline_only_during_the_call(saved_gpt2, no_network, monkeypatch):
    import huggingface_hub.constants as hub_constants
    import transformers

    d, _, _ = saved_gpt2
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    hub_before = hub_constants.HF_HUB_OFFLINE
    seen = {}
    original = transformers.AutoModelForCausalLM.from_pretrained

    def spy(path, *args, **kwargs):
        seen.update(env=os.environ.get("HF_HUB_OFFLINE"), hub=hub_constants.HF_HUB_OFFLINE, path=path, **kwargs)
        return original(path, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    hf.load_local_model(d)
    assert seen["env"] == "1" and seen["hub"] is True
    assert seen["local_files_only"] is True
    assert Path(seen["path"]).is_absolute()
    assert "HF_HUB_OFFLINE" not in os.environ and "TRANSFORMERS_OFFLINE" not in os.environ
    assert hub_constants.HF_HUB_OFFLINE == hub_before


def test_tokenizer_round_trip(saved_gpt2, no_network):
    d, _, tok = saved_gpt2
    loaded = hf.load_local_tokenizer(d)
    for t in (tok, loaded):
        ids = t(TEXT)["input_ids"]
        assert len(ids) == len(TEXT.encode("utf-8"))  # one token per byte, no merges
        assert ids[:5] == list(b"Hello")
        assert t.decode(ids) == TEXT
        assert (t.pad_token_id, t.bos_token_id, t.eos_token_id) == (256, 257, 258)
        assert len(t) == 259


def test_tokenizer_only_directory(tmp_path, no_network):
    hf.tiny_byte_tokenizer().save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()
    assert hf.load_local_tokenizer(tmp_path).decode(list(b"abc")) == "abc"
    with pytest.raises(FileNotFoundError, match="config.json"):
        hf.load_local_model(tmp_path)


def test_missing_directory_raises_file_not_found(tmp_path, no_network):
    for path in (tmp_path / "nope", "openai-community/gpt2"):  # the second is a hub id, never fetched
        for fn in (hf.load_local_model, hf.load_local_tokenizer, hf.load_local):
            with pytest.raises(FileNotFoundError, match="nothing is downloaded") as err:
                fn(path)
            msg = str(err.value)
            assert "config.json" in msg and "\n" not in msg


def test_directory_without_config_raises(tmp_path, no_network):
    (tmp_path / "weights.bin").write_bytes(b"\0")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        hf.load_local_model(tmp_path)
    with pytest.raises(FileNotFoundError, match="config.json"):
        hf.load_local(tmp_path)
    with pytest.raises(FileNotFoundError):  # a file, not a directory
        hf.load_local_model(tmp_path / "weights.bin")


def test_missing_transformers_gives_install_hint(saved_gpt2, monkeypatch):
    d, _, _ = saved_gpt2
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"pip install 'iclr26\[hf\]'"):
        hf.load_local_model(d)


def test_module_imports_without_transformers_or_torch():
    src = str(Path(iclr26.__file__).resolve().parents[1])
    code = (
        "import sys; sys.modules['transformers'] = None; sys.modules['torch'] = None; "
        "import iclr26.core.hf as h; print(h.load_local.__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": src},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "load_local"


def test_kind_auto_masked_lm_and_dtype(tmp_path, saved_gpt2, no_network):
    import transformers

    d, _, _ = saved_gpt2
    auto = hf.load_local_model(d, kind="auto", dtype="bfloat16")
    assert type(auto).__name__ == "GPT2LMHeadModel"
    assert next(auto.parameters()).dtype == torch.bfloat16
    cfg = transformers.BertConfig(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    transformers.BertForMaskedLM(cfg).save_pretrained(tmp_path)
    assert type(hf.load_local_model(tmp_path, kind="masked_lm")).__name__ == "BertForMaskedLM"
    assert type(hf.load_local_model(tmp_path, kind="auto")).__name__ == "BertForMaskedLM"
    with pytest.raises(ValueError):
        hf.load_local_model(tmp_path, kind="seq2seq")


@pytest.mark.parametrize(
    ("arch", "layers", "cls"),
    [
        ("gpt2", 3, "GPT2LMHeadModel"),
        ("llama", 2, "LlamaForCausalLM"),
        ("gpt_neox", 4, "GPTNeoXForCausalLM"),
    ],
)
def test_residual_stream_modules(arch, layers, cls):
    model, tok = hf.tiny_random_causal_lm(arch=arch, layers=layers, hidden=16, heads=2)
    assert type(model).__name__ == cls
    blocks = hf.residual_stream_modules(model)
    assert len(blocks) == layers
    # the blocks are the ones the forward pass runs, in order
    calls = []
    handles = [b.register_forward_hook(lambda m, i, o, k=k: calls.append(k)) for k, b in enumerate(blocks)]
    with torch.no_grad():
        model(torch.tensor([tok("abc")["input_ids"]]))
    for h in handles:
        h.remove()
    assert calls == list(range(layers))
    base = model.base_model  # bare GPT2Model / LlamaModel / GPTNeoXModel: h / layers
    assert len(hf.residual_stream_modules(base)) == layers


def test_residual_stream_modules_unknown_model():
    with pytest.raises(ValueError, match="Linear"):
        hf.residual_stream_modules(torch.nn.Linear(2, 2))


def test_tiny_random_causal_lm_seeded_and_rng_untouched():
    state = torch.get_rng_state()
    a, _ = hf.tiny_random_causal_lm(arch="llama", seed=3, hidden=16)
    b, _ = hf.tiny_random_causal_lm(arch="llama", seed=3, hidden=16)
    c, _ = hf.tiny_random_causal_lm(arch="llama", seed=4, hidden=16)
    assert torch.equal(torch.get_rng_state(), state)
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)
    big, _ = hf.tiny_random_causal_lm(vocab_size=300, hidden=16)
    assert big.get_output_embeddings().weight.shape[0] == 300
    with pytest.raises(ValueError):
        hf.tiny_random_causal_lm(vocab_size=100)
    with pytest.raises(ValueError):
        hf.tiny_random_causal_lm(hidden=30, heads=4)


def test_device_map_goes_through_accelerate_with_the_same_logits(saved_gpt2, no_network, monkeypatch):
    pytest.importorskip("accelerate")
    transformers = pytest.importorskip("transformers")
    d, model, tok = saved_gpt2
    seen = []
    real = transformers.AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        seen.append(kwargs.get("device_map"))
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    # with a map, accelerate places the weights and `device` is not used (an invalid one would raise in .to())
    mapped = hf.load_local_model(d, device_map="cpu", device="this-device-is-ignored-with-a-map")
    assert seen == ["cpu"]
    assert not mapped.training
    ids = torch.tensor([tok(TEXT)["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(mapped(ids).logits, model(ids).logits, rtol=0, atol=1e-6)
    hf.load_local_model(d, device_map="none")
    assert seen == ["cpu", None]
