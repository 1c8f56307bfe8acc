"""Steering with the probe direction (paper Section 5): ``h_L <- h_L + alpha · v`` at every position.

Positive alpha pushes toward "dishonest" (the probe's positive class), negative toward honest. In
mf_doom, QwQ-32B is steered at layer 38 with multiplier -80 (honest) during generation.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from iclr26.core.transformer import ResidualAdd, Transformer
from iclr26.dishonesty.probe import decoder_blocks


class SteeringHook:
    """Context manager adding ``alpha * vector`` to the residual stream ``hidden_states[layer]``.

    ``layer >= 1``: a forward hook on decoder block ``layer - 1`` (core :class:`Transformer` or a
    Hugging Face causal LM) adds the vector to the block's hidden-state output, so every later block,
    ``output_hidden_states`` and :func:`~iclr26.dishonesty.probe.gather_activations` hooks registered
    afterwards see the steered stream. With a KV cache this edits every new position, which is the same
    as editing all positions. ``layer = 0`` (the embeddings) is allowed for core models, through their
    :class:`~iclr26.core.transformer.ResidualAdd` intervention. The edit is gone when the ``with``
    block exits, also on an exception.

    >>> with SteeringHook(model, layer=2, vector=v, alpha=-3.0):   # doctest: +SKIP
    ...     out = generate(model, prompts, 8)
    """

    def __init__(self, model: nn.Module, layer: int, vector, alpha: float = 1.0):
        self.model, self.layer, self.alpha = model, int(layer), float(alpha)
        v = torch.as_tensor(np.asarray(vector) if not isinstance(vector, Tensor) else vector).float().flatten()
        if not torch.isfinite(v).all():
            raise ValueError("steering vector contains NaN or inf")
        self.vector = v
        n = len(decoder_blocks(model))
        low = 0 if isinstance(model, Transformer) else 1
        if not low <= self.layer <= n:
            raise ValueError(f"layer {self.layer} out of range {low}..{n} (layer L = output of block L-1)")
        self._handle = None
        self._ctx = None

    def __enter__(self) -> SteeringHook:
        if isinstance(self.model, Transformer) and self.vector.numel() != self.model.cfg.d_model:
            raise ValueError(f"vector has {self.vector.numel()} entries, d_model is {self.model.cfg.d_model}")
        if self.layer == 0:
            self._ctx = self.model.intervene(ResidualAdd(layer=self.layer, vector=self.vector, alpha=self.alpha))
            self._ctx.__enter__()
        else:
            block = decoder_blocks(self.model)[self.layer - 1]
            vec, alpha = self.vector, self.alpha

            def hook(_module, _inp, out):
                h = out[0] if isinstance(out, tuple | list) else out
                if h.shape[-1] != vec.numel():
                    raise ValueError(f"vector has {vec.numel()} entries, hidden size is {h.shape[-1]}")
                h = h + alpha * vec.to(device=h.device, dtype=h.dtype)
                if isinstance(out, tuple):
                    return (h, *out[1:])
                if isinstance(out, list):
                    return [h, *out[1:]]
                return h

            self._handle = block.register_forward_hook(hook)
        return self

    def __exit__(self, *exc) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
            self._ctx = None
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
