"""An LLM agent for any OpenAI-compatible chat endpoint (vLLM, llama.cpp server, OpenAI) via :mod:`iclr26.core.http`,
or for a local Hugging Face causal LM with a chat template (:class:`LocalChat`, ``agent=llm_local``).

AppAgent-style text prompt (spec §3.3): the task, the current step instruction (if any), the last
actions ("Summary" memory) and the element list tagged ``c1..`` (clicks), ``i1..`` (inputs), ``s1..``
(scrollable regions). The model answers ``Observation / Thought / Action / Summary``; the Action line
is one of ``click(c3)``, ``input(i1, "text")``, ``scroll(s1, "up")``, ``back()``, ``ask("slot")``.
Anything unparsable, and any HTTP/network/JSON failure (total deadline, body cap, refused redirect: see
:class:`iclr26.core.http.ChatClient`), becomes ``Action("invalid", text=reason)``; :meth:`LLMAgent.act`
never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from iclr26.core.http import ChatClient, ChatResult
from iclr26.sman_bench.evaluate import Action, Observation

SYSTEM = (
    "You are an agent operating a smartphone app. You see the task and the list of UI elements. "
    'Functions: click(tag), input(tag, "text"), scroll(tag, "up|down|left|right"), back()'
    ', ask("slot") to ask the user for a missing detail. Answer in four lines:\n'
    "Observation: ...\nThought: ...\nAction: <one function call>\nSummary: ..."
)


@dataclass(frozen=True)
class LLMConfig:
    """Endpoint and decoding settings (the released config: temperature 0.0, max_tokens 300)."""

    base_url: str
    """e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended)."""
    model: str = "default"
    """the served model name."""
    api_key: str | None = field(default=None, repr=False)
    """sent as ``Authorization: Bearer ...`` when given (never to another host: redirects are refused)."""
    temperature: float = 0.0
    """0.0: deterministic decoding, as in the released config."""
    max_tokens: int = 300
    """completion length cap, as in the released config."""
    timeout_s: float = 60.0
    """total deadline of one request (connect to last byte), not a per-read timeout."""
    max_body_bytes: int = 4 * 2**20
    """largest reply body read; a larger one is an endpoint error."""

    def __post_init__(self):
        if not isinstance(self.base_url, str) or not re.match(r"^https?://", self.base_url):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        self.client()  # validates the URL, deadline and cap

    def client(self) -> ChatClient:
        return ChatClient(self.base_url, self.model, self.api_key, self.timeout_s, self.max_body_bytes)


def tag_elements(obs: Observation) -> tuple[list[str], dict[str, int]]:
    lines, tags, counts = [], {}, {"click": 0, "input": 0, "scroll": 0}
    for i, e in enumerate(obs.elements):
        counts[e.kind] = counts.get(e.kind, 0) + 1
        tag = {"click": "c", "input": "i", "scroll": "s"}.get(e.kind, "e") + str(counts[e.kind])
        tags[tag] = i
        lines.append(f'{tag}: {e.kind} "{e.text}"')
    return lines, tags


def build_prompt(obs: Observation) -> str:
    lines, _ = tag_elements(obs)
    parts = [f"Task: {obs.instruction}"]
    if obs.step_instruction:
        parts.append(f"Current step: {obs.step_instruction}")
    if obs.qa_slots:
        parts.append("You may ask about: " + ", ".join(obs.qa_slots))
    if obs.history:
        parts.append("Last actions: " + "; ".join(obs.history[-3:]))
    parts.append("Elements:\n" + "\n".join(lines))
    return "\n".join(parts)


_ACTION = re.compile(r"Action\s*:\s*(.+)", re.I)
_CALL = re.compile(r"^\s*(click|input|scroll|back|ask)\s*\((.*)\)\s*$", re.I | re.S)


def parse_action(text, obs: Observation) -> Action:
    """The model's reply -> Action; malformed -> ``Action("invalid", text=reason)``. Never raises, linear time."""
    if not isinstance(text, str):
        return Action("invalid", text="no text")
    m = _ACTION.search(text)
    line = (m.group(1) if m else text).strip()  # "Action:" followed by blanks only leaves nothing
    line = line.splitlines()[0].strip().strip("`") if line else ""
    c = _CALL.match(line)
    if not c:
        return Action("invalid", text="unparsable action")
    fn, args = c.group(1).lower(), c.group(2).strip()
    _, tags = tag_elements(obs)
    if fn == "back":
        return Action("back")
    strs = re.findall(r"[\"']([^\"']*)[\"']", args)
    if fn == "ask":
        return (
            Action("ask", text=strs[0] if strs else args.strip())
            if (strs or args.strip())
            else Action("invalid", text="empty ask")
        )
    tag = args.split(",")[0].strip().strip("\"'").lower()
    if tag not in tags:
        return Action("invalid", text=f"unknown tag {tag!r}")
    if fn == "click":
        return Action("click", tags[tag])
    if fn == "input":
        return (
            Action("input", tags[tag], text=strs[-1])
            if len(args.split(",")) > 1 and strs
            else Action("invalid", text="input without text")
        )
    direction = (strs[-1] if strs else "").lower()
    if direction not in ("up", "down", "left", "right"):
        return Action("invalid", text="bad scroll direction")
    return Action("scroll", tags[tag], direction=direction)


