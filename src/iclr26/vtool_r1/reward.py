"""Outcome reward r_φ(I, x, y) of VTool-R1 (paper section 3.2): 1 if the FINAL answer is right, else 0.

* :func:`extract_final_answer`: the v1 regex ``FINAL ANSWER:\\s*(.*?)(?=\\.\\s|\\.?$)``; v2 falls back
  to ``... TERMINATE``, then ``ANSWER:``, then the raw text.
* :func:`exact_match_reward`: the tiny-scale judge (normalised exact match; multiple answers joined by
  ``||`` match ground truths joined by ``|||`` in any order).
* :func:`refocus_score`: the official no-judge score of a whole response (``compute_score`` in the official
  ``examples/reward_function/refocus.py``): the first ``FINAL ANSWER:`` match of the v1 regex *without*
  DOTALL (an answer followed by a newline before any period has no match: 0), split on ``||``; each answer
  scores its best ground truth (``|||``-separated): numbers (Python ``float``, so no ``1,000`` or ``12%``)
  ``1 − |a−b|/max(|a|,|b|)`` (0 if one is 0, 1 if equal), other strings case-sensitive equality; the score
  is the SUM over answers divided by the number of ground truths (``5||5`` against ``5`` scores 2).
* :class:`JudgeClient`: the LLM judge of the real scale through an OpenAI-compatible ``/chat/completions``
  endpoint (v2 style: temperature 0, reply "1"/"0") via :mod:`iclr26.core.http`; a network or parse failure
  never raises and never scores 0 silently: it falls back to :func:`heuristic_reward` and is counted.
  :class:`LocalJudge`: the same judge on a local Hugging Face causal LM (chat template, pure greedy).

No process reward: the paper's ablation shows it invites reward hacking. :func:`process_reward` exists
only for that ablation (+bonus on a successful call, −penalty on a failed one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from iclr26.core.http import ChatClient

__all__ = [
    "JudgeClient",
    "JudgeVerdict",
    "LocalJudge",
    "exact_match_reward",
    "extract_final_answer",
    "heuristic_reward",
    "process_reward",
    "official_final_answer",
    "refocus_answer_score",
    "refocus_score",
]

_FINAL = re.compile(r"FINAL ANSWER:\s*(.*?)(?=\.\s|\.?$)", re.DOTALL)
_ANSWER = re.compile(r"ANSWER:\s*(.*?)(?=\.\s|\.?$)", re.DOTALL)


def _strip_terminate(s: str) -> str:
    """``re.sub(r"\\s*TERMINATE\\s*$", "", s)`` in linear time (that regex is quadratic on long blanks)."""
    s = s.rstrip()
    return s[: -len("TERMINATE")].rstrip() if s.endswith("TERMINATE") else s


def _final_before_terminate(text: str) -> str | None:
    """Group 1 of ``FINAL ANSWER:\\s*(.*?)\\s*TERMINATE`` (DOTALL), in linear time.

    Only the first ``FINAL ANSWER:`` can match: a TERMINATE after a later one is also after the first. The
    regex itself re-scans the rest of the text from every ``FINAL ANSWER:`` (quadratic on model output).
    """
    p = text.find("FINAL ANSWER:")
    if p < 0:
        return None
    t = text.find("TERMINATE", p + len("FINAL ANSWER:"))
    return None if t < 0 else text[p + len("FINAL ANSWER:") : t].strip()


def extract_final_answer(text: str, version: str = "v2") -> str | None:
    """The final answer string, or None when there is none (v1: no ``FINAL ANSWER:``). Never raises on
    any input; linear time."""
    if not isinstance(text, str):
        return None
    m = _FINAL.search(text)
    if m and m.group(1).strip():
        return _strip_terminate(m.group(1).strip()) or None
    if version == "v1":
        return None
    m = _ANSWER.search(text)
    for cand in (_final_before_terminate(text), m.group(1) if m else None):
        if cand and cand.strip():
            return _strip_terminate(cand).strip().rstrip(".") or None
    raw = text.strip()
    return raw or None


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s.strip().lower().rstrip("."))


def exact_match_reward(answer: str | None, ground_truth: str) -> float:
    """1.0 if the answers (``||``-separated) equal the ground truths (``|||``-separated) as sets."""
    if answer is None:
        return 0.0
    got = sorted(_norm(a) for a in answer.split("||") if a.strip())
    want = sorted(_norm(g) for g in ground_truth.split("|||") if g.strip())
    return float(bool(want) and got == want)


def _float(s: str) -> float | None:
    """``float(s)`` as the official ``is_number`` accepts it (blanks around, ``1e3``, ``inf``), else None."""
    try:
        return float(s)
    except (ValueError, OverflowError):
        return None


_AT_END = "\n"


def _line_final(text: str, start: int) -> str | None:
    """Group 1 of ``FINAL ANSWER:\\s*(.*?)(?=\\.\\s|\\.?$)`` (no DOTALL) for the occurrence whose colon ends at
    ``start``: skip blanks (newlines too), then the shortest run of non-newline characters followed by ``". "``
    (a period and any blank), by the end of the text or the final newline, or by a period there. None if the
    line ends first. (If the greedy blank skip fails, the shorter skips fail too: they end on the same line.)"""
    n = len(text)
    j = start
    while j < n and text[j].isspace():
        j += 1
    s = j

    def at_end(k: int) -> bool:  # the regex's $ without MULTILINE
        return k == n or (k == n - 1 and text[k] == _AT_END)

    while True:
        if at_end(j):
            return text[s:j]
        if text[j] == "." and (j + 1 < n and text[j + 1].isspace() or at_end(j + 1)):
            return text[s:j]
        if text[j] == _AT_END:
            return None
        j += 1


def official_final_answer(text: str) -> str | None:
    """The first match of the official ``refocus.py`` answer regex (``re.findall(...)[0]``, no DOTALL), or
    None; linear time (the regex rescans a failing line from every ``FINAL ANSWER:`` on it)."""
    if not isinstance(text, str):
        return None
    key, failed_to, p = "FINAL ANSWER:", -1, text.find("FINAL ANSWER:")
    while p >= 0:
        c = p + len(key)
        j = c
        while j < len(text) and text[j].isspace():
            j += 1
        if j > failed_to:  # a start inside an already failed line fails the same way
            got = _line_final(text, c)
            if got is not None:
                return got
            failed_to = text.find(_AT_END, j)
            if failed_to < 0:
                break
        p = text.find(key, max(c, j))
    return None


def refocus_answer_score(answer: str, ground_truth: str) -> float:
    """The official per-answer part: Σ over ``answer.split("||")`` of the best score against
    ``ground_truth.split("|||")``, divided by the number of ground truths (no stripping, no lower-casing)."""
    gts = ground_truth.split("|||")
    total = 0.0
    for a in answer.split("||"):
        scores = []
        for g in gts:
            fa, fg = _float(a), _float(g)
            if fa is not None and fg is not None:
                if fg == fa:
                    scores.append(1.0)
                elif fg == 0 or fa == 0:
                    scores.append(0.0)
                else:
                    scores.append(1.0 - abs(fg - fa) / max(abs(fg), abs(fa)))
            elif a == g:
                scores.append(1.0)
        if scores:
            total += max(scores)
    return total / max(1, len(gts))


def refocus_score(response: str | None, ground_truth: str) -> float:
    """The official no-judge score of a whole response (see the module docstring); 0 without a match. It is
    not bounded to [0, 1] (repeated answers add up; numbers of opposite sign score below 0)."""
    ans = official_final_answer(response)
    return 0.0 if ans is None else refocus_answer_score(ans, ground_truth)


def process_reward(outcome: float, tool_called: bool, tool_ok: bool, bonus: float = 0.5, penalty: float = 0.5) -> float:
    """NOT the paper's reward: the process-reward ablation (+bonus on success, −penalty on failure)."""
    if not tool_called:
        return outcome
    return outcome + (bonus if tool_ok else -penalty)


