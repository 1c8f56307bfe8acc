"""Outcome reward r_φ(I, x, y) of VTool-R1 (paper section 3.2): 1 if the FINAL answer is right, else 0.

* :func:`extract_final_answer`: the v1 regex ``FINAL ANSWER:\\s*(.*?)(?=\\.\\s|\\.?$)``; v2 falls back
  to ``... TERMINATE``, then ``ANSWER:``, then the raw text.
* :func:`exact_match_reward`: the tiny-scale judge (normalised exact match; multiple answers joined by
  ``||`` match ground truths joined by ``|||`` in any order).
* :func:`refocus_score`: the official no-judge fallback (numeric pairs score ``1 − |a−b|/max(|a|,|b|)``,
  strings exact; score = Σ best / #gt).
* :class:`JudgeClient`: the LLM judge of the real scale through an OpenAI-compatible ``/chat/completions``
  endpoint (v2 style: temperature 0, reply "1"/"0"); a network or parse failure raises, never scores 0
  silently.

No process reward: the paper's ablation shows it invites reward hacking. :func:`process_reward` exists
only for that ablation (+bonus on a successful call, −penalty on a failed one).
"""

from __future__ import annotations

import json
import re
import urllib.request
from dataclasses import dataclass

__all__ = ["JudgeClient", "exact_match_reward", "extract_final_answer", "process_reward", "refocus_score"]

_FINAL = re.compile(r"FINAL ANSWER:\s*(.*?)(?=\.\s|\.?$)", re.DOTALL)
_TERMINATE = re.compile(r"FINAL ANSWER:\s*(.*?)\s*TERMINATE", re.DOTALL)
_ANSWER = re.compile(r"ANSWER:\s*(.*?)(?=\.\s|\.?$)", re.DOTALL)


def extract_final_answer(text: str, version: str = "v2") -> str | None:
    """The final answer string, or None when there is none (v1: no ``FINAL ANSWER:``)."""
    if not isinstance(text, str):
        return None
    m = _FINAL.search(text)
    if m and m.group(1).strip():
        ans = m.group(1).strip()
        return re.sub(r"\s*TERMINATE\s*$", "", ans).strip() or None
    if version == "v1":
        return None
    for pat in (_TERMINATE, _ANSWER):
        m = pat.search(text)
        if m and m.group(1).strip():
            return re.sub(r"\s*TERMINATE\s*$", "", m.group(1)).strip().rstrip(".") or None
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


def process_reward(outcome: float, tool_called: bool, tool_ok: bool, bonus: float = 0.5,
                   penalty: float = 0.5) -> float:
    """NOT the paper's reward: the process-reward ablation (+bonus on success, −penalty on failure)."""
    if not tool_called:
        return outcome
    return outcome + (bonus if tool_ok else -penalty)


JUDGE_SYSTEM = ("You grade answers. Given a question, the ground truth and a student's answer, reply with 1 "
                "if the answer has the same content as the ground truth (ignore units, formatting and order "
                "of multiple answers), otherwise reply with 0. Reply with a single digit.")


@dataclass(frozen=True)
class JudgeClient:
    """LLM judge over an OpenAI-compatible chat endpoint (v2 style), e.g. Qwen2.5-7B-Instruct on vLLM."""

    api_base: str
    """e.g. ``http://127.0.0.1:7999/v1`` (the official code reads it from ``VTOOL_JUDGE_API_BASE``)."""
    model: str = "judge"
    """Served model name."""
    timeout_s: float = 30.0
    """HTTP timeout per request."""
    max_tokens: int = 10
    """Reply budget (v2: 10)."""

    def __call__(self, question: str, ground_truth: str, answer: str | None) -> float:
        if answer is None:
            return 0.0
        body = {"model": self.model, "temperature": 0.0, "max_tokens": self.max_tokens,
                "messages": [{"role": "system", "content": JUDGE_SYSTEM},
                             {"role": "user", "content": f"Question: {question}\nGround truth: {ground_truth}\n"
                                                         f"Student answer: {answer}\nCorrect (1/0)?"}]}
        req = urllib.request.Request(self.api_base.rstrip("/") + "/chat/completions",
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 (user-given local URL)
            reply = json.loads(resp.read().decode())
        try:
            text = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as e:
            raise ValueError(f"judge reply has no choices[0].message.content: {str(reply)[:200]}") from e
        digits = re.findall(r"[01]", text)
        if not digits:
            raise ValueError(f"judge reply is not 0/1: {text[:100]!r}")
        return float(digits[0] == "1")