def chat(cfg: LLMConfig, messages: list[dict]) -> ChatResult:
    """One POST to ``{base_url}/chat/completions``: the first choice's content or a handled failure."""
    return cfg.client().chat(messages, temperature=cfg.temperature, max_tokens=cfg.max_tokens)


class LocalChat:
    """A local Hugging Face causal LM (a folder, or a registered name from ``iclr26 models``) as the chat endpoint:
    its chat template, pure greedy decoding (the released config's temperature 0), at most ``max_tokens`` new
    tokens. Any failure (a template error, a generation error) is a handled :class:`ChatResult`, as over HTTP."""

    def __init__(
        self, model_path: str | None = None, max_tokens: int = 300, device: str = "cpu", *, model=None, tokenizer=None
    ):
        if model is None or tokenizer is None:
            if not model_path:
                raise ValueError("LocalChat needs a model folder (or registered name) or a loaded model and tokenizer")
            from iclr26.core.hf import load_local

            model, tokenizer = load_local(model_path, device=device)
        self.model, self.tokenizer = model, tokenizer
        self.max_tokens, self.device = int(max_tokens), device

    def __call__(self, messages: list[dict]) -> ChatResult:
        import torch

        from iclr26.core.hf import pure_generation_kwargs

        try:
            enc = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            ).to(self.device)
            tok = self.tokenizer
            pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
            with torch.no_grad():
                out = self.model.generate(
                    **enc, max_new_tokens=self.max_tokens, pad_token_id=pad, **pure_generation_kwargs()
                )
            text = self.tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        except Exception as exc:  # noqa: BLE001 - a local model failure is an invalid step, never a crash
            return ChatResult(False, error="local_model", message=f"{type(exc).__name__}: {str(exc)[:200]}")
        return ChatResult(True, content=text)


_LOCAL: dict[tuple[str, int, str], LocalChat] = {}


def local_chat(model_path: str, max_tokens: int = 300, device: str = "cpu") -> LocalChat:
    """One :class:`LocalChat` per (model, length, device) per process: agents are made per episode."""
    key = (str(model_path), int(max_tokens), device)
    if key not in _LOCAL:
        _LOCAL[key] = LocalChat(model_path, max_tokens, device)
    return _LOCAL[key]


class LLMAgent:
    """AppAgent-v1-style single agent over an OpenAI-compatible endpoint (``cfg``) or a local chat callable
    (``chat_fn(messages) -> ChatResult``, e.g. :class:`LocalChat`)."""

    def __init__(self, cfg: LLMConfig | None = None, chat_fn=None):
        if (cfg is None) == (chat_fn is None):
            raise ValueError("LLMAgent needs exactly one of cfg (an HTTP endpoint) or chat_fn (a local model)")
        self.cfg, self.chat_fn = cfg, chat_fn
        self.errors: list[str] = []

    def reset(self, task):
        pass

    def act(self, obs: Observation) -> Action:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": build_prompt(obs)}]
        reply = self.chat_fn(messages) if self.chat_fn is not None else chat(self.cfg, messages)
        if not reply.ok:
            self.errors.append(f"{reply.error}: {reply.message}")
            return Action("invalid", text=f"endpoint error: {reply.error}")
        return parse_action(reply.content, obs)
