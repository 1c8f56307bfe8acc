"""Evaluation protocols (spec §3.4): single-path (teacher-forced), multi-path (offline graph walk with
step reward), noisy / AITZ-Noise (teacher-forced, coordinate-based) and ambiguous (with preset Q&A).

Agents return an :class:`Action`; anything else (a string, None, a malformed tuple, an exception raised
by the agent) becomes ``Action("invalid")``: an invalid step that keeps the page, never a crash.

The default scoring is our corrected reading. ``compat=True`` reproduces the released Mobile-Bench-v2
``eval.py`` (functions ``noise_data_test``, ``multi_path_test``; ``utils.comput_f1``), bugs included:

* noise test: every screen of the episode is in the denominator, GT ``back`` screens too (they are never
  credited, so an episode with a ``back`` screen cannot succeed); success = #correct == #screens;
* bounds checks are strict (``x1 < x < x2``) and the y-range reads ``click_area[1][0]`` (x2) as its lower
  bound instead of ``click_area[0][1]`` (y1);
* the scroll GT type is spelled ``'swpie'``, so scrolls are never credited in the noise test; the released
  swipe direction (smallest angle with ``'up' = (0, 1)``, i.e. dy > 0 is 'up') is :func:`released_direction`;
* type accuracy is incremented by 0 in the noise test;
* character F1: 1 when "无人应答" is a substring of the GT; bag of characters of ``list(text)``, spaces kept;
* aggregation is micro: noise action accuracy = sum #correct / sum #screens; multi-path action accuracy
  (our ``step_reward``) = sum of positional id matches / sum of gold lengths. Compat rows carry the counts
  (``n_correct``, ``n_steps``, ``n_type_ok``; ``matched``, ``n_gold``); aggregate them with
  ``mean_metrics(rows, micro=True)``.

The duplicate noise evaluator at the end of the released ``single_path_test`` (which counts type matches by
substring) reads an undefined ``all_ans_path`` and never runs; compat follows ``noise_data_test``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from iclr26.sman_bench.corpus import Corpus, UIElement, page_parent, page_path_ids, swipe_direction
from iclr26.sman_bench.instructions import Task, with_qa

ACTION_KINDS = ("click", "input", "scroll", "back", "ask", "invalid")
NO_ANSWER = "无人应答"  # "no answer": the preset answer when a question has none


@dataclass(frozen=True)
class Action:
    """An agent's action. ``index`` refers to ``Observation.elements``; ``text`` is the typed text
    (input), the asked slot (ask) or the reason (invalid); ``direction`` is for scrolls."""

    kind: str
    index: int | None = None
    text: str | None = None
    direction: str | None = None


INVALID = Action("invalid", text="malformed")


def normalize_action(x: Any) -> Action:
    """Any agent output -> a well-formed Action (malformed -> ``Action('invalid')``)."""
    if not isinstance(x, Action) or x.kind not in ACTION_KINDS:
        return INVALID
    if x.index is not None and (not isinstance(x.index, int) or isinstance(x.index, bool)):
        return INVALID
    if x.text is not None and not isinstance(x.text, str):
        return INVALID
    if x.direction is not None and not isinstance(x.direction, str):
        return INVALID
    return x


@dataclass
class Observation:
    """What an agent sees at one step."""

    instruction: str
    """the overall instruction (complete or easy, plus any Q&A answers received)."""
    step_instruction: str | None
    """the current step instruction (None when the protocol gives none)."""
    elements: list[UIElement]
    page: str
    app: str
    round: int = 0
    history: list[str] = field(default_factory=list)
    """summaries of the previous actions ("last action" memory)."""
    qa_slots: list[str] = field(default_factory=list)
    """slots for which a preset answer exists (ambiguous split; empty otherwise)."""


def safe_act(agent, obs: Observation) -> Action:
    try:
        return normalize_action(agent.act(obs))
    except Exception as exc:  # a crashing agent makes an invalid step, not a crashed evaluation
        return Action("invalid", text=f"agent raised {type(exc).__name__}")


def _reset(agent, task: Task):
    if hasattr(agent, "reset"):
        try:
            agent.reset(task)
        except Exception:
            pass


def describe(action: Action, elements: list[UIElement]) -> str:
    if action.kind in ("click", "input", "scroll") and action.index is not None and 0 <= action.index < len(elements):
        arg = "" if action.kind == "click" else ", " + repr(action.text or action.direction)
        return f"{action.kind}({elements[action.index].text!r}{arg})"
    return f"{action.kind}({action.text or ''})"


# --------------------------------------------------------------------------------------------------
# Single-path (teacher-forced)
# --------------------------------------------------------------------------------------------------


def _resolve(page, a: Action) -> int | None:
    if a.kind == "click":
        return page.resolve("click", a.index)
    if a.kind == "input":
        return page.resolve("input", a.index, a.text)
    if a.kind == "scroll":
        return page.resolve("scroll", a.index, a.direction)
    return None


def single_path_episode(corpus: Corpus, task: Task, agent) -> dict:
    """Teacher forcing: at step i show gold page i; the next page is always the gold page.

    success = all predicted ids equal the gold ids; action accuracy = #correct / L;
    type accuracy = #(predicted action type == gold action type) / L.
    """
    app = corpus.apps[task.app]
    gold = task.gold
    _reset(agent, task)
    page, history, correct, type_ok = task.root, [], 0, 0
    for i, g in enumerate(gold):
        view = app.page(page)
        obs = Observation(
            task.complete_instruct,
            task.step_instruct[i] if i < len(task.step_instruct) else None,
            view.elements,
            page,
            app.name,
            i,
            list(history),
        )
        a = safe_act(agent, obs)
        aid = _resolve(view, a)
        gk = view.action_for(g)
        correct += int(aid == g)
        type_ok += int(gk is not None and a.kind == gk[0])
        history.append(describe(a, view.elements))
        page = f"{page}_{g}"
    L = len(gold)
    return {"success": float(correct == L), "action_acc": correct / L, "type_acc": type_ok / L}


# --------------------------------------------------------------------------------------------------
# Multi-path (offline graph walk)
# --------------------------------------------------------------------------------------------------


def step_reward(page: str, target: str) -> float:
    """Partial credit: #positions where the reached page's path ids equal the target's, over L."""
    g = page_path_ids(target)
    return sum(int(p == t) for p, t in zip(page_path_ids(page), g)) / len(g)


