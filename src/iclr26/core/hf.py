"""Hugging Face models and tokenizers from a LOCAL directory only -- nothing is ever downloaded.

Several papers of this project run on small pretrained transformers (e.g. the GRPO papers AT-GRPO,
AceReason and VTool-R1, and the papers that read or steer activations of HF causal LMs through
:func:`residual_stream_modules`). Their code loads weights only from a directory made by
``save_pretrained`` (or fetched by the user beforehand); this module enforces that:

* :func:`load_local_model`, :func:`load_local_tokenizer`, :func:`load_local` check that the path is an
  existing directory with a ``config.json`` (tokenizers: ``tokenizer_config.json`` / ``tokenizer.json``
  also do) and raise :class:`FileNotFoundError` otherwise, always pass ``local_files_only=True`` and run
  with ``HF_HUB_OFFLINE=1`` for the duration of the call.
* :func:`tiny_random_causal_lm` builds a tiny randomly initialised GPT-2 / Llama / GPT-NeoX model and a
  byte-level tokenizer entirely in code, for tests across the project.
* :func:`residual_stream_modules` returns the decoder blocks of common HF causal LMs, for hooks.

``transformers`` is an optional dependency (``pip install 'iclr26[hf]'``); it (and torch) are imported
lazily inside the functions, so this module imports without them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

# offline guard and lazy transformers import live with the checkpoint registry (a name resolves to a folder)
from iclr26.core.checkpoints import _offline, _require_transformers, resolve_model_dir

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = [
    "BYTE_TOKENIZER_SPECIALS",
    "generate_left_padded",
    "left_pad",
    "load_local",
    "load_local_model",
    "load_local_tokenizer",
    "pure_generation_kwargs",
    "residual_stream_modules",
    "tiny_byte_tokenizer",
    "tiny_random_causal_lm",
]

ModelKind = Literal["causal_lm", "masked_lm", "auto"]

_EXPECTED = "a local directory with config.json, e.g. made by save_pretrained; nothing is downloaded"

#: special tokens of :func:`tiny_byte_tokenizer`; they get ids 256, 257, 258 after the 256 byte tokens.
BYTE_TOKENIZER_SPECIALS = ("<|pad|>", "<|bos|>", "<|eos|>")


def _check_dir(path: str | os.PathLike, what: str, accepted: tuple[str, ...] = ("config.json",)) -> Path:
    path = resolve_model_dir(path)  # a registered checkpoint name (e.g. "smollm2-135m-instruct") -> its folder
    p = Path(path).expanduser()
    if not p.is_dir():
        raise FileNotFoundError(f"{what}: {str(path)!r} is not an existing directory; expected {_EXPECTED}")
    if not any((p / name).is_file() for name in accepted):
        raise FileNotFoundError(f"{what}: no {' or '.join(accepted)} in {str(path)!r}; expected {_EXPECTED}")
    return p.resolve()  # absolute, so it can never be read as a hub repo id


def _dtype_kwargs(transformers: Any, dtype: Any) -> dict[str, Any]:
    """``dtype`` is the keyword since transformers 4.56; older versions only know ``torch_dtype``."""
    import torch

    if dtype is None:
        dtype = torch.float32
    elif isinstance(dtype, str) and dtype != "auto":
        resolved = getattr(torch, dtype, None)
        if not isinstance(resolved, torch.dtype):
            raise ValueError(f"unknown dtype {dtype!r} (use a torch.dtype, its name, or 'auto')")
        dtype = resolved
    major, minor = (
        int("".join(c for c in part if c.isdigit()) or 0) for part in transformers.__version__.split(".")[:2]
    )
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    return {key: dtype}


def load_local_model(
    path: str | os.PathLike,
    *,
    kind: ModelKind = "causal_lm",
    dtype: torch.dtype | str | None = None,
    device: str | torch.device = "cpu",
    trust_remote_code: bool = False,
    device_map: str | dict | None = None,
) -> nn.Module:
    """Load a model saved with ``save_pretrained`` from the local directory ``path``, in eval mode.

    Args:
        path: directory containing ``config.json`` and the weights.
        kind: ``"causal_lm"`` (``AutoModelForCausalLM``), ``"masked_lm"`` (``AutoModelForMaskedLM``) or
            ``"auto"``: pick from ``config.architectures`` (``*ForCausalLM`` / ``*LMHeadModel`` -> causal
            LM, ``*ForMaskedLM`` -> masked LM, anything else -> the bare ``AutoModel``).
        dtype: ``None`` -> float32 (the same on every transformers version), a ``torch.dtype`` or its name
            (``"bfloat16"``), or ``"auto"`` for the dtype stored in the checkpoint.
        device: where to move the model after loading.
        trust_remote_code: passed through (custom modelling code is then run *from the local directory*).
        device_map: ``None`` (or ``"none"``) loads on ``device``; anything else (``"auto"``, ``"cpu"``, a dict of
            module -> device) is passed to ``from_pretrained`` so accelerate places (and shards) the weights,
            and ``device`` is ignored. Needs the ``hf`` extra (accelerate).

    Raises:
        FileNotFoundError: ``path`` is not an existing directory with a ``config.json``.
        ImportError: transformers (or, with ``device_map``, accelerate) is not installed.
    """
    root = _check_dir(path, "load_local_model")
    transformers = _require_transformers()
    if kind not in ("causal_lm", "masked_lm", "auto"):
        raise ValueError(f"kind must be 'causal_lm', 'masked_lm' or 'auto', got {kind!r}")
    kwargs = {"local_files_only": True, "trust_remote_code": trust_remote_code}
    kwargs.update(_dtype_kwargs(transformers, dtype))
    mapped = device_map is not None and device_map != "none"
    if mapped:
        try:
            import accelerate  # noqa: F401
        except ImportError as e:
            raise ImportError("device_map needs accelerate: pip install 'iclr26[hf]'") from e
        kwargs["device_map"] = device_map
    with _offline():
        if kind == "auto":
            config = transformers.AutoConfig.from_pretrained(
                str(root), local_files_only=True, trust_remote_code=trust_remote_code
            )
            archs = list(getattr(config, "architectures", None) or [])
            if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
                kind = "causal_lm"
            elif any(a.endswith("ForMaskedLM") for a in archs):
                kind = "masked_lm"
        auto_cls = {
            "causal_lm": transformers.AutoModelForCausalLM,
            "masked_lm": transformers.AutoModelForMaskedLM,
            "auto": transformers.AutoModel,
        }[kind]
        model = auto_cls.from_pretrained(str(root), **kwargs)
    return model.eval() if mapped else model.to(device).eval()


def load_local_tokenizer(path: str | os.PathLike, *, trust_remote_code: bool = False) -> Any:
    """Load a tokenizer saved with ``save_pretrained`` from the local directory ``path``.

    The directory must hold ``tokenizer_config.json``, ``tokenizer.json`` or ``config.json``; raises
    :class:`FileNotFoundError` otherwise and :class:`ImportError` without transformers.
    """
    accepted = ("tokenizer_config.json", "tokenizer.json", "config.json")
    root = _check_dir(path, "load_local_tokenizer", accepted)
    transformers = _require_transformers()
    with _offline():
        return transformers.AutoTokenizer.from_pretrained(
            str(root), local_files_only=True, trust_remote_code=trust_remote_code
        )


def load_local(
    path: str | os.PathLike,
    *,
    kind: ModelKind = "causal_lm",
    dtype: torch.dtype | str | None = None,
    device: str | torch.device = "cpu",
    trust_remote_code: bool = False,
    device_map: str | dict | None = None,
) -> tuple[nn.Module, Any]:
    """``(load_local_model(path, ...), load_local_tokenizer(path))``; the directory needs ``config.json``."""
    _check_dir(path, "load_local")
    model = load_local_model(
        path, kind=kind, dtype=dtype, device=device, trust_remote_code=trust_remote_code, device_map=device_map
    )
    tokenizer = load_local_tokenizer(path, trust_remote_code=trust_remote_code)
    return model, tokenizer


def pure_generation_kwargs(do_sample: bool = False, temperature: float = 1.0) -> dict[str, Any]:
    """Keyword arguments for ``model.generate`` that make decoding exactly what they say: pure greedy
    (``do_sample=False``: the argmax at every step) or pure sampling at ``temperature`` (no top-k, top-p,
    typical or epsilon truncation).

    ``generate`` fills every field the caller leaves unset from the model's own ``generation_config`` (a
    checkpoint's ``generation_config.json`` may carry ``repetition_penalty``, ``no_repeat_ngram_size``,
    ``top_k``, ``top_p``...), and a repetition penalty changes "greedy" tokens. So every such processor is set
    here explicitly to its neutral value; pass these with the lengths and token ids of the call.
    """
    kw: dict[str, Any] = {
        "do_sample": bool(do_sample),
        "num_beams": 1,
        "repetition_penalty": 1.0,
        "encoder_repetition_penalty": 1.0,
        "no_repeat_ngram_size": 0,
        "encoder_no_repeat_ngram_size": 0,
        "min_new_tokens": 0,
        "renormalize_logits": False,
    }
    if do_sample:
        if not temperature > 0:
            raise ValueError(f"sampling needs a temperature > 0, got {temperature}")
        kw.update(temperature=float(temperature), top_k=0, top_p=1.0, typical_p=1.0, epsilon_cutoff=0.0, eta_cutoff=0.0)
    return kw


def left_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists as one left-padded batch: (input_ids [B, T], attention_mask [B, T]), T the longest."""
    import torch

    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), int(pad_id), dtype=torch.long)
    am = torch.zeros(len(seqs), T, dtype=torch.long)
    for j, s in enumerate(seqs):
        if len(s):
            ids[j, T - len(s) :] = torch.as_tensor(list(s), dtype=torch.long)
            am[j, T - len(s) :] = 1
    return ids, am


