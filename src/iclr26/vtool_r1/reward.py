"""Outcome reward r_φ(I, x, y) of VTool-R1 (paper section 3.2): 1 if the FINAL answer is right, else 0.

* :func:`extract_final_answer`: the v1 regex ``FINAL ANSWER:\\s*(.*?)(?=\\.\\s|\\.?$)``; v2 falls back
  to ``... TERMINATE``, then ``ANSWER:``, then the raw text.
* :func:`exact_match_reward`: the tiny-scale judge (normalised exact match; multiple answers joined by
  ``||`` match ground truths joined by ``|||`` in any order).
* :func:`refocus_score`: the official no-judge fallback (numeric pairs score ``1 − |a−b|/max(|a|,|b|)``,
  strings exact; score = Σ best / #gt).
* :class:`JudgeClient`: the LLM judge of the real scale through an OpenAI-compatible ``/chat/completions``
  endpoint (v2 style: temperature 0, reply "1"/"0") via :mod:`iclr26.core.http`; a network or parse failure
  never raises and never scores 0 silently: it falls back to :func:`heuristic_reward` and is counted.

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
    "exact_match_reward",
    "extract_final_answer",
    "heuristic_reward",
    "process_reward",
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


def _num(s: str) -> float | None:
    try:
        return float(s.replace(",", "").replace("%", "").strip())
    except ValueError:
        return None


def refocus_score(answer: str | None, ground_truth: str) -> float:
    """The official heuristic fallback: mean over ground truths of the best-matching answer's score."""
    if answer is None:
        return 0.0
    answers = [a.strip() for a in answer.split("||") if a.strip()]
    gts = [g.strip() for g in ground_truth.split("|||") if g.strip()]
    if not gts:
        return 0.0
    total = 0.0
    for g in gts:
        best = 0.0
        for a in answers:
            ga, aa = _num(g), _num(a)
            if ga is not None and aa is not None:
                denom = max(abs(ga), abs(aa))
                s = 1.0 if denom == 0 else max(0.0, 1.0 - abs(ga - aa) / denom)
            else:
                s = float(_norm(a) == _norm(g))
            best = max(best, s)
        total += best
    return total / len(gts)


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
    """The no-judge outcome reward: 1 if the ReFocus score is >= 0.95 or the answers match exactly."""
    return float(refocus_score(answer, ground_truth) >= 0.95 or exact_match_reward(answer, ground_truth))


@dataclass(frozen=True)
class JudgeVerdict:
    """One judge call: ``score`` 0/1 when ``ok``, else a handled failure (``error`` from ``iclr26.core.http``
    or ``"bad_reply"`` when the reply holds no 0/1)."""

    ok: bool
    score: float = 0.0
    error: str = ""
    message: str = ""


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
        msgs = [
            {"role": "system", "content": JUDGE_SYSTEM},
            {
                "role": "user",
                "content": f"Question: {question}\nGround truth: {ground_truth}\n"
                f"Student answer: {answer}\nCorrect (1/0)?",
            },
        ]
        r = self.client().chat(msgs, temperature=0.0, max_tokens=self.max_tokens)
        if not r.ok:
            return JudgeVerdict(False, error=r.error, message=r.message)
        m = re.search(r"[01]", r.content)
        if m is None:
            return JudgeVerdict(False, error="bad_reply", message=f"judge reply is not 0/1: {r.content[:100]!r}")
        return JudgeVerdict(True, score=float(m.group() == "1"))

    def __call__(self, question: str, ground_truth: str, answer: str | None) -> float:
        if answer is None:
            return 0.0
        v = self.verdict(question, ground_truth, answer)
        if v.ok:
            return v.score
        self.failures.append(f"{v.error}: {v.message}")
        return heuristic_reward(answer, ground_truth)
