r"""Policies that act as agents: a tiny from-scratch network and a Hugging Face causal-LM wrapper.

A policy :math:`\pi_{\theta_m}` answers an agent's observation with a response (a token sequence). The
rollout engine only needs two methods:

* ``act(obs, role, greedy, generator) -> Act``: sample (temperature 1) or decode greedily, returning the
  response the environment parses, the response tokens, their loss mask and their log-probs
  :math:`\log\pi_{old}` under the sampling policy;
* ``logprobs(obs, role, tokens) -> [n, L]``: differentiable log-probs for the PPO-clip update.

``obs_kind`` tells the environment which observation to build (``"features"`` or ``"text"``).

:class:`TinyPolicy`: MLP encoder of the observation features (grid one-hots, the tool's list, turn and
role one-hots) and a GRU decoder over the 4 response tokens, ~0.1M parameters. With
``constrained=True`` each position is restricted to the acting role's grammar (see
:func:`~iclr26.at_grpo.plan_path.grammar_mask`); log-probs are those of the masked (renormalised)
distribution, the same at sampling and at update time. After ``EOS`` the remaining positions are forced
to ``EOS`` and masked out of the loss.

:class:`HFPolicy`: a ``transformers`` causal LM (loaded from a local path) that generates text
responses; log-probs are recomputed by a forward pass, as verl's actor recomputes old log-probs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from iclr26.at_grpo.plan_path import EOS, RESPONSE_LEN, VOCAB, grammar_mask
from iclr26.core.grpo import token_logprobs


@dataclass
class Act:
    """One batch of responses: what the env parses, tokens [n, L], loss mask [n, L], old log-probs [n, L]."""

    responses: Any
    tokens: Tensor
    mask: Tensor
    logp: Tensor
    gen_logp: Tensor | None = None  # HF: log-probs reported by generate() itself (check of the recomputation)


class TinyPolicy(nn.Module):
    """MLP encoder + GRU decoder over a fixed-length response (the tiny agent of the CPU reproduction)."""

    obs_kind = "features"

    def __init__(
        self,
        obs_dim: int,
        vocab: int = len(VOCAB),
        resp_len: int = RESPONSE_LEN,
        hidden: int = 128,
        emb: int = 32,
        constrained: bool = True,
    ):
        super().__init__()
        self.vocab, self.resp_len, self.constrained = vocab, resp_len, constrained
        self.enc = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.tok_emb = nn.Embedding(vocab + 1, emb)  # last id = BOS
        self.gru = nn.GRUCell(emb, hidden)
        self.head = nn.Linear(hidden, vocab)
        self._masks = {r: grammar_mask(r, constrained) for r in ("tool", "plan")}

    def _allowed(self, role: str) -> Tensor:
        if role not in self._masks:
            raise ValueError(f"unknown role {role!r}")
        return self._masks[role]

    def _logits(self, h: Tensor, pos: int, role: str) -> Tensor:
        logits = self.head(h)
        return logits.masked_fill(~self._allowed(role)[pos], float("-inf"))

    @torch.no_grad()
    def act(self, obs: Tensor, role: str, greedy: bool = False, generator: torch.Generator | None = None) -> Act:
        n = obs.shape[0]
        h = self.enc(obs)
        prev = torch.full((n,), self.vocab, dtype=torch.long)
        toks = torch.empty(n, self.resp_len, dtype=torch.long)
        logp = torch.zeros(n, self.resp_len)
        mask = torch.ones(n, self.resp_len)
        ended = torch.zeros(n, dtype=torch.bool)
        for t in range(self.resp_len):
            h = self.gru(self.tok_emb(prev), h)
            lp = torch.log_softmax(self._logits(h, t, role), -1)
            if greedy:
                tok = lp.argmax(-1)
            else:  # Gumbel-max sampling at temperature 1
                u = torch.rand(lp.shape, generator=generator).clamp_(1e-12, 1.0)
                tok = (lp - torch.log(-torch.log(u))).argmax(-1)
            tok = torch.where(ended, torch.full_like(tok, EOS), tok)
            toks[:, t] = tok
            logp[:, t] = torch.where(ended, torch.zeros(n), lp.gather(1, tok[:, None])[:, 0])
            mask[:, t] = (~ended).float()
            ended = ended | (tok == EOS)
            prev = tok
        return Act(responses=toks, tokens=toks, mask=mask, logp=logp)

    def logprobs(self, obs: Tensor, role: str, tokens: Tensor) -> Tensor:
        """Teacher-forced log-probs [n, L] of ``tokens`` (positions after EOS are garbage-free but masked)."""
        n = obs.shape[0]
        h = self.enc(obs)
        prev = torch.full((n,), self.vocab, dtype=torch.long)
        out = []
        for t in range(self.resp_len):
            h = self.gru(self.tok_emb(prev), h)
            logits = self._logits(h, t, role)
            tok = tokens[:, t]
            # a forced EOS can lie outside the role grammar (unconstrained case is fine); keep it finite
            safe = torch.where(torch.isinf(logits.gather(1, tok[:, None])[:, 0]), torch.zeros_like(tok), tok)
            lp = torch.log_softmax(torch.where(torch.isinf(logits), torch.full_like(logits, -1e9), logits), -1)
            out.append(lp.gather(1, safe[:, None])[:, 0])
            prev = tok
        return torch.stack(out, 1)


class HFPolicy:
    """A Hugging Face causal LM as an agent (paper scale): text in, text out.

    ``model`` and ``tokenizer`` come from :func:`iclr26.core.hf.load_local` (local path only; any dtype, e.g.
    bf16, on any device; optionally wrapped by peft LoRA). Responses are sampled with ``temperature``
    (train) or greedily (validation), at most ``max_new_tokens`` tokens, from a seed drawn from the caller's
    ``generator`` (the same generator state gives the same responses). Log-probs are recomputed by forward
    passes of at most ``micro_batch_size`` prompts (0: all at once), in float32 from the model's logits.
    """

    obs_kind = "text"

    def __init__(self, model, tokenizer, max_new_tokens: int = 24, temperature: float = 1.0, micro_batch_size: int = 0):
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature = int(max_new_tokens), float(temperature)
        self.micro_batch_size = int(micro_batch_size)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    def parameters(self):
        return self.model.parameters()

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _encode(self, prompts: list[str]) -> tuple[Tensor, Tensor]:
        self.tokenizer.padding_side = "left"
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True)
        return enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)

    @torch.no_grad()
    def act(self, obs: list[str], role: str, greedy: bool = False, generator: torch.Generator | None = None) -> Act:
        ids, attn = self._encode(list(obs))
        seed = int(torch.randint(0, 2**62, (1,), generator=generator)) if generator is not None else None
        cuda = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda, enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            out = self.model.generate(
                input_ids=ids,
                attention_mask=attn,
                max_new_tokens=self.max_new_tokens,
                do_sample=not greedy,
                temperature=self.temperature if not greedy else None,
                top_k=0 if not greedy else None,
                top_p=None,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
                output_scores=True,
                return_dict_in_generate=True,
            )
        resp = out.sequences[:, ids.shape[1] :]
        gen_logp = token_logprobs(torch.stack(out.scores, 1), resp).cpu()
        eos = self.tokenizer.eos_token_id
        is_eos = resp == eos
        # mask: tokens up to and including the first EOS
        after = (torch.cumsum(is_eos.long(), 1) - is_eos.long()) > 0
        mask = (~after).float()
        texts = self.tokenizer.batch_decode(
            torch.where(after, torch.full_like(resp, eos), resp), skip_special_tokens=True
        )
        parts = [
            self.logprobs([obs[i] for i in mb], role, resp[mb]).detach().cpu()
            for mb in _chunks(len(obs), self.micro_batch_size)
        ]
        return Act(responses=texts, tokens=resp.cpu(), mask=mask.cpu(), logp=torch.cat(parts), gen_logp=gen_logp)

    def logprobs(self, obs: list[str], role: str, tokens: Tensor) -> Tensor:
        """``[n, L]`` log-probs of ``tokens`` after each prompt (float32, on the model's device)."""
        ids, attn = self._encode(list(obs))
        tokens = tokens.to(ids.device)
        full = torch.cat([ids, tokens], 1)
        full_attn = torch.cat([attn, torch.ones_like(tokens)], 1)
        position_ids = (full_attn.cumsum(1) - 1).clamp_min(0)  # left padding: positions start at 0, as in generate
        logits = self.model(input_ids=full, attention_mask=full_attn, position_ids=position_ids).logits
        lg = logits[:, ids.shape[1] - 1 : -1].float()
        if self.temperature != 1.0:
            lg = lg / self.temperature
        out = token_logprobs(lg, tokens)
        if out.shape[1] != tokens.shape[1]:
            raise RuntimeError(f"log-probs for {out.shape[1]} positions, expected {tokens.shape[1]}")
        return out


def _chunks(n: int, size: int) -> list[list[int]]:
    idx = list(range(n))
    return [idx] if size <= 0 or size >= n else [idx[i : i + size] for i in range(0, n, size)]
