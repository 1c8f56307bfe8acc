"""Pythia (GPT-NeoX) shapes, configs and checkpoints mapped into prelude / core / coda.

* :data:`PYTHIA_SHAPES`: hidden size, layers and heads of the Pythia suite (MLP 4x, rotary 25%,
  parallel residual, vocabulary 50,304).
* :data:`PAPER_LAYOUTS` / :data:`PAPER_LR`: the paper's recursive layouts (Table 1) and peak learning
  rates (Appendix B gives 6e-4 for 160M and 2e-4 for 1.4B; the others follow Pythia, our assumption).
* :func:`pythia_config`: a :class:`MeshConfig` from a Pythia size name, a local ``config.json`` (or the
  folder holding it), or a Hugging Face ``GPTNeoXConfig``.
* :func:`map_gpt_neox_state_dict` / :func:`load_pythia`: a Hugging Face GPT-NeoX state dict (e.g. a
  local Pythia checkpoint) mapped into a ``P+CRK+S`` model. Layers ``0..P-1`` go to the prelude, the last
  ``S`` layers to the coda; the shared core takes layers ``P..P+C-1`` (``core_init="first"``) or the
  average of the K groups ``P+t*C+j`` (``"average"``); with ``share_core=False`` core t takes exactly
  layers ``P+t*C..P+(t+1)*C-1``, so a vanilla checkpoint is reproduced exactly with pass-through routers.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import torch

from iclr26.mesh.model import MeshConfig, RecursiveNeoX, parse_layout

#: name -> (hidden_size, num_hidden_layers, num_attention_heads)
PYTHIA_SHAPES: dict[str, tuple[int, int, int]] = {
    "14m": (128, 6, 4),
    "70m": (512, 6, 8),
    "160m": (768, 12, 12),
    "410m": (1024, 24, 16),
    "1b": (2048, 16, 8),
    "1.4b": (2048, 24, 16),
    "2.8b": (2560, 32, 32),
    "6.9b": (4096, 32, 32),
    "12b": (5120, 36, 40),
}

#: the paper's recursive layouts (Table 1); 410m also "3+6R3+3" (-50%).
PAPER_LAYOUTS: dict[str, str] = {"160m": "2+4R2+2", "410m": "4+8R2+4", "1b": "3+5R2+3", "1.4b": "4+8R2+4"}

#: peak learning rates: 160m 6e-4 and 1.4b 2e-4 from the paper; 410m/1b 3e-4 as Pythia (assumption).
PAPER_LR: dict[str, float] = {"160m": 6e-4, "410m": 3e-4, "1b": 3e-4, "1.4b": 2e-4}


def _read_hf_config(source: Any) -> dict[str, Any]:
    if isinstance(source, dict):
        return dict(source)
    if hasattr(source, "to_dict"):
        return source.to_dict()
    from iclr26.core.checkpoints import resolve_model_dir

    path = Path(resolve_model_dir(source)).expanduser()  # a registered name (``iclr26 models``) -> its folder
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"no GPT-NeoX config.json at {source!s} (nothing is downloaded)")
    return json.loads(path.read_text())


def pythia_config(
    source: str | Path | dict | Any, layout: str | None = None, scheme: str = "mesh", **overrides: Any
) -> MeshConfig:
    """A :class:`MeshConfig` with a Pythia shape.

    source: a size name from :data:`PYTHIA_SHAPES` (``"1.4b"``), a local ``config.json`` or folder, a dict
        or a ``GPTNeoXConfig``.
    layout: ``P+CRK+S`` or ``"L"``; default: the paper's layout for that size if known, else vanilla.
    overrides: any other :class:`MeshConfig` field (e.g. ``scale_embeddings=False`` for Pythia weights).
    """
    name = str(source).lower().removeprefix("pythia-") if isinstance(source, str) else None
    if name in PYTHIA_SHAPES:
        d, n_layers, heads = PYTHIA_SHAPES[name]
        base: dict[str, Any] = {
            "vocab_size": 50688 if name == "12b" else 50304,
            "d_model": d,
            "n_heads": heads,
            "d_ff": 4 * d,
            "max_seq_len": 2048,
        }
        default_layout = PAPER_LAYOUTS.get(name, str(n_layers))
    else:
        hf = _read_hf_config(source)
        if hf.get("model_type", "gpt_neox") != "gpt_neox":
            raise ValueError(f"expected a gpt_neox config, got model_type={hf.get('model_type')!r}")
        rope = hf.get("rope_parameters") or {}
        n_layers = int(hf["num_hidden_layers"])
        base = {
            "vocab_size": int(hf["vocab_size"]),
            "d_model": int(hf["hidden_size"]),
            "n_heads": int(hf["num_attention_heads"]),
            "d_ff": int(hf.get("intermediate_size", 4 * hf["hidden_size"])),
            "rotary_pct": float(hf.get("rotary_pct", rope.get("partial_rotary_factor", 0.25))),
            "rotary_base": float(hf.get("rotary_emb_base", rope.get("rope_theta", 10000.0))),
            "parallel_residual": bool(hf.get("use_parallel_residual", True)),
            "layer_norm_eps": float(hf.get("layer_norm_eps", 1e-5)),
            "max_seq_len": int(hf.get("max_position_embeddings", 2048)),
            "init_std": float(hf.get("initializer_range", 0.02)),
            "tie_embeddings": bool(hf.get("tie_word_embeddings", False)),
        }
        if not hf.get("attention_bias", True):
            raise ValueError("GPT-NeoX configs without attention bias are not supported")
        default_layout = str(n_layers)
        for k, v in PYTHIA_SHAPES.items():
            if v == (base["d_model"], n_layers, base["n_heads"]) and k in PAPER_LAYOUTS:
                default_layout = PAPER_LAYOUTS[k]
    lay = parse_layout(layout or default_layout)
    if lay.depth != n_layers:
        raise ValueError(f"layout {lay} has depth {lay.depth}, the Pythia config has {n_layers} layers")
    if not lay.recursive and scheme != "base":
        scheme = "base"
    return MeshConfig(layout=str(lay), scheme=scheme, **{**base, **overrides})


def map_gpt_neox_state_dict(
    hf_state: dict[str, torch.Tensor], cfg: MeshConfig, core_init: Literal["first", "average"] = "first"
) -> dict[str, torch.Tensor]:
    """Rename/merge a Hugging Face GPT-NeoX state dict into :class:`RecursiveNeoX` names (routers excluded).

    The checkpoint must have ``P + C*K + S`` layers (the vanilla model of the same depth).
    """
    if core_init not in ("first", "average"):
        raise ValueError(f"core_init must be 'first' or 'average', got {core_init!r}")
    sd = {k.removeprefix("gpt_neox."): v for k, v in hf_state.items()}
    layers: dict[int, dict[str, torch.Tensor]] = {}
    out: dict[str, torch.Tensor] = {}
    for k, v in sd.items():
        if k.startswith("layers."):
            _, i, rest = k.split(".", 2)
            if rest.endswith(("attention.bias", "attention.masked_bias", "rotary_emb.inv_freq")):
                continue  # old buffers, not parameters
            layers.setdefault(int(i), {})[rest] = v
        elif k in ("embed_in.weight", "final_layer_norm.weight", "final_layer_norm.bias"):
            out[k] = v
        elif k in ("embed_out.weight", "lm_head.weight"):
            out["embed_out.weight"] = v
    lay = cfg.parsed_layout
    if sorted(layers) != list(range(lay.depth)):
        raise ValueError(f"checkpoint has {len(layers)} layers; layout {lay} needs {lay.depth}")

    def put(prefix: str, j: int, src: dict[str, torch.Tensor]) -> None:
        for name, t in src.items():
            out[f"{prefix}.layers.{j}.{name}"] = t

    for j in range(lay.prelude):
        put("prelude", j, layers[j])
    for j in range(lay.coda):
        put("coda", j, layers[lay.depth - lay.coda + j])
    if lay.recursive:
        first = lay.prelude
        if not cfg.share_core:
            for t in range(lay.n_loop):
                for j in range(lay.core):
                    put(f"cores.{t}", j, layers[first + t * lay.core + j])
        elif core_init == "first":
            for j in range(lay.core):
                put("cores.0", j, layers[first + j])
        else:
            for j in range(lay.core):
                group = [layers[first + t * lay.core + j] for t in range(lay.n_loop)]
                put("cores.0", j, {n: torch.stack([g[n] for g in group]).mean(0) for n in group[0]})
    if cfg.tie_embeddings:
        out.pop("embed_out.weight", None)
    return out


def load_pythia(
    path: str | Path,
    layout: str | None = None,
    scheme: str = "mesh",
    core_init: Literal["first", "average"] = "first",
    **overrides: Any,
) -> RecursiveNeoX:
    """A recursive model initialised from a local Hugging Face GPT-NeoX/Pythia checkpoint folder.

    Embeddings are not rescaled by default (``scale_embeddings=False``): Pythia was trained without the
    paper's sqrt(D) factor. MeSH routers keep their fresh initialisation.
    """
    from iclr26.core.hf import load_local_model

    overrides.setdefault("scale_embeddings", False)
    cfg = pythia_config(path, layout=layout, scheme=scheme, **overrides)
    hf = load_local_model(path, kind="causal_lm")
    model = RecursiveNeoX(cfg)
    missing, unexpected = model.load_state_dict(map_gpt_neox_state_dict(hf.state_dict(), cfg, core_init), strict=False)
    missing = [k for k in missing if not k.startswith("routers.")]
    if missing or unexpected:
        raise ValueError(f"checkpoint mapping failed: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model


def vanilla_of(cfg: MeshConfig) -> MeshConfig:
    """The non-recursive (vanilla) config with the same unrolled depth and width."""
    return replace(cfg, layout=str(cfg.parsed_layout.depth), scheme="base", share_core=True)
