"""LLM backends, chosen per role (the paper mixes GPT-4o for vision/grounding/planning with o1-mini for
code, reviews and fixes; official ``DEFAULT_PARAMS``: temperature 0.2, top_p 1, frequency_penalty 1,
at most 4096 tokens).

* :class:`OpenAICompatBackend`: any OpenAI-compatible ``/chat/completions`` endpoint (vLLM, llama.cpp
  server, OpenAI) through ``iclr26.core.http.ChatClient`` (deadline, body cap, handled failures).
* :class:`HFBackend`: a local Hugging Face causal LM (``iclr26.core.hf``; nothing downloads).
* :class:`~iclr26.rosetta.standin.ScriptedOfflineBackend`: the deterministic stand-in.
* :class:`RoleRouter`: role -> backend, and the JSONL transcript of every call.

A backend either returns the reply text or raises :class:`BackendError` (one line, its kind); the
pipeline turns that into a structured failure of the step (e.g. a reward that stays ``{}`` with the
reason), never a crashed run.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from iclr26.core.http import ChatClient

__all__ = ["DEFAULT_PARAMS", "BackendError", "HFBackend", "LLMBackend", "OpenAICompatBackend", "RoleRouter"]

DEFAULT_PARAMS = {"temperature": 0.2, "top_p": 1.0, "frequency_penalty": 1.0, "max_tokens": 4096}


class BackendError(RuntimeError):
    """A failed LLM call: ``kind`` (e.g. connect, timeout, bad_json) and a one-line message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind, self.message = kind, message


class LLMBackend(Protocol):
    name: str

    def complete(self, role: str, messages: list[dict]) -> str: ...


class OpenAICompatBackend:
    """Chat completions from an OpenAI-compatible server; failures raise :class:`BackendError`."""

    def __init__(
        self,
        base_url: str,
        model: str = "default",
        api_key: str | None = None,
        deadline_s: float = 120.0,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        self.client = ChatClient(base_url, model=model, api_key=api_key, deadline_s=deadline_s)
        self.params = dict(DEFAULT_PARAMS if params is None else params)
        self.name = f"openai:{model}@{base_url}"

    def complete(self, role: str, messages: list[dict]) -> str:
        res = self.client.chat(messages, **self.params)
        if not res.ok:
            raise BackendError(res.error or "transport", res.message or "request failed")
        return res.content


class HFBackend:
    """Pure greedy generation from a local Hugging Face causal LM (a folder, a registered name from ``iclr26 models``,
    or an already loaded model/tokenizer) through its chat template."""

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        model: Any = None,
        tokenizer: Any = None,
        max_new_tokens: int = 512,
        max_prompt_tokens: int | None = None,
        device: str = "cpu",
    ) -> None:
        if model is None or tokenizer is None:
            if path is None:
                raise ValueError("HFBackend needs a local path or a model and tokenizer")
            from iclr26.core.hf import load_local

            model, tokenizer = load_local(path)
        self.model, self.tok, self.device = model.to(device).eval(), tokenizer, device
        self.max_new_tokens = max_new_tokens
        limit = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", 2048)
        self.max_prompt_tokens = max_prompt_tokens or max(1, int(limit) - max_new_tokens)
        self.name = f"hf:{path or type(model).__name__}"

    @property
    def _templated(self) -> bool:
        return bool(getattr(self.tok, "chat_template", None))

    def _prompt(self, messages: list[dict]) -> str:
        if self._templated:
            return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return "\n\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\n\nassistant:"

    def complete(self, role: str, messages: list[dict]) -> str:
        import torch

        from iclr26.core.hf import pure_generation_kwargs

        # the chat template adds the special tokens itself (a second BOS would be out of distribution)
        ids = self.tok(self._prompt(messages), return_tensors="pt", add_special_tokens=not self._templated)["input_ids"]
        ids = ids[:, -self.max_prompt_tokens :]  # keep the end (the request) when the prompt is too long
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id
        with torch.no_grad():
            out = self.model.generate(
                ids.to(self.device),
                attention_mask=torch.ones_like(ids).to(self.device),
                max_new_tokens=self.max_new_tokens,
                pad_token_id=0 if pad is None else pad,
                # pure greedy: no repetition penalty / top-k / top-p filled in from the checkpoint's generation_config
                **pure_generation_kwargs(),
            )
        return self.tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


class RoleRouter:
    """Role -> backend (``default`` for the rest); every call and its outcome goes to the transcript."""

    def __init__(
        self,
        default: LLMBackend,
        per_role: Mapping[str, LLMBackend] | None = None,
        transcript: str | Path | None = None,
    ) -> None:
        self.default, self.per_role = default, dict(per_role or {})
        self.path = Path(transcript) if transcript else None
        self.records: list[dict] = []
        self._lock = threading.Lock()
        self.context: dict[str, Any] = {}

    def backend_for(self, role: str) -> LLMBackend:
        return self.per_role.get(role, self.default)

    def complete(self, role: str, messages: list[dict]) -> str:
        backend = self.backend_for(role)
        try:
            reply, error = backend.complete(role, messages), None
        except BackendError as e:
            reply, error = None, {"kind": e.kind, "message": e.message}
        except Exception as e:  # a backend bug must not lose the run: record it as a failed call
            reply, error = None, {"kind": type(e).__name__, "message": str(e)[:300]}
        self.log(
            {"role": role, "backend": getattr(backend, "name", "?"), "prompt": messages, "reply": reply, "error": error}
        )
        if error is not None:
            raise BackendError(error["kind"], error["message"])
        return reply

    def log(self, record: dict) -> None:
        record = {**self.context, **record}
        with self._lock:
            self.records.append(record)
            if self.path is not None:
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(record, default=str) + "\n")