def multi_path_episode(
    corpus: Corpus,
    task: Task,
    agent,
    max_rounds: int = 20,
    instruction: str = "complete",
    step_instructions: bool = True,
    allow_ask: bool = False,
    compat: bool = False,
    popup_rate: float = 0.0,
    popup_seed: int = 0,
    qa_in_prompt: bool = False,
    popup_phrasing: str = "train",
) -> dict:
    """Walk the graph from the root: ``page = back(page)`` or ``T.get((page, a), page)``; stop on the
    target or after ``max_rounds``. Metrics: success, step reward, #actions, #errors, gold-path match.

    ``instruction``: "complete" or "easy" (ambiguous split). With ``allow_ask`` an ``ask(slot)`` returns
    the preset answer (or "无人应答") and appends it to the instruction; asks do not move the page and
    do not count as actions, at most ``len(task.qa) + 2`` are answered.
    ``step_instructions``: give the step instruction chosen by the page depth (count of '_').
    ``qa_in_prompt``: the preset questions and answers are in the prompt from the start (the released ambiguous
    template's ``<questions>`` / ``<answers>``), :func:`iclr26.sman_bench.instructions.with_qa`.
    ``popup_rate``: probability that a pop-up/ad overlay covers a page on its first visit (noise in the
    walk). On an overlay, a click on Close/× or ``back`` dismisses it; a click on the ad opens the ad
    app's landing page, which only ``back`` leaves; anything else is an error. Overlay rounds count as
    actions but not towards the gold-path match.
    """
    if instruction not in ("complete", "easy"):
        raise ValueError(f"instruction must be 'complete' or 'easy', got {instruction!r}")
    if not 0 <= popup_rate <= 1:
        raise ValueError(f"popup_rate must be in [0, 1], got {popup_rate}")
    rng = np.random.default_rng(popup_seed) if popup_rate > 0 else None
    overlay, seen, popups = None, set(), 0
    app = corpus.apps[task.app]
    _reset(agent, task)
    text = task.complete_instruct if instruction == "complete" else task.easy_instruct
    text = with_qa(text, task.qa) if qa_in_prompt else text
    answers = {q["slot"]: q["answer"] for q in task.qa}
    page, history, actions, errors, asks = task.root, [], [], 0, 0
    rounds = 0
    while rounds < max_rounds and page != task.name:
        if rng is not None and page not in seen:
            seen.add(page)
            if rng.random() < popup_rate:
                overlay, popups = _overlay(corpus, task, rng, popup_phrasing), popups + 1
        if overlay is not None:
            obs = Observation(
                text, None, overlay["elements"], f"{page}#{overlay['kind']}", app.name, rounds, list(history)
            )
            overlay, err, desc = _overlay_step(corpus, overlay, safe_act(agent, obs))
            rounds, errors = rounds + 1, errors + err
            history.append(desc)
            continue
        view = app.page(page)
        depth = page.count("_")
        step = task.step_instruct[depth] if step_instructions and depth < len(task.step_instruct) else None
        obs = Observation(
            text, step, view.elements, page, app.name, rounds, list(history), list(answers) if allow_ask else []
        )
        a = safe_act(agent, obs)
        if a.kind == "ask":
            if allow_ask and asks < len(task.qa) + 2:
                asks += 1
                ans = answers.get((a.text or "").strip(), NO_ANSWER)
                text = f"{text} ({a.text}: {ans})"
                history.append(f"ask({a.text}) -> {ans}")
                continue
            errors += 1
        rounds += 1
        if a.kind == "back":
            page = page_parent(page)
            actions.append("back")
        elif a.kind != "ask":
            aid = _resolve(view, a)
            if aid is None or (page, aid) not in app.T:
                errors += 1
                actions.append(None)
            else:
                page = app.T[(page, aid)]
                actions.append(aid)
        history.append(describe(a, view.elements))
    success = page == task.name
    gold = task.gold
    row = {
        "success": float(success),
        "step_reward": step_reward(page, task.name),
        "n_actions": rounds,
        "errors": errors,
        "asks": asks,
        "gold_match": float(success and actions == gold),
        "popups": popups,
        "final_page": page,
    }
    if compat:  # released multi_path_test: counts for acc = sum_tasks matched / sum_tasks len(gold)
        row["matched"] = sum(int(p == t) for p, t in zip(page_path_ids(page), page_path_ids(task.name)))
        row["n_gold"] = len(page_path_ids(task.name))
    return row


