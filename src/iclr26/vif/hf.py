"""Paper-scale plumbing for Hugging Face VLMs (LLaVA-1.5 / NeXT, Qwen2-VL / 2.5-VL) from local paths.

* :func:`register_vif_attention` registers the attention implementation ``"vif"`` through
  ``transformers.AttentionInterface``: layers with an active :class:`ViFAttention` state run eager
  attention (``softmax(QK^T · scaling + mask)``), record the per-layer column mass of every key
  (the layer curves of Eq. 5-6) and apply the post-softmax hook (:class:`~iclr26.vif.method.Reallocation`);
  every other call falls through to the stock SDPA function. ``module.layer_idx`` selects the band.
* :func:`load_pope` reads POPE-style JSONL (``question_id``, ``image``, ``text``, ``label``) with its
  image folder; a bad row (undecodable image, missing question or answer, unknown label) becomes a
  :class:`Row` with ``error`` naming the row, so the episode is marked failed and the run continues.
* :func:`image_token_span` finds the image tokens of a LLaVA prompt and checks their count against the
  processor's (an image-token count at odds with the config is an error naming the row).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from iclr26.core.paths import PathOutsideRoot, path_inside

_ACTIVE: list[ViFAttention] = []


@dataclass
class ViFAttention:
    """State of the ``"vif"`` attention for one forward.

    layers: layers that run the eager path (others use SDPA). hook: ``hook(layer, p) -> p'`` or None.
    record: keep each eager layer's key column mass ``Σ_i mean_h A(i, j)`` in ``curves[layer]`` [B, Tk].
    """

    layers: tuple[int, ...]
    hook: object | None = None
    record: bool = False
    curves: dict[int, torch.Tensor] = field(default_factory=dict)


@contextmanager
def vif_attention(state: ViFAttention):
    """Activate ``state`` for the forwards inside the block (models must use ``attn_implementation="vif"``)."""
    _ACTIVE.append(state)
    try:
        yield state
    finally:
        _ACTIVE.pop()


def _eager(module, query, key, value, attention_mask, scaling, dropout, state: ViFAttention):
    n_rep = query.shape[1] // key.shape[1]
    if n_rep > 1:  # grouped-query attention
        key, value = key.repeat_interleave(n_rep, 1), value.repeat_interleave(n_rep, 1)
    scores = (query @ key.transpose(2, 3)).float() * scaling
    if attention_mask is not None:
        mask = attention_mask[..., : key.shape[-2]]
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.float()
    elif query.shape[2] > 1:
        causal = torch.ones(query.shape[2], key.shape[2], dtype=torch.bool, device=query.device)
        scores = scores.masked_fill(causal.triu(key.shape[2] - query.shape[2] + 1), float("-inf"))
    p = scores.softmax(-1)
    layer = module.layer_idx
    if state.record:
        state.curves[layer] = p.mean(1).sum(1).detach()
    if state.hook is not None:
        p = state.hook(layer, p)
    p = torch.nn.functional.dropout(p, dropout, module.training).to(value.dtype)
    return (p @ value).transpose(1, 2).contiguous(), p


def vif_attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """The ``"vif"`` attention function (signature of transformers' attention interface)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    state = _ACTIVE[-1] if _ACTIVE else None
    layer = getattr(module, "layer_idx", None)
    if state is None or layer not in state.layers:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return _eager(module, query, key, value, attention_mask, scale, dropout, state)


def register_vif_attention() -> str:
    """Register ``"vif"`` (attention + its materialised mask); returns the name for ``attn_implementation``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register("vif", vif_attention_forward)
    AttentionMaskInterface.register("vif", eager_mask)
    return "vif"


# --------------------------------------------------------------------------------------------------
# POPE-style data
# --------------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One benchmark row; ``error`` is set (and ``image`` None) when the row cannot be used."""

    index: int
    question_id: str
    question: str
    answer: str
    image_path: Path | None
    image: object | None = None
    error: str | None = None


def _row(index: int, rec: object, root: Path) -> Row:
    if not isinstance(rec, dict):
        return Row(index, "", "", "", None, error=f"row {index}: not a JSON object")
    qid = str(rec.get("question_id", index))
    question, label = rec.get("text"), rec.get("label")
    if not isinstance(question, str) or not question.strip():
        return Row(index, qid, "", "", None, error=f"row {index} (question_id {qid}): missing question ('text')")
    if not isinstance(label, str) or label.strip().lower() not in ("yes", "no"):
        return Row(
            index,
            qid,
            question,
            "",
            None,
            error=f"row {index} (question_id {qid}): missing or unknown answer ('label' must be yes/no)",
        )
    if not isinstance(rec.get("image"), str):
        return Row(index, qid, question, label, None, error=f"row {index} (question_id {qid}): missing 'image'")
    try:  # the data file is input, not a licence to open any file of the machine
        path = path_inside(root, rec["image"])
    except PathOutsideRoot:
        where = f"row {index} (question_id {qid})"
        return Row(index, qid, question, label, None, error=f"{where}: image path outside the image root")
    row = Row(index, qid, question, label.strip().lower(), path)
    try:
        from PIL import Image

        with Image.open(path) as im:
            row.image = im.convert("RGB")
    except Exception as exc:  # undecodable or missing image: the row fails, the run continues
        row.error = f"row {index} (question_id {qid}): cannot decode image {path.name}: {type(exc).__name__}"
    return row


def load_pope(path: str | Path, image_root: str | Path | None = None) -> list[Row]:
    """Rows of a POPE-style JSONL file (one JSON object per line); images under ``image_root``
    (default: the file's folder). Bad rows come back with ``error`` set, never raise."""
    path = Path(path)
    root = Path(image_root) if image_root else path.parent
    rows = []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                rows.append(Row(i, str(i), "", "", None, error=f"row {i}: invalid JSON ({exc.msg})"))
                continue
            rows.append(_row(i, rec, root))
    return rows


def processor_image_tokens(processor, inputs: dict, config=None) -> int:
    """How many image tokens the processor of this model family writes for ``inputs`` (one prompt): the count
    the prompt must hold, from the processor's own rule, not a config field:

    * Qwen2-VL / Qwen2.5-VL (``image_grid_thw`` in the inputs): t * h * w patches per image, merged
      ``merge_size x merge_size`` -> ``sum(t h w) / merge_size^2``;
    * LLaVA-NeXT (``image_sizes``; anyres): the processor's feature count for each image's original size and
      the crop size, minus the CLS slot under the "default" feature strategy -- it varies with the image;
    * fixed-count families (LLaVA-1.5, Gemma 3, PaliGemma): the processor's ``num_image_tokens`` /
      ``image_seq_length``, else the config's ``image_seq_length``.
    """
    if "image_grid_thw" in inputs:
        merge = getattr(getattr(processor, "image_processor", None), "merge_size", None)
        if merge is None and config is not None:
            merge = getattr(getattr(config, "vision_config", None), "spatial_merge_size", None)
        return int(torch.as_tensor(inputs["image_grid_thw"]).prod(-1).sum()) // int(merge or 2) ** 2
    if "image_sizes" in inputs and hasattr(processor, "_get_number_of_features"):
        h, w = (int(x) for x in inputs["pixel_values"].shape[-2:])
        total = 0
        for oh, ow in torch.as_tensor(inputs["image_sizes"]).reshape(-1, 2).tolist():
            n = int(processor._get_number_of_features(int(oh), int(ow), h, w))
            total += n - 1 if getattr(processor, "vision_feature_select_strategy", "default") == "default" else n
        return total
    for owner, name in ((processor, "num_image_tokens"), (processor, "image_seq_length"), (config, "image_seq_length")):
        n = getattr(owner, name, None) if owner is not None else None
        if n:
            return int(n)
    raise ValueError(
        f"cannot tell how many image tokens {type(processor).__name__} writes per image "
        "(no image_grid_thw / image_sizes in its output and no image_seq_length)"
    )


def image_token_span(input_ids: torch.Tensor, image_token_id: int, expected: int, row: int = -1) -> slice:
    """The contiguous span of image tokens in one prompt [T]; ValueError naming the row if the count is
    not ``expected`` (the processor's image-token count, :func:`processor_image_tokens`) or the span is not
    contiguous."""
    pos = (input_ids == image_token_id).nonzero().flatten()
    if len(pos) != expected:
        raise ValueError(f"row {row}: {len(pos)} image tokens, the config expects {expected}")
    if expected and int(pos[-1] - pos[0]) + 1 != expected:
        raise ValueError(f"row {row}: image tokens are not contiguous")
    return slice(int(pos[0]), int(pos[-1]) + 1) if expected else slice(0, 0)
