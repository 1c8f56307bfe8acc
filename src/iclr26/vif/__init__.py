"""ViF — Visual Multi-Agent System: Mitigating Hallucination Snowballing via Visual Flow
(Yu et al., ICLR 2026, arXiv 2509.21789).

In a chain of VLM agents, information passes only as text, so one agent's visual mistake is repeated
and amplified by the next ("hallucination snowballing"). ViF adds a visual flow: the previous agent's
unimodal (middle-layer peaked) vision tokens, passed through a light Transformer with the
instruction, ``R̂ = f(R ⊕ I)[:n]``, are inserted before the next agent's instruction with their source
position ids; and attention is reallocated (middle layers: τ-sharpened, α₁ of inactive-vision and
instruction mass moved to active vision; deep layers: α₂ of vision mass moved to the instruction).

Implemented: the method (``method``: reallocation, morphology classifier, relay selection, f, relay
position ids, HS score), a tiny VLM and multi-agent drivers for the CPU reproduction (``tiny``,
``agent``, ``mas``, ``analysis``), and the registered experiment (``experiment``).
"""

from iclr26.vif.config import RunConfig, ViFConfig, config_for, official_code
from iclr26.vif.method import (
    FALL,
    INACTIVE,
    MORPHOLOGY,
    OTHER,
    RISE,
    UNIMODAL,
    DropKeys,
    Morphology,
    Reallocation,
    ReallocStats,
    RelayBlock,
    classify,
    hs_score,
    hs_term,
    keynorm_signal,
    layer_curves,
    reallocate,
    relay_positions,
    select_relay,
    select_relay_keynorm,
    temperature,
)

__all__ = [
    "FALL",
    "INACTIVE",
    "MORPHOLOGY",
    "OTHER",
    "RISE",
    "UNIMODAL",
    "DropKeys",
    "Morphology",
    "ReallocStats",
    "Reallocation",
    "RelayBlock",
    "RunConfig",
    "ViFConfig",
    "classify",
    "config_for",
    "hs_score",
    "hs_term",
    "keynorm_signal",
    "layer_curves",
    "official_code",
    "reallocate",
    "relay_positions",
    "select_relay",
    "select_relay_keynorm",
    "temperature",
]