JUDGE_SYSTEM = (
    "You grade answers. Given a question, the ground truth and a student's answer, reply with 1 "
    "if the answer has the same content as the ground truth (ignore units, formatting and order "
    "of multiple answers), otherwise reply with 0. Reply with a single digit."
)


def heuristic_reward(answer: str | None, ground_truth: str) -> float:
    """Our 0/1 no-judge reward of an extracted answer (not official): the answers match exactly (normalised,
    any order), or there are as many answers as ground truths and their official ReFocus score is >= 0.95."""
    if answer is None:
        return 0.0
    if exact_match_reward(answer, ground_truth):
        return 1.0
    same_count = len(answer.split("||")) == len(ground_truth.split("|||"))
    return float(same_count and 0.95 <= refocus_answer_score(answer, ground_truth) <= 1.0)


@dataclass(frozen=True)
class JudgeVerdict:
    """One judge call: ``score`` 0/1 when ``ok``, else a handled failure (``error`` from ``iclr26.core.http``
    or ``"bad_reply"`` when the reply holds no 0/1)."""

    ok: bool
    score: float = 0.0
    error: str = ""
    message: str = ""
    reply: str = ""
    """The judge's raw reply text ("" when the call failed)."""


def judge_messages(question: str, ground_truth: str, answer: str) -> list[dict]:
    """The judge's chat messages (system prompt + one question/ground truth/answer turn)."""
    return [
        {"role": "system", "content": JUDGE_SYSTEM},
        {
            "role": "user",
            "content": f"Question: {question}\nGround truth: {ground_truth}\nStudent answer: {answer}\nCorrect (1/0)?",
        },
    ]