def generate_left_padded(
    model: Any,
    prompts: list[list[int]],
    *,
    pad_id: int,
    eos_id: int | None,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    batch_size: int,
) -> list[list[int]]:
    """Batched decoding of token-id prompts with the KV cache: pure greedy (``temperature`` 0) or pure
    sampling at ``temperature`` (:func:`pure_generation_kwargs`: nothing is inherited from the model's
    ``generation_config``). Returns the new token ids per prompt, cut after the first ``eos_id`` and with
    trailing padding removed. Each batch samples under its own seed drawn from ``seed``, so a run is
    reproducible and a batch's randomness does not depend on the batches before it running the same way."""
    import torch

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    sample = temperature > 0
    kw = pure_generation_kwargs(do_sample=sample, temperature=temperature if sample else 1.0)
    dev = model.device if isinstance(getattr(model, "device", None), torch.device) else next(model.parameters()).device
    seeds = torch.Generator().manual_seed(int(seed))
    out: list[list[int]] = []
    with torch.no_grad():
        for i in range(0, len(prompts), batch_size):
            ids, am = left_pad(prompts[i : i + batch_size], pad_id)
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=seeds)))
            ids, am = ids.to(dev), am.to(dev)
            kw.update(max_new_tokens=max_new_tokens, pad_token_id=pad_id)
            rows = model.generate(input_ids=ids, attention_mask=am, **kw)
            rows = rows[:, ids.shape[1] :]
            for row in rows.cpu().tolist():
                if eos_id is not None and eos_id in row:
                    row = row[: row.index(eos_id) + 1]
                while row and row[-1] == pad_id and pad_id != eos_id:
                    row.pop()
                out.append(row)
    return out


