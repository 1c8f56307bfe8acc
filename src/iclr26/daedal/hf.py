"""Paper scale: a Hugging Face masked-diffusion model as the decoders' ``model_fn``.

LLaDA-8B-Instruct / LLaDA-1.5 load from a LOCAL directory with ``trust_remote_code`` (nothing is
downloaded; :func:`iclr26.core.hf.load_local_model` enforces it). Their ids: mask 126336, EOS
126081 (``<|endoftext|>``, the SFT padding token -- NOT ``<|eot_id|>`` 126348, which makes stage 1
expand to L_max). Any ``*ForMaskedLM`` (BERT, ModernBERT...) works the same way; the tests use a
tiny random ``BertForMaskedLM`` built from a config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

LLADA_MASK_ID = 126336
LLADA_EOS_ID = 126081
LLADA_EOT_ID = 126348


@dataclass
class HFMaskedDiffusionAdapter:
    """Wrap ``model(input_ids, attention_mask=...) -> .logits`` into ``model_fn(ids, attn)``.

    model: a loaded HF model (LLaDA remote code or any ``*ForMaskedLM``).
    pass_attention_mask: give the model the length-derived mask. The upstream LLaDA remote code may
        reject or ignore it (the DAEDAL repo vendors a modified ``modeling_llada.py``); with False,
        batches must have no padding at all (batch size 1 or equal lengths), which is checked.
    device: where inputs are moved (default: the model's device); logits are returned there too.
    position_ids_from_mask: pass ``position_ids = cumsum(mask) - 1`` so that left padding does not
        shift absolute positions (BERT-style models; then a batch decodes exactly like single calls).
        LLaDA's remote code takes no position ids and uses RoPE over the padded layout: keep False
        (RoPE scores depend on relative positions only, so left padding does not change them).
    self_check: on the first batch with padding, compare one padded row's logits with the same row
        called alone, unpadded, and stop with an error if they differ by more than ``check_atol``: a
        padded batch must never change a row's decode. (The upstream LLaDA remote code turns any attention
        mask containing a 0 into a causal mask -- the DAEDAL repository vendors a fixed
        ``modeling_llada.py`` for this reason -- so without the check every padded batch would decode
        causally, silently.)
    check_atol: tolerance of the self-check on the logits (raise it for bf16 models).
    """

    model: Any
    pass_attention_mask: bool = True
    device: str | torch.device | None = None
    position_ids_from_mask: bool = False
    self_check: bool = True
    check_atol: float = 1e-3
    _checked: bool = False

    def __post_init__(self) -> None:
        if self.device is None:
            try:
                self.device = next(self.model.parameters()).device
            except (StopIteration, AttributeError):
                self.device = torch.device("cpu")

    @torch.no_grad()
    def __call__(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        logits = self._forward(input_ids, attention_mask)
        if self.self_check and not self._checked and self.pass_attention_mask and not bool(attention_mask.all()):
            self._check_padding(input_ids, attention_mask, logits)
        return logits

    def _check_padding(self, input_ids: Tensor, attention_mask: Tensor, logits: Tensor) -> None:
        """The first padded row, called alone without its pads, must give the same logits."""
        row = int((~attention_mask.bool()).any(1).nonzero()[0])
        keep = attention_mask[row].bool()
        ids = input_ids[row][keep][None]
        alone = self._forward(ids, torch.ones_like(ids, dtype=torch.bool))[0]
        diff = float((logits[row][keep.to(logits.device)].float() - alone.float()).abs().max())
        if not diff <= self.check_atol:
            raise ValueError(
                f"a padded row decodes differently from the same row called alone (max |logit diff| {diff:.3g} > "
                f"{self.check_atol:g}): this model does not honour the padding mask (the upstream LLaDA remote "
                "code turns any mask with a 0 into a causal mask) or needs position ids from the mask. Use a "
                "bidirectional modelling file, position_ids_from_mask=True, or batch size 1"
            )
        self._checked = True

    def _forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        ids = input_ids.to(self.device)
        kwargs = {}
        if self.position_ids_from_mask:
            kwargs["position_ids"] = (attention_mask.long().cumsum(1) - 1).clamp_min(0).to(self.device)
        if self.pass_attention_mask:
            out = self.model(input_ids=ids, attention_mask=attention_mask.to(self.device).long(), **kwargs)
        else:
            if not bool(attention_mask.all()):
                raise ValueError(
                    "this model is used without an attention mask: batches must not contain "
                    "padding (use batch size 1 or prompts of equal length)"
                )
            out = self.model(input_ids=ids, **kwargs)
        logits = out.logits if hasattr(out, "logits") else out[0]
        return logits


def load_masked_diffusion_lm(
    path: str, *, device: str = "cpu", dtype: str | torch.dtype | None = None, trust_remote_code: bool = False
) -> tuple[Any, Any]:
    """(model, tokenizer) from a local directory; LLaDA's ``LLaDAModelLM`` loads via ``AutoModel`` and needs
    ``trust_remote_code=True`` (it runs the modelling file in that directory), which is off unless asked for."""
    from iclr26.core.hf import load_local_model, load_local_tokenizer

    model = load_local_model(path, kind="auto", dtype=dtype, device=device, trust_remote_code=trust_remote_code)
    tokenizer = load_local_tokenizer(path, trust_remote_code=trust_remote_code)
    return model, tokenizer


def check_llada_ids(tokenizer: Any, mask_id: int, eos_id: int) -> None:
    """Refuse the classic silent failure: EOS must be the SFT padding token, not the end-of-turn one."""
    if eos_id == LLADA_EOT_ID:
        raise ValueError(
            f"eos_id={eos_id} is LLaDA's <|eot_id|>; DAEDAL needs the padding token "
            f"<|endoftext|> = {LLADA_EOS_ID} (stage 1 would expand to L_max)"
        )
    if mask_id == eos_id:
        raise ValueError(f"mask_id and eos_id must differ, both are {mask_id}")
    if tokenizer is not None and getattr(tokenizer, "eos_token_id", None) not in (None, eos_id):
        import warnings

        warnings.warn(
            f"tokenizer.eos_token_id={tokenizer.eos_token_id} differs from eos_id={eos_id}; for LLaDA "
            f"the padding EOS is {LLADA_EOS_ID}",
            stacklevel=2,
        )