def _overlay_step(corpus: Corpus, overlay: dict, a: Action) -> tuple[dict | None, int, str]:
    """One round on an overlay: Close/x or ``back`` dismisses it, the ad opens the ad app's landing page,
    anything else is an error. Returns (the overlay now shown or None, #errors, the action's summary)."""
    ok = a.kind == "click" and a.index is not None and 0 <= a.index < len(overlay["roles"])
    role = overlay["roles"][a.index] if ok else None
    desc = describe(a, overlay["elements"])
    if a.kind == "back" or role == "dismiss":
        return None, 0, desc
    if role == "ad":
        return _ad_page(corpus), 0, desc
    return overlay, 1, desc


def _overlay(corpus: Corpus, task: Task, rng, phrasing: str = "train") -> dict:
    from iclr26.sman_bench.generator import popup_screen

    lure = [w for w in (task.slots.get("item") or task.slots.get("section") or "").split() if len(w) > 2][:1]
    els = popup_screen(rng, lure, phrasing)
    return {
        "kind": "popup",
        "elements": [UIElement(e["kind"], e["text"], e["bounds"]) for e in els],
        "roles": [e["role"] for e in els],
    }


def _ad_page(corpus: Corpus) -> dict:
    ad = corpus.apps.get("adapp")
    els = ad.page(ad.root).elements if ad is not None else [UIElement("click", "View offer", ((40, 240), (1040, 370)))]
    return {"kind": "ad", "elements": list(els), "roles": ["ad_page"] * len(els)}