# --------------------------------------------------------------------------------------------------
# tiny random models for tests
# --------------------------------------------------------------------------------------------------


def _byte_to_char() -> dict[int, str]:
    """Reversible map of the 256 byte values to printable unicode characters (byte-level BPE convention).

    Printable latin-1 bytes map to themselves; the other bytes go, in order, to code points 256, 257, ...
    """
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]  # '!'..'~', '¡'..'¬', '®'..'ÿ'
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def tiny_byte_tokenizer() -> Any:
    """A byte-level tokenizer built in code: ids 0..255 are the bytes, then :data:`BYTE_TOKENIZER_SPECIALS`.

    It round-trips any text exactly (259 tokens, no merges, no unknown token). Returns a
    ``PreTrainedTokenizerFast`` with ``pad``/``bos``/``eos`` tokens set.
    """
    transformers = _require_transformers()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    b2c = _byte_to_char()
    vocab = {b2c[b]: b for b in range(256)}
    for i, tok in enumerate(BYTE_TOKENIZER_SPECIALS):
        vocab[tok] = 256 + i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(BYTE_TOKENIZER_SPECIALS))
    pad, bos, eos = BYTE_TOKENIZER_SPECIALS
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=pad, bos_token=bos, eos_token=eos, model_max_length=1024
    )


