"""Paper-scale training path: GRPO on a local Qwen2(.5)-VL-style model with VTool-R1's v2 masks.

* :class:`VLChatEncoder` turns chat messages with images into model inputs: the tokenizer's chat template
  renders the text with one ``<|image_pad|>`` per image, the image processor gives ``pixel_values`` and
  ``image_grid_thw``, and every pad is expanded to ``t·h·w / merge²`` tokens (what Qwen2.5-VL's processor
  does). Built from a processor (:meth:`VLChatEncoder.from_processor`) or from a tokenizer and an image
  processor, so it also runs without torchvision.
* :func:`encode_sample` makes one training sequence ``prompt ids + response ids``: for a tool call the prompt
  is the v2 round-2 chat (``[user: I + prompt][assistant: y'][user: I' + OBSERVATION]``), so y' and the
  observation are prompt tokens (mask 0) and only y and its end-of-turn token are trained (mask 1); a direct
  answer trains y'. The ids are the prompt's followed by the response's, as a generation produces them.
* :func:`response_logprobs` recomputes ``log π(token)`` of the response tokens in micro-batches.
* :func:`hf_grpo_step` is one GRPO update (advantages per group before any re-ordering, old / reference
  log-probs, ``cfg.minibatches`` optimiser steps, each accumulating micro-batches), with the loss of
  :func:`iclr26.vtool_r1.vtool.vtool_loss` (``core.grpo``: clip-higher, dual clip 3, k3 KL clamped at 10).
  Micro-batching does not change the gradient: each micro-batch's token-mean loss is weighted by its share of
  the minibatch's response tokens, so the sum is the minibatch's token mean.
* :func:`generate_batch` generates for many chats at once (left padding).

Single-GPU scale (LoRA optional through ``peft`` on the policy before it is passed in). Multi-GPU training is
verl's agent loop (see the README).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from iclr26.core.grpo import group_advantages

from .vtool import VToolConfig, vtool_loss

__all__ = ["EncodedSample", "VLChatEncoder", "encode_sample", "generate_batch", "hf_grpo_step", "response_logprobs"]


def _images(messages: Sequence[dict]) -> list:
    return [
        c["image"]
        for m in messages
        if isinstance(m.get("content"), list)
        for c in m["content"]
        if isinstance(c, dict) and c.get("type") == "image"
    ]


@dataclass
class VLChatEncoder:
    """Chat messages (with ``{"type": "image", "image": PIL}`` parts) -> Qwen2-VL-style model inputs."""

    tokenizer: object
    """A Hugging Face tokenizer with a chat template."""
    image_processor: object
    """A Qwen2-VL image processor (``pixel_values``, ``image_grid_thw``)."""
    image_token: str = "<|image_pad|>"
    """The token the template writes for each image."""
    merge_size: int = 2
    """Vision patches merged per side into one LM token."""

    @classmethod
    def from_processor(cls, processor) -> VLChatEncoder:
        ip = processor.image_processor
        return cls(processor.tokenizer, ip, getattr(processor, "image_token", "<|image_pad|>"), ip.merge_size)

    def text(self, messages: Sequence[dict], add_generation_prompt: bool, continue_final: bool = False) -> str:
        return self.tokenizer.apply_chat_template(
            list(messages),
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final,
        )

    def encode(
        self, messages: Sequence[dict], add_generation_prompt: bool = True, continue_final: bool = False
    ) -> dict:
        """``{"input_ids": [T] long, "pixel_values": [P, D] | None, "image_grid_thw": [n, 3] | None}``."""
        text = self.text(messages, add_generation_prompt, continue_final)
        images = _images(messages)
        pix = grid = None
        if images:
            out = self.image_processor(images=images, return_tensors="pt")
            pix, grid = out["pixel_values"], out["image_grid_thw"]
        pieces = text.split(self.image_token)
        if len(pieces) - 1 != len(images):
            raise ValueError(f"the chat template wrote {len(pieces) - 1} image tokens for {len(images)} images")
        ids: list[int] = []
        pad_id = self.tokenizer.convert_tokens_to_ids(self.image_token)
        for k, piece in enumerate(pieces):
            ids += self.tokenizer(piece, add_special_tokens=False)["input_ids"]
            if k < len(images):
                ids += [pad_id] * (int(grid[k].prod()) // self.merge_size**2)
        return {"input_ids": torch.tensor(ids, dtype=torch.long), "pixel_values": pix, "image_grid_thw": grid}


@dataclass
class EncodedSample:
    """One training sequence: prompt ids followed by response ids; ``mask`` marks the response tokens."""

    input_ids: Tensor
    """[T] long."""
    mask: Tensor
    """[T] float: 1 on trained (response) tokens."""
    pixel_values: Tensor | None
    image_grid_thw: Tensor | None


def encode_sample(
    encoder: VLChatEncoder, prompt_messages: Sequence[dict], response: str, end_of_turn: str = "<|im_end|>"
) -> EncodedSample:
    """``prompt_messages`` rendered with the generation prompt, then ``response + end_of_turn`` as the trained
    tokens. v2 tool call: the round-2 chat is the prompt (y' and the observation are not trained); direct
    answer: the round-1 chat."""
    p = encoder.encode(prompt_messages, add_generation_prompt=True)
    r = torch.tensor(encoder.tokenizer(response + end_of_turn, add_special_tokens=False)["input_ids"], dtype=torch.long)
    ids = torch.cat([p["input_ids"], r])
    mask = torch.cat([torch.zeros(len(p["input_ids"])), torch.ones(len(r))])
    return EncodedSample(ids, mask, p["pixel_values"], p["image_grid_thw"])


def _collate(samples: Sequence[EncodedSample], pad_id: int) -> dict:
    n = max(len(s.input_ids) for s in samples)
    ids = torch.full((len(samples), n), pad_id, dtype=torch.long)
    att = torch.zeros(len(samples), n, dtype=torch.long)
    mask = torch.zeros(len(samples), n)
    for i, s in enumerate(samples):
        ids[i, : len(s.input_ids)], att[i, : len(s.input_ids)], mask[i, : len(s.mask)] = s.input_ids, 1, s.mask
    batch = {"input_ids": ids, "attention_mask": att}
    pix = [s.pixel_values for s in samples if s.pixel_values is not None]
    if pix:
        batch["pixel_values"] = torch.cat(pix)
        batch["image_grid_thw"] = torch.cat([s.image_grid_thw for s in samples if s.image_grid_thw is not None])
    return {"model": batch, "mask": mask[:, 1:]}


def response_logprobs(
    model, samples: Sequence[EncodedSample], pad_id: int, micro_batch: int = 4, device: str = "cpu"
) -> list[Tensor]:
    """Per sample, ``log π(ids[t+1] | ids[:t+1])`` for t = 0..T-2 (a [T-1] tensor; only masked entries matter).
    Gradients flow when called with grad enabled."""
    out: list[Tensor] = []
    for b in range(0, len(samples), micro_batch):
        chunk = samples[b : b + micro_batch]
        col = _collate(chunk, pad_id)
        inputs = {k: v.to(device) for k, v in col["model"].items()}
        logits = model(**inputs).logits[:, :-1].float()
        lp = logits.log_softmax(-1).gather(-1, inputs["input_ids"][:, 1:, None]).squeeze(-1)
        out += [lp[i, : len(s.input_ids) - 1] for i, s in enumerate(chunk)]
    return out


def _pad_rows(rows: Sequence[Tensor]) -> Tensor:
    n = max(len(r) for r in rows)
    out = torch.zeros(len(rows), n, device=rows[0].device)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def accumulate_grad(
    policy,
    samples: Sequence[EncodedSample],
    old: Sequence[Tensor],
    ref: Sequence[Tensor] | None,
    adv: Tensor,
    cfg: VToolConfig,
    pad_id: int,
    micro_batch: int,
    device: str = "cpu",
) -> float:
    """Backward of the VTool-R1 loss over ``samples`` (one minibatch) in micro-batches; returns the loss."""
    total = float(sum(s.mask[1:].sum() for s in samples))
    loss_sum = 0.0
    for b in range(0, len(samples), micro_batch):
        chunk = samples[b : b + micro_batch]
        lp = _pad_rows(response_logprobs(policy, chunk, pad_id, micro_batch, device))
        mask = _pad_rows([s.mask[1:].to(lp.device) for s in chunk])
        o = _pad_rows([x.to(lp.device) for x in old[b : b + micro_batch]])
        r = None if ref is None else _pad_rows([x.to(lp.device) for x in ref[b : b + micro_batch]])
        weight = float(mask.sum()) / max(total, 1.0)
        loss = vtool_loss(lp, o, r, adv[b : b + micro_batch].to(lp.device), mask, cfg) * weight
        loss.backward()
        loss_sum += float(loss.detach())
    return loss_sum


def hf_grpo_step(
    policy,
    ref,
    opt: torch.optim.Optimizer,
    samples: Sequence[EncodedSample],
    rewards: Tensor,
    groups: Tensor,
    cfg: VToolConfig,
    pad_id: int,
    micro_batch: int = 4,
    device: str = "cpu",
    generator: torch.Generator | None = None,
) -> dict:
    """One GRPO update on encoded two-round samples (see the module docstring)."""
    adv = group_advantages(rewards.float(), groups, "mean_std", cfg.adv_eps, "sample")
    with torch.no_grad():
        old = [x.detach() for x in response_logprobs(policy, samples, pad_id, micro_batch, device)]
        ref_lp = None
        if ref is not None and cfg.kl_coef > 0:
            ref_lp = [x.detach() for x in response_logprobs(ref, samples, pad_id, micro_batch, device)]
    perm = torch.randperm(len(samples), generator=generator)
    losses = []
    for mb in perm.chunk(cfg.minibatches):
        idx = mb.tolist()
        opt.zero_grad(set_to_none=True)
        loss = accumulate_grad(
            policy,
            [samples[i] for i in idx],
            [old[i] for i in idx],
            None if ref_lp is None else [ref_lp[i] for i in idx],
            adv[mb],
            cfg,
            pad_id,
            micro_batch,
            device,
        )
        torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss)
    return {"loss": sum(losses) / len(losses), "reward": float(rewards.float().mean())}


@torch.no_grad()
def generate_batch(
    model,
    encoder: VLChatEncoder,
    chats: Sequence[Sequence[dict]],
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    device: str = "cpu",
) -> list[str]:
    """Generate for every chat at once (left padding); greedy when ``temperature`` is 0."""
    enc = [encoder.encode(c, c[-1]["role"] != "assistant", c[-1]["role"] == "assistant") for c in chats]
    tok = encoder.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    n = max(len(e["input_ids"]) for e in enc)
    ids = torch.full((len(enc), n), pad, dtype=torch.long)
    att = torch.zeros(len(enc), n, dtype=torch.long)
    for i, e in enumerate(enc):
        ids[i, n - len(e["input_ids"]) :], att[i, n - len(e["input_ids"]) :] = e["input_ids"], 1
    inputs = {"input_ids": ids, "attention_mask": att}
    pix = [e["pixel_values"] for e in enc if e["pixel_values"] is not None]
    if pix:
        inputs["pixel_values"] = torch.cat(pix)
        inputs["image_grid_thw"] = torch.cat([e["image_grid_thw"] for e in enc if e["image_grid_thw"] is not None])
    kw = {"do_sample": temperature > 0, "max_new_tokens": max_new_tokens, "pad_token_id": pad}
    if temperature > 0:
        kw.update(temperature=temperature, top_p=0.99)
    out = model.generate(**{k: v.to(device) for k, v in inputs.items()}, **kw)
    return tok.batch_decode(out[:, n:], skip_special_tokens=True)