# --------------------------------------------------------------------------------------------------
# Noisy and AITZ-Noise (teacher-forced on the noisy trajectory, coordinate-based)
# --------------------------------------------------------------------------------------------------


def char_f1(pred: str, gt: str, compat: bool = False) -> float:
    """Character-level F1 over bags of characters: P = |p ∩ g| / |p|, R = |p ∩ g| / |g|, F1 = 2PR / (P + R).

    Default: spaces ignored, 1.0 when GT is exactly "无人应答". compat (released ``comput_f1``): 1.0 when
    "无人应答" is a substring of the GT, spaces are characters like any other.
    """
    pred, gt = str(pred), str(gt)
    if (NO_ANSWER in gt) if compat else (gt == NO_ANSWER):
        return 1.0
    if not compat:
        pred, gt = pred.replace(" ", ""), gt.replace(" ", "")
    p, g = Counter(pred), Counter(gt)
    common = sum((p & g).values())
    if common == 0:
        return 0.0
    prec, rec = common / sum(p.values()), common / sum(g.values())
    return 2 * prec * rec / (prec + rec)


def in_bounds(point, area, compat: bool = False) -> bool:
    """Is ``point`` inside ``area = [[x1,y1],[x2,y2]]``? Default: closed ranges x1 <= x <= x2, y1 <= y <= y2.
    compat (released): open ranges and the y-bug, x1 < x < x2 and x2 < y < y2."""
    x, y = point
    if compat:
        return area[0][0] < x < area[1][0] and area[1][0] < y < area[1][1]
    return area[0][0] <= x <= area[1][0] and area[0][1] <= y <= area[1][1]


# released calculate_direction: unit vectors in this order, the first smallest angle wins ('up' = +y)
_RELEASED_DIRECTIONS = (("up", (0, 1)), ("down", (0, -1)), ("left", (-1, 0)), ("right", (1, 0)))


def released_direction(start, end) -> str:
    """The released swipe direction: argmin over up/down/left/right of the angle between (dx, dy) and the
    unit vector, with 'up' = (0, 1), so dy > 0 (downwards on screen) is 'up'. Smallest angle = largest
    cosine = largest dot product with the unit vector (|d| is common); ties go to the earlier direction."""
    dx, dy = end[0] - start[0], end[1] - start[1]
    if dx == 0 and dy == 0:
        raise ValueError(f"zero-length swipe {start} -> {end} has no direction")
    best, best_dot = None, -math.inf
    for name, (ux, uy) in _RELEASED_DIRECTIONS:
        if (dot := dx * ux + dy * uy) > best_dot:
            best, best_dot = name, dot
    return best


def scroll_matches(area, direction: str | None, start, end, compat: bool = False) -> bool:
    """A predicted scroll (area, direction) against a GT swipe start -> end: both endpoints inside the area
    and the same direction. compat: released bounds (:func:`in_bounds` compat) and :func:`released_direction`
    (in the released noise test this comparison is never reached, see ``'swpie'``)."""
    if direction is None or not (in_bounds(start, area, compat) and in_bounds(end, area, compat)):
        return False
    return (released_direction if compat else swipe_direction)(start, end) == direction


