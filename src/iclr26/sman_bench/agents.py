"""Agents: Oracle (BFS on the graph), GoldPrefix (correct for a fraction of the path, then stuck),
Random, Lexical (token overlap; optionally takes shortcuts), the Asking and NoiseAware wrappers, and
the behaviour-cloned TinyBC element scorer.

An agent has ``reset(task)`` and ``act(obs) -> Action`` (see :mod:`iclr26.sman_bench.evaluate`).
"""

from __future__ import annotations

import re
import zlib
from collections import deque

import numpy as np
import torch

from iclr26.sman_bench.corpus import Corpus, page_path_ids
from iclr26.sman_bench.evaluate import Action, Observation
from iclr26.sman_bench.instructions import VAGUE, Task

STOP = {
    "the",
    "and",
    "a",
    "an",
    "of",
    "to",
    "in",
    "on",
    "for",
    "its",
    "then",
    "open",
    "find",
    "go",
    "from",
    "select",
    "choose",
    "pick",
    "show",
    "check",
    "view",
    "section",
    "tab",
    "into",
    "box",
    "type",
    "more",
    "scroll",
    "swipe",
    "list",
    "items",
    "see",
    "browse",
    "search",
    "filter",
    "by",
    "up",
}
SHORTCUT_PREFIXES = ("recommended:", "popular:", "similar:")
DISMISS = {"close", "×", "x", "skip", "dismiss", "no thanks"}


def tokens(text: str | None) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", (text or "").lower()) if w not in STOP}


def is_shortcut(text: str) -> bool:
    return text.lower().startswith(SHORTCUT_PREFIXES)


class OracleAgent:
    """BFS over the corpus graph to the target; ``shortcuts=False`` follows the gold (discovery) path.
    Privileged: it reads the task's target page. Upper bound."""

    def __init__(self, corpus: Corpus, shortcuts: bool = True):
        self.corpus, self.shortcuts = corpus, shortcuts

    def reset(self, task: Task):
        self.task = task
        self.app = self.corpus.apps[task.app]

    def _next_aid(self, page: str) -> int | None:
        target = self.task.name
        if not self.shortcuts:
            p, g = page_path_ids(page), self.task.gold
            if page.split("_")[0] == target.split("_")[0] and p == g[: len(p)] and len(p) < len(g):
                return g[len(p)]
            return None
        prev = {page: None}
        q = deque([page])
        while q:
            u = q.popleft()
            if u == target:
                break
            for a in self.app.page_actions.get(u, []):
                v = self.app.T.get((u, a))
                if v is not None and v not in prev:
                    prev[v] = (u, a)
                    q.append(v)
        if target not in prev:
            return None
        v, first = target, None
        while prev[v] is not None:
            v, first = prev[v][0], prev[v][1]
        return first

    def act(self, obs: Observation) -> Action:
        if "#" in obs.page:  # an overlay (pop-up or ad page): dismiss it
            for i, e in enumerate(obs.elements):
                if e.kind == "click" and e.text.strip().lower() in DISMISS:
                    return Action("click", i)
            return Action("back")
        aid = self._next_aid(obs.page) if obs.page != self.task.name else None
        if aid is None:
            return Action("back")
        kind, idx, arg = self.app.page(obs.page).action_for(aid)
        if kind == "input":
            return Action("input", idx, text=arg)
        if kind == "scroll":
            return Action("scroll", idx, direction=arg)
        return Action("click", idx)


class GoldPrefixAgent(OracleAgent):
    """Follows the gold path for ``floor(fraction * L)`` steps, then outputs invalid actions (it is
    "stuck"): success 0 for ``fraction < 1``, step reward exactly ``floor(fraction*L)/L``."""

    def __init__(self, corpus: Corpus, fraction: float):
        super().__init__(corpus, shortcuts=False)
        if not 0 <= fraction <= 1:
            raise ValueError("fraction must be in [0, 1]")
        self.fraction = fraction

    def act(self, obs: Observation) -> Action:
        k = int(self.fraction * len(self.task.gold))
        if obs.page.count("_") >= k:
            return Action("invalid", text="stuck")
        return super().act(obs)