def parse_verdict(text: str) -> JudgeVerdict:
    """1/0 from the first ``0``/``1`` in a judge reply, or a ``bad_reply`` failure."""
    m = re.search(r"[01]", text)
    if m is None:
        return JudgeVerdict(False, error="bad_reply", message=f"judge reply is not 0/1: {text[:100]!r}", reply=text)
    return JudgeVerdict(True, score=float(m.group() == "1"), reply=text)


@dataclass(frozen=True)
class JudgeClient:
    """LLM judge over an OpenAI-compatible chat endpoint (v2 style), e.g. Qwen2.5-7B-Instruct on vLLM.

    Transport through :class:`iclr26.core.http.ChatClient` (total deadline, body cap, no redirects). Calling
    the client never raises: a failed call (network, HTTP status, malformed or non-0/1 reply) scores with
    :func:`heuristic_reward` instead, and is recorded in ``failures`` so a run can report how often that
    happened; :meth:`verdict` gives the raw outcome.
    """

    api_base: str
    """e.g. ``http://127.0.0.1:7999/v1`` (the official code reads it from ``VTOOL_JUDGE_API_BASE``)."""
    model: str = "judge"
    """Served model name."""
    timeout_s: float = 30.0
    """Total deadline of one request (connect to last byte)."""
    max_tokens: int = 10
    """Reply budget (v2: 10)."""
    api_key: str | None = field(default=None, repr=False)
    """Sent as ``Authorization: Bearer ...`` when given."""
    max_body_bytes: int = 2**20
    """Largest reply body read."""
    failures: list = field(default_factory=list, compare=False, repr=False)
    """``"error: message"`` of every call that fell back to :func:`heuristic_reward` (appended, never raised)."""

    def __post_init__(self) -> None:
        self.client()  # validates the URL, deadline and cap

    def client(self) -> ChatClient:
        return ChatClient(self.api_base, self.model, self.api_key, self.timeout_s, self.max_body_bytes)

    def verdict(self, question: str, ground_truth: str, answer: str) -> JudgeVerdict:
        """One judge request: 1/0 from the first ``0``/``1`` in the reply, or a handled failure."""
        msgs = judge_messages(question, ground_truth, answer)
        r = self.client().chat(msgs, temperature=0.0, max_tokens=self.max_tokens)
        if not r.ok:
            return JudgeVerdict(False, error=r.error, message=r.message)
        return parse_verdict(r.content)

    def __call__(self, question: str, ground_truth: str, answer: str | None) -> float:
        if answer is None:
            return 0.0
        v = self.verdict(question, ground_truth, answer)
        if v.ok:
            return v.score
        self.failures.append(f"{v.error}: {v.message}")
        return heuristic_reward(answer, ground_truth)


class LocalJudge:
    """The same judge on a local Hugging Face causal LM (a folder, a registered name from ``iclr26 models``, or a
    loaded model and tokenizer): its chat template, pure greedy decoding (the v2 judge's temperature 0), at most
    ``max_tokens`` new tokens. As :class:`JudgeClient`, a failure (a generation error, a reply without 0/1) never
    raises: it scores with :func:`heuristic_reward` and is recorded in ``failures``."""

    def __init__(
        self, model_path: str | None = None, *, model=None, tokenizer=None, max_tokens: int = 10, device: str = "cpu"
    ) -> None:
        if model is None or tokenizer is None:
            if not model_path:
                raise ValueError("LocalJudge needs a model folder (or registered name) or a loaded model and tokenizer")
            from iclr26.core.hf import load_local

            model, tokenizer = load_local(model_path, device=device)
        self.model, self.tokenizer, self.max_tokens, self.device = model.eval(), tokenizer, int(max_tokens), device
        self.failures: list[str] = []

    def verdict(self, question: str, ground_truth: str, answer: str) -> JudgeVerdict:
        import torch

        from iclr26.core.hf import pure_generation_kwargs

        tok = self.tokenizer
        try:
            enc = tok.apply_chat_template(
                judge_messages(question, ground_truth, answer),
                add_generation_prompt=True,
                return_tensors="pt",
                return_dict=True,
            ).to(self.device)
            pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
            with torch.no_grad():
                out = self.model.generate(
                    **enc, max_new_tokens=self.max_tokens, pad_token_id=pad, **pure_generation_kwargs()
                )
            text = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        except Exception as exc:  # noqa: BLE001 - a local judge failure falls back, never crashes the run
            return JudgeVerdict(False, error="local_model", message=f"{type(exc).__name__}: {str(exc)[:200]}")
        return parse_verdict(text)

    __call__ = JudgeClient.__call__