def tiny_random_causal_lm(
    save_dir: str | os.PathLike | None = None,
    vocab_size: int | None = None,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 2,
    *,
    arch: Literal["gpt2", "llama", "gpt_neox"] = "gpt2",
    max_positions: int = 128,
    seed: int = 0,
) -> tuple[nn.Module, Any]:
    """A tiny randomly initialised causal LM and its byte-level tokenizer, built without any download.

    Args:
        save_dir: if given, model and tokenizer are written there with ``save_pretrained`` (loadable with
            :func:`load_local`).
        vocab_size: model vocabulary; ``None`` = the tokenizer's 259 tokens (must be >= 259).
        hidden, layers, heads: width, depth and attention heads (``hidden % heads == 0``).
        arch: ``"gpt2"`` (GPT2LMHeadModel), ``"llama"`` (LlamaForCausalLM) or ``"gpt_neox"``.
        max_positions: maximum sequence length.
        seed: the weights are a function of the seed only; the global torch RNG is left untouched.

    Returns:
        ``(model, tokenizer)``, model in eval mode, float32, on CPU, dropout 0, default attention.
    """
    import torch

    transformers = _require_transformers()
    tokenizer = tiny_byte_tokenizer()
    n_tok = len(tokenizer)
    vocab_size = n_tok if vocab_size is None else int(vocab_size)
    if vocab_size < n_tok:
        raise ValueError(f"vocab_size={vocab_size} is smaller than the byte tokenizer ({n_tok} tokens)")
    if hidden % heads != 0:
        raise ValueError(f"hidden={hidden} must be divisible by heads={heads}")
    ids = {
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    if arch == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=vocab_size,
            n_embd=hidden,
            n_layer=layers,
            n_head=heads,
            n_positions=max_positions,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            **ids,
        )
        model_cls = transformers.GPT2LMHeadModel
    elif arch == "llama":
        config = transformers.LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            max_position_embeddings=max_positions,
            attention_dropout=0.0,
            **ids,
        )
        model_cls = transformers.LlamaForCausalLM
    elif arch == "gpt_neox":
        config = transformers.GPTNeoXConfig(
            vocab_size=vocab_size,
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            max_position_embeddings=max_positions,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            **ids,
        )
        model_cls = transformers.GPTNeoXForCausalLM
    else:
        raise ValueError(f"arch must be 'gpt2', 'llama' or 'gpt_neox', got {arch!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model = model.float().eval()
    if save_dir is not None:
        save_dir = Path(save_dir)
        save_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(save_dir)
        tokenizer.save_pretrained(save_dir)
    return model, tokenizer


# --------------------------------------------------------------------------------------------------
# decoder blocks (for activation hooks)
# --------------------------------------------------------------------------------------------------

# attribute paths of the decoder-block ModuleList, tried in order (LM-head model first, then bare model)
_BLOCK_PATHS = (
    ("transformer", "h"),  # GPT-2, GPT-J, GPT-Neo, BLOOM, Falcon
    ("model", "layers"),  # Llama, Mistral, Qwen2/3, Gemma, Phi-3, OLMo
    ("gpt_neox", "layers"),  # GPT-NeoX, Pythia
    ("model", "decoder", "layers"),  # OPT
    ("h",),  # bare GPT2Model & co.
    ("layers",),  # bare LlamaModel / GPTNeoXModel & co.
)


def residual_stream_modules(model: nn.Module) -> list[nn.Module]:
    """The decoder blocks, in order, of a common HF causal LM (their outputs are the residual stream).

    Looks for a ``torch.nn.ModuleList`` at ``transformer.h`` (GPT-2 family), ``model.layers``
    (Llama / Mistral / Qwen / Gemma), ``gpt_neox.layers`` (GPT-NeoX / Pythia), ``model.decoder.layers``
    (OPT), or ``h`` / ``layers`` on a bare base model. Raises :class:`ValueError` naming the model class
    when none is found.
    """
    from torch import nn

    for attr_path in _BLOCK_PATHS:
        obj: Any = model
        for name in attr_path:
            obj = getattr(obj, name, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList) and len(obj) > 0:
            return list(obj)
    known = ", ".join(".".join(p) for p in _BLOCK_PATHS)
    raise ValueError(
        f"residual_stream_modules: don't know where the decoder blocks of {type(model).__name__} are "
        f"(looked for a ModuleList at {known})"
    )