def score_noisy_step(pred: Action, elements: list[UIElement], gt: dict, compat: bool = False) -> tuple[bool, bool]:
    """(correct, type_correct) of one prediction against a GT action dict
    ``{"type": click|scroll|type|back, "point" | "start"/"end" | "text"}``.

    compat (released ``noise_data_test``): strict bounds with the y-bug; a GT scroll never matches (the GT
    name is compared with ``'swpie'``); a GT text step is scored by char-F1 > 0.5 for any prediction that is
    not a click, a scroll or an invalid step (the released code branches on the predicted name only).
    """
    gtype = gt.get("type")
    el = elements[pred.index] if pred.index is not None and 0 <= pred.index < len(elements) else None
    if gtype == "click":
        ok_type = pred.kind == "click"
        ok = ok_type and el is not None and el.bounds is not None and in_bounds(gt["point"], el.bounds, compat)
        return ok, ok_type
    if gtype == "scroll":
        ok_type = pred.kind == "scroll"
        if compat or not ok_type or el is None or el.bounds is None:  # compat: 'swpie' != 'swipe'
            return False, ok_type
        return scroll_matches(el.bounds, pred.direction, gt["start"], gt["end"]), ok_type
    if gtype == "type":
        ok_type = pred.kind == "input"
        text_pred = pred.kind not in ("click", "scroll", "invalid") if compat else ok_type
        return text_pred and char_f1(pred.text or "", gt.get("text", ""), compat) > 0.5, ok_type
    return False, False


def noisy_episode(episode: dict, agent, compat: bool = False) -> dict:
    """Teacher-forced over ``episode["screens"]``; GT ``back`` steps are not scored.

    Default: back screens leave the denominator, n = #non-back screens; success = (#correct == n).
    compat (released): n = #screens (back screens stay in it), success = (#correct == n), type acc += 0;
    the row also carries ``n_correct``, ``n_type_ok`` and ``n_steps`` for micro averaging.
    """
    task = episode["task"]
    _reset(agent, task)
    history, n, correct, type_ok = [], 0, 0, 0
    for i, scr in enumerate(episode["screens"]):
        gt = scr["action"]
        obs = Observation(
            task.complete_instruct,
            scr.get("step_instruction"),
            scr["elements"],
            scr.get("page", ""),
            task.app,
            i,
            list(history),
        )
        a = safe_act(agent, obs)
        history.append(describe(a, scr["elements"]))
        n += int(compat)  # released: gt_action_sum += len(pred_path), back screens included
        if gt.get("type") == "back":
            continue
        ok, tok = score_noisy_step(a, scr["elements"], gt, compat)
        n += int(not compat)
        correct += int(ok)
        type_ok += 0 if compat else int(tok)
    if compat:
        d = max(n, 1)
        return {
            "success": float(correct == n),
            "action_acc": correct / d,
            "type_acc": type_ok / d,
            "n_correct": correct,
            "n_type_ok": type_ok,
            "n_steps": n,
        }
    n = max(n, 1)
    return {"success": float(correct == n), "action_acc": correct / n, "type_acc": type_ok / n}


# micro averages: metric -> (numerator count, denominator count) carried by compat rows
MICRO_KEYS = {
    "action_acc": ("n_correct", "n_steps"),
    "type_acc": ("n_type_ok", "n_steps"),
    "step_reward": ("matched", "n_gold"),
}


def mean_metrics(rows: list[dict], micro: bool = False) -> dict:
    """Mean over episodes of every numeric field. ``micro=True`` (released aggregation): each metric of
    :data:`MICRO_KEYS` present in the rows is sum(numerator) / sum(denominator) over all episodes instead
    of the mean of per-episode ratios; every row must carry the counts (compat rows do)."""
    if not rows:
        return {}
    keys = [k for k in rows[0] if isinstance(rows[0][k], int | float)]
    out = {k: float(sum(r[k] for r in rows) / len(rows)) for k in keys}
    if micro:
        for k, (num, den) in MICRO_KEYS.items():
            if k not in out:
                continue
            if any(num not in r or den not in r for r in rows):
                raise ValueError(f"micro averaging of {k!r} needs {num!r} and {den!r} in every row (use compat=True)")
            total = sum(r[den] for r in rows)
            if total == 0:
                raise ValueError(f"micro averaging of {k!r}: the {den!r} counts sum to 0")
            out[k] = float(sum(r[num] for r in rows) / total)
    return out


def finite(x: float) -> bool:
    return isinstance(x, float) and math.isfinite(x)
