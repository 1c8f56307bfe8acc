"""lm-evaluation-harness path for any :class:`RecursiveNeoX` (the paper's evaluation, Appendix B).

The paper scores its models with lm-evaluation-harness (LAMBADA, PIQA, HellaSwag, WinoGrande, ARC-E/C, SciQ,
MMLU-continuation; 0- and 5-shot) and reports perplexities. A recursive model with a MeSH buffer or an anchor
has no Hugging Face ``GPTNeoXForCausalLM`` layout, so instead of an export this module gives the harness's
model interface directly: :class:`MeshLM` implements ``loglikelihood``, ``loglikelihood_rolling`` and
``generate_until`` (greedy) on top of the model's logits. It subclasses ``lm_eval.api.model.LM`` when
lm-evaluation-harness is installed, so ``lm_eval.simple_evaluate(model=MeshLM(...), tasks=[...])`` accepts
it; without the harness the class is the same and its methods take any objects with an ``args`` tuple::

    from iclr26.mesh.evaluate import MeshLM
    from iclr26.mesh.train import load_trained
    lm = MeshLM(load_trained("runs/mesh_1.4b"), tokenizer)          # tokenizer: encode/decode (GPT-NeoX's)
    import lm_eval
    lm_eval.simple_evaluate(model=lm, tasks=["lambada_openai", "piqa"], num_fewshot=0)

Tokenisation follows the harness's conventions: trailing whitespace of a context moves to the continuation,
the continuation's tokens are those of ``encode(context + continuation)`` after ``encode(context)``, an empty
context is the end-of-text token, inputs longer than ``max_length`` keep their rightmost tokens, and rolling
log-likelihoods score every token exactly once (the first one after the end-of-text token) in windows of at
most ``max_length`` predictions, each with as much left context as fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

try:  # the harness is optional: without it MeshLM is a plain class with the same methods
    from lm_eval.api.model import LM as _HarnessLM
except ImportError:  # pragma: no cover - depends on the environment

    class _HarnessLM:  # type: ignore[no-redef]
        """Stand-in for ``lm_eval.api.model.LM`` (single process, no request cache)."""

        def __init__(self) -> None:
            self._rank = 0
            self._world_size = 1

        @property
        def rank(self) -> int:
            return self._rank

        @property
        def world_size(self) -> int:
            return self._world_size


HAS_LM_EVAL = _HarnessLM.__module__.startswith("lm_eval")


class MeshLM(_HarnessLM):
    """lm-evaluation-harness model interface over a :class:`RecursiveNeoX` (or any ``ids -> logits`` module).

    model: the language model; ``model(ids)`` returns logits (B, T, V).
    tokenizer: ``encode(str) -> list[int]`` and ``decode(list[int]) -> str`` (a Hugging Face tokenizer works).
    batch_size: sequences per forward pass.
    max_length: longest input (default ``model.cfg.max_seq_len``).
    eot_token_id: end-of-text id (default ``tokenizer.eos_token_id``): the context of an empty context and
        of a rolling log-likelihood, and a stop token for generation.
    max_gen_toks: default cap on generated tokens.
    device: where inputs go (default: the model's device).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        batch_size: int = 8,
        max_length: int | None = None,
        eot_token_id: int | None = None,
        max_gen_toks: int = 256,
        device: str | torch.device | None = None,
    ) -> None:
        super().__init__()
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = int(batch_size)
        cfg = getattr(model, "cfg", None)
        self.max_length = int(max_length if max_length is not None else cfg.max_seq_len)
        eot = eot_token_id if eot_token_id is not None else getattr(tokenizer, "eos_token_id", None)
        if eot is None:
            raise ValueError("eot_token_id is needed (the tokenizer has no eos_token_id)")
        self.eot_token_id = int(eot)
        self.max_gen_toks = int(max_gen_toks)
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        if self.batch_size < 1 or self.max_length < 2:
            raise ValueError("batch_size must be >= 1 and max_length >= 2")

    # ---- tokenisation (the harness's conventions) ----
    def tok_encode(self, text: str) -> list[int]:
        try:
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        except TypeError:
            return list(self.tokenizer.encode(text))

    def tok_decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """(context ids, continuation ids): trailing spaces of the context move to the continuation; the
        continuation ids are ``encode(context + continuation)`` after ``len(encode(context))``."""
        if context == "":
            return [self.eot_token_id], self.tok_encode(continuation)
        n_space = len(context) - len(context.rstrip())
        if n_space:
            context, continuation = context[:-n_space], context[-n_space:] + continuation
        whole = self.tok_encode(context + continuation)
        ctx = self.tok_encode(context)
        return (ctx or [self.eot_token_id]), whole[len(ctx) :]  # a whitespace-only context acts as an empty one

    # ---- scoring ----
    @torch.no_grad()
    def score_tokens(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(sum log p(continuation | context), greedy) per (context ids, continuation ids) pair.

        The input is ``(context + continuation)[:-1]`` cut to its last ``max_length`` tokens; batches are
        right-padded (causal: padding after a position does not change its logits).
        """
        out: list[tuple[float, bool]] = []
        for i in range(0, len(pairs), self.batch_size):
            chunk = pairs[i : i + self.batch_size]
            inputs, n_cont = [], []
            for ctx, cont in chunk:
                if not cont:
                    raise ValueError("empty continuation")
                if len(cont) > self.max_length:
                    raise ValueError(f"continuation of {len(cont)} tokens > max_length {self.max_length}")
                inputs.append((list(ctx) + list(cont))[-(self.max_length + 1) :][:-1])
                n_cont.append(len(cont))
            width = max(len(x) for x in inputs)
            ids = torch.full((len(inputs), width), self.eot_token_id, dtype=torch.long)
            for r, x in enumerate(inputs):
                ids[r, : len(x)] = torch.tensor(x, dtype=torch.long)
            logp = F.log_softmax(self.model(ids.to(self.device)).float(), dim=-1).cpu()
            for r, ((_, cont), x, n) in enumerate(zip(chunk, inputs, n_cont)):
                lp = logp[r, len(x) - n : len(x)]  # position j predicts token j + 1 of (context + continuation)
                target = torch.tensor(cont, dtype=torch.long)
                total = float(lp.gather(-1, target[:, None]).sum())
                out.append((total, bool((lp.argmax(-1) == target).all())))
        return out

    def loglikelihood(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """Per request ``args = (context, continuation)``: (log-probability of the continuation, greedy)."""
        return self.score_tokens([self.encode_pair(*req.args) for req in requests])

    def rolling_windows(self, ids: Sequence[int]) -> list[tuple[list[int], list[int]]]:
        """(context, targets) windows that predict every token of ``ids`` once, the first after end-of-text.

        Each window predicts at most ``max_length`` tokens and gets as much left context as fits.
        """
        toks = [self.eot_token_id, *ids]
        windows, a = [], 1
        while a < len(toks):
            b = min(len(toks), a + self.max_length)
            lo = max(0, b - 1 - self.max_length)
            windows.append((toks[lo:a], toks[a:b]))
            a = b
        return windows

    def loglikelihood_rolling(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list[float]:
        """Per request ``args = (text,)``: log-probability of the whole text given end-of-text."""
        out = []
        for req in requests:
            out.append(sum(lp for lp, _ in self.score_tokens(self.rolling_windows(self.tok_encode(req.args[0])))))
        return out

    @torch.no_grad()
    def generate_until(self, requests: Sequence[Any], disable_tqdm: bool = False) -> list[str]:
        """Per request ``args = (context, gen_kwargs)``: greedy continuation, cut at the first ``until`` string,
        at end-of-text or after ``max_gen_toks`` tokens (no KV cache: the full prefix is recomputed)."""
        out = []
        for req in requests:
            context, kw = req.args[0], dict(req.args[1]) if len(req.args) > 1 else {}
            if kw.get("do_sample") and float(kw.get("temperature", 1.0)) > 0:
                raise NotImplementedError("MeshLM generates greedily only (do_sample=False or temperature=0)")
            until = kw.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(kw.get("max_gen_toks", self.max_gen_toks))
            ids = self.tok_encode(context) or [self.eot_token_id]
            new: list[int] = []
            text = ""
            for _ in range(max_new):
                x = torch.tensor([(ids + new)[-self.max_length :]], dtype=torch.long, device=self.device)
                nxt = int(self.model(x)[0, -1].argmax())
                if nxt == self.eot_token_id:
                    break
                new.append(nxt)
                text = self.tok_decode(new)
                cut = [text.index(s) for s in until if s and s in text]
                if cut:
                    text = text[: min(cut)]
                    break
            out.append(text)
        return out

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tokenizer, "name_or_path", type(self.tokenizer).__name__))