class RandomAgent:
    """Uniform over the visible elements (random text for inputs, random direction for scrolls) and back."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def reset(self, task):
        pass

    def act(self, obs: Observation) -> Action:
        n = len(obs.elements)
        i = int(self.rng.integers(n + 1))
        if i == n:
            return Action("back")
        el = obs.elements[i]
        if el.kind == "input":
            return Action("input", i, text=["red", "blue", "smart"][int(self.rng.integers(3))])
        if el.kind == "scroll":
            return Action("scroll", i, direction=["up", "down", "left", "right"][int(self.rng.integers(4))])
        return Action("click", i)


class LexicalAgent:
    """Clicks the element with the highest token overlap with the overall + current step instruction.

    Elements already used on the same page are skipped; with no overlapping element it swipes up on an
    unscrolled list, else goes back. ``prefer_shortcuts=True`` (the "shortcut-taker") considers
    Recommended/Popular/Similar links and wins ties with them; ``False`` ignores them. Inputs type the
    instruction words that are not on the screen (quoted text first).
    """

    def __init__(self, prefer_shortcuts: bool = True):
        self.prefer_shortcuts = prefer_shortcuts

    def reset(self, task):
        self.used: set[tuple[str, int]] = set()

    def _input_text(self, obs: Observation) -> str | None:
        m = re.findall(r"'([^']+)'", obs.step_instruction or "")
        if m:
            return m[0]
        toks = [w for w in re.findall(r"[A-Za-z]+", obs.instruction) if w.lower() not in STOP]
        screen = set().union(*(tokens(e.text) for e in obs.elements)) if obs.elements else set()
        rest = [w for w in toks if w.lower() not in screen]
        return " ".join(rest[-2:]).lower() if rest else None

    def scores(self, obs: Observation) -> list[float]:
        want = tokens(obs.instruction) | tokens(obs.step_instruction)
        out = []
        for i, e in enumerate(obs.elements):
            if (obs.page, i) in self.used or e.kind == "scroll":
                out.append(-1.0)
                continue
            if is_shortcut(e.text) and not self.prefer_shortcuts:
                out.append(-1.0)
                continue
            s = float(len(tokens(e.text) & want))
            if e.kind == "input":
                named = e.text.lower() in (obs.instruction + " " + (obs.step_instruction or "")).lower()
                s = 1.5 if named and self._input_text(obs) else 0.0
            out.append(s + (0.1 if is_shortcut(e.text) and s > 0 else 0.0))
        return out

    def act(self, obs: Observation) -> Action:
        if not hasattr(self, "used"):
            self.reset(None)
        sc = self.scores(obs)
        if sc and max(sc) > 0:
            i = int(np.argmax(sc))
            self.used.add((obs.page, i))
            e = obs.elements[i]
            if e.kind == "input":
                return Action("input", i, text=self._input_text(obs))
            return Action("click", i)
        for i, e in enumerate(obs.elements):
            if e.kind == "scroll" and (obs.page, i) not in self.used:
                self.used.add((obs.page, i))
                return Action("scroll", i, direction="up")
        return Action("back")


class AskingAgent:
    """Wrapper: when the instruction contains a vague phrase for a slot with a preset answer available,
    emit ``ask(slot)`` (once per slot) before acting; the answer is appended to the instruction."""

    def __init__(self, inner):
        self.inner = inner

    def reset(self, task):
        self.asked: set[str] = set()
        if hasattr(self.inner, "reset"):
            self.inner.reset(task)

    def act(self, obs: Observation) -> Action:
        low = obs.instruction.lower()
        for slot, phrase in VAGUE.items():
            if phrase in low and slot not in self.asked:
                self.asked.add(slot)
                return Action("ask", text=slot)
        return self.inner.act(obs)


class NoiseAwareAgent:
    """Wrapper: on a screen with a pop-up (a dismiss button next to an ad), click the dismiss button."""

    def __init__(self, inner):
        self.inner = inner

    def reset(self, task):
        if hasattr(self.inner, "reset"):
            self.inner.reset(task)

    def act(self, obs: Observation) -> Action:
        has_ad = any(e.text.lower().startswith("open ad") for e in obs.elements)
        if has_ad:
            for i, e in enumerate(obs.elements):
                if e.kind == "click" and e.text.strip().lower() in DISMISS:
                    return Action("click", i)
        return self.inner.act(obs)


# --------------------------------------------------------------------------------------------------
# Behaviour cloning: a bag-of-words element scorer
# --------------------------------------------------------------------------------------------------

N_HASH = 8192
N_DENSE = 6


def _h(s: str) -> int:
    return zlib.crc32(s.encode()) % N_HASH


def element_features(obs: Observation, i: int) -> tuple[list[int], list[float]]:
    """Hashed (instruction token, element token) pairs and kind tokens; dense: overlap counts etc."""
    e = obs.elements[i]
    inst = tokens(obs.instruction)
    step = tokens(obs.step_instruction)
    et = tokens(e.text)
    sparse = [_h(f"k:{e.kind}"), _h(f"sc:{is_shortcut(e.text)}")]
    sparse += [_h(f"p:{a}|{b}") for a in step for b in et][:64]
    sparse += [_h(f"e:{b}") for b in et]
    dense = [
        len(et & step),
        len(et & inst),
        float(is_shortcut(e.text)),
        float(e.kind == "click"),
        float(e.kind == "scroll"),
        float(e.kind == "input"),
    ]
    return sparse, dense


class TinyBCScorer(torch.nn.Module):
    """score(e | obs) = sum of hashed-feature weights + w·dense; softmax over the page's elements."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(N_HASH, 1, mode="sum")
        torch.nn.init.zeros_(self.emb.weight)
        self.dense = torch.nn.Linear(N_DENSE, 1)

    def forward(self, sparse: list[list[int]], dense: torch.Tensor) -> torch.Tensor:
        flat = torch.tensor([x for s in sparse for x in s] or [0], dtype=torch.long)
        offsets = torch.tensor(np.cumsum([0] + [len(s) for s in sparse[:-1]]), dtype=torch.long)
        return self.emb(flat, offsets).squeeze(-1) + self.dense(dense).squeeze(-1)

    def score(self, obs: Observation) -> torch.Tensor:
        feats = [element_features(obs, i) for i in range(len(obs.elements))]
        return self([f[0] for f in feats], torch.tensor([f[1] for f in feats], dtype=torch.float32))


def bc_examples(corpus: Corpus, tasks: list[Task]) -> list[tuple[Observation, int, Action]]:
    """Teacher-forced (observation, gold element index, gold action) pairs from the gold paths."""
    out = []
    for t in tasks:
        app = corpus.apps[t.app]
        page = t.root
        for i, g in enumerate(t.gold):
            view = app.page(page)
            kind, idx, arg = view.action_for(g)
            obs = Observation(t.complete_instruct, t.step_instruct[i], view.elements, page, app.name, i)
            out.append(
                (
                    obs,
                    idx,
                    Action(
                        kind, idx, text=arg if kind == "input" else None, direction=arg if kind == "scroll" else None
                    ),
                )
            )
            page = f"{page}_{g}"
    return out


def train_bc(corpus: Corpus, tasks: list[Task], epochs: int = 3, lr: float = 0.05, seed: int = 0) -> TinyBCScorer:
    """Behaviour cloning: cross-entropy of the gold element under the softmax over the page's elements."""
    torch.manual_seed(seed)
    model = TinyBCScorer()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    data = []
    for obs, idx, _ in bc_examples(corpus, tasks):  # features computed once
        feats = [element_features(obs, i) for i in range(len(obs.elements))]
        data.append(
            ([f[0] for f in feats], torch.tensor([f[1] for f in feats], dtype=torch.float32), torch.tensor([idx]))
        )
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        for j in rng.permutation(len(data)):
            sparse, dense, target = data[int(j)]
            loss = torch.nn.functional.cross_entropy(model(sparse, dense)[None], target)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model


class TinyBCAgent:
    """Acts with a trained :class:`TinyBCScorer`: argmax element (not reused on the same page);
    scrolls swipe up, inputs type the quoted step text (or the last unseen instruction words)."""

    def __init__(self, model: TinyBCScorer):
        self.model = model
        self._lex = LexicalAgent()

    def reset(self, task):
        self.used: set[tuple[str, int]] = set()
        self._lex.reset(task)

    def act(self, obs: Observation) -> Action:
        if not hasattr(self, "used"):
            self.reset(None)
        if not obs.elements:
            return Action("back")
        with torch.no_grad():
            s = self.model.score(obs).numpy().copy()
        for i in range(len(s)):
            if (obs.page, i) in self.used:
                s[i] = -np.inf
        if not np.isfinite(s).any():
            return Action("back")
        i = int(np.argmax(s))
        self.used.add((obs.page, i))
        e = obs.elements[i]
        if e.kind == "scroll":
            return Action("scroll", i, direction="up")
        if e.kind == "input":
            return Action("input", i, text=self._lex._input_text(obs) or "")
        return Action("click", i)
