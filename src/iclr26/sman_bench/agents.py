"""Agents: Oracle (BFS on the graph), GoldPrefix (correct for a fraction of the path, then stuck),
Random, Lexical (token overlap; optionally takes shortcuts), the Asking and NoiseAware wrappers, and
the behaviour-cloned TinyBC element scorer.

An agent has ``reset(task)`` and ``act(obs) -> Action`` (see :mod:`iclr26.sman_bench.evaluate`).
"""

from __future__ import annotations

import re

import networkx as nx
import numpy as np
import torch
from sklearn.feature_extraction import FeatureHasher

from iclr26.sman_bench.corpus import SCREEN_H, SCREEN_W, App, Corpus, UIElement, page_path_ids
from iclr26.sman_bench.evaluate import Action, Observation
from iclr26.sman_bench.generator import AD_PHRASINGS, popup_screen
from iclr26.sman_bench.instructions import VAGUE_PHRASINGS, Task, with_qa

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
DISMISS = {"x", "dismiss"} | {d.lower() for ph in AD_PHRASINGS.values() for d in ph["dismiss"]}
"""Dismiss labels of every phrasing: the hand-coded references are privileged (they know the held-out wording)."""


def tokens(text: str | None) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", (text or "").lower()) if w not in STOP}


def is_shortcut(text: str) -> bool:
    return text.lower().startswith(SHORTCUT_PREFIXES)


def app_graph(app: App) -> nx.DiGraph:
    """The app's transition graph T as a networkx DiGraph (cached on the app): an edge u -> v per valid action a
    with T(u, a) = v, labelled with the first such action in the page's ``action_valid`` order."""
    cached = app.__dict__.get("_nx_graph")
    if cached is not None:
        return cached
    g = nx.DiGraph()
    g.add_nodes_from(app.page_actions)
    for u, ids in app.page_actions.items():
        for a in ids:
            v = app.T.get((u, a))
            if v is not None and not g.has_edge(u, v):
                g.add_edge(u, v, action=a)
    app.__dict__["_nx_graph"] = g
    return g


class OracleAgent:
    """A shortest path to the target (``networkx.shortest_path`` on :func:`app_graph`); ``shortcuts=False`` follows
    the gold (discovery) path.
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
        graph = app_graph(self.app)
        try:
            path = nx.shortest_path(graph, page, target)
        except (nx.NetworkXNoPath, nx.NodeNotFound):
            return None
        return graph.edges[path[0], path[1]]["action"]

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
    emit ``ask(slot)`` (once per slot) before acting; the answer is appended to the instruction. Privileged
    upper reference: it knows the vague phrases of every phrasing (:data:`VAGUE_PHRASINGS`), held-out ones too."""

    def __init__(self, inner):
        self.inner = inner

    def reset(self, task):
        self.asked: set[str] = set()
        if hasattr(self.inner, "reset"):
            self.inner.reset(task)

    def act(self, obs: Observation) -> Action:
        low = obs.instruction.lower()
        for slot, phrase in ((k, v) for ph in VAGUE_PHRASINGS.values() for k, v in ph.items()):
            if phrase.lower() in low and slot not in self.asked:
                self.asked.add(slot)
                return Action("ask", text=slot)
        return self.inner.act(obs)


AD_PREFIXES = tuple(ph["ad"].split("{")[0].lower() for ph in AD_PHRASINGS.values())


class NoiseAwareAgent:
    """Wrapper: on a screen with a pop-up (a dismiss button next to an ad), click the dismiss button. Privileged
    upper reference: it knows the ad and dismiss wording of every phrasing (:data:`AD_PHRASINGS`)."""

    def __init__(self, inner):
        self.inner = inner

    def reset(self, task):
        if hasattr(self.inner, "reset"):
            self.inner.reset(task)

    def act(self, obs: Observation) -> Action:
        has_ad = any(e.text.lower().startswith(AD_PREFIXES) for e in obs.elements)
        if has_ad:
            for i, e in enumerate(obs.elements):
                if e.kind == "click" and e.text.strip().lower() in DISMISS:
                    return Action("click", i)
        return self.inner.act(obs)


# --------------------------------------------------------------------------------------------------
# Behaviour cloning: a bag-of-words element scorer
# --------------------------------------------------------------------------------------------------

N_HASH = 8192
N_DENSE = 10
HASHER = FeatureHasher(n_features=N_HASH, input_type="string", alternate_sign=False)
"""scikit-learn's hashing trick: string features -> N_HASH columns (counts, no sign flipping)."""
BC_VIEWS = ("step", "overall", "easy_qa")
"""Instruction views of each clean training step: complete + step instruction; complete only; easy (train
phrasing) with the preset Q&A in the prompt."""


def element_features(obs: Observation, i: int) -> tuple[list[str], list[float]]:
    """String features (kind, shortcut flag, (step token, element token) pairs, element tokens) for the hasher;
    dense: overlap counts with the step and overall instruction, shortcut, kind one-hot, and the element's
    geometry (centre x, centre y, width, height as fractions of the screen; zeros without bounds)."""
    e = obs.elements[i]
    inst = tokens(obs.instruction)
    step = tokens(obs.step_instruction)
    et = tokens(e.text)
    strings = [f"k:{e.kind}", f"sc:{is_shortcut(e.text)}"]
    strings += [f"p:{a}|{b}" for a in sorted(step) for b in sorted(et)][:64]
    strings += [f"e:{b}" for b in sorted(et)]
    if e.bounds:
        (x1, y1), (x2, y2) = e.bounds
        geo = [(x1 + x2) / 2 / SCREEN_W, (y1 + y2) / 2 / SCREEN_H, (x2 - x1) / SCREEN_W, (y2 - y1) / SCREEN_H]
    else:
        geo = [0.0, 0.0, 0.0, 0.0]
    dense = [
        len(et & step),
        len(et & inst),
        float(is_shortcut(e.text)),
        float(e.kind == "click"),
        float(e.kind == "scroll"),
        float(e.kind == "input"),
        *geo,
    ]
    return strings, dense


def page_features(obs: Observation):
    """(hashed sparse matrix, dense tensor) of every element of the observation."""
    feats = [element_features(obs, i) for i in range(len(obs.elements))]
    return HASHER.transform([f[0] for f in feats]), torch.tensor([f[1] for f in feats], dtype=torch.float32)


class TinyBCScorer(torch.nn.Module):
    """score(e | obs) = sum of hashed-feature weights (times their counts) + w·dense; softmax over the page."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(N_HASH, 1, mode="sum")
        torch.nn.init.zeros_(self.emb.weight)
        self.dense = torch.nn.Linear(N_DENSE, 1)

    def forward(self, hashed, dense: torch.Tensor) -> torch.Tensor:
        idx = torch.from_numpy(hashed.indices.astype(np.int64))
        offsets = torch.from_numpy(hashed.indptr[:-1].astype(np.int64))
        weights = torch.from_numpy(hashed.data.astype(np.float32))
        return self.emb(idx, offsets, per_sample_weights=weights).squeeze(-1) + self.dense(dense).squeeze(-1)

    def score(self, obs: Observation) -> torch.Tensor:
        return self(*page_features(obs))


def _view_instruction(t: Task, view: str, step: str) -> tuple[str, str | None]:
    if view == "step":
        return t.complete_instruct, step
    if view == "overall":
        return t.complete_instruct, None
    if view == "easy_qa":
        return with_qa(t.easy_instruct, t.qa), None
    raise ValueError(f"unknown BC view {view!r}; valid: {BC_VIEWS}")


def bc_examples(
    corpus: Corpus, tasks: list[Task], views=BC_VIEWS, p_overlay: float = 0.0, seed: int = 0
) -> list[tuple[Observation, int]]:
    """Teacher-forced (observation, gold element index) pairs from the gold paths, one per step and view.
    ``p_overlay``: each task gets, with this probability, one pop-up before a random step (``train``
    phrasing of :data:`AD_PHRASINGS`), whose gold element is the dismiss button."""
    rng = np.random.default_rng(seed)
    out = []
    for t in tasks:
        app = corpus.apps[t.app]
        at = int(rng.integers(len(t.gold))) if rng.random() < p_overlay else -1
        page = t.root
        for i, g in enumerate(t.gold):
            view = app.page(page)
            if i == at:
                els = popup_screen(rng, [w for w in (t.slots.get("item") or "").split() if len(w) > 2][:1], "train")
                ui = [UIElement(e["kind"], e["text"], e["bounds"]) for e in els]
                dismiss = next(j for j, e in enumerate(els) if e["role"] == "dismiss")
                out.append(
                    (Observation(t.complete_instruct, t.step_instruct[i], ui, f"{page}#popup", app.name, i), dismiss)
                )
            idx = view.action_for(g)[1]
            for v in views:
                inst, step = _view_instruction(t, v, t.step_instruct[i])
                out.append((Observation(inst, step, view.elements, page, app.name, i), idx))
            page = f"{page}_{g}"
    return out


def train_bc(
    corpus: Corpus,
    tasks: list[Task],
    epochs: int = 3,
    lr: float = 0.05,
    seed: int = 0,
    views=BC_VIEWS,
    p_overlay: float = 0.0,
    log=None,
) -> TinyBCScorer:
    """Behaviour cloning: cross-entropy of the gold element under the softmax over the page's elements.
    ``log``: optional ``log(step, **scalars)`` (e.g. ``RunContext.logger``), called after each optimiser step
    with ``loss`` and ``epoch``."""
    torch.manual_seed(seed)
    model = TinyBCScorer()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    data = [
        (*page_features(obs), torch.tensor([idx])) for obs, idx in bc_examples(corpus, tasks, views, p_overlay, seed)
    ]
    rng = np.random.default_rng(seed)
    step = 0
    for epoch in range(epochs):
        for j in rng.permutation(len(data)):
            hashed, dense, target = data[int(j)]
            loss = torch.nn.functional.cross_entropy(model(hashed, dense)[None], target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if log is not None:
                log(step, loss=float(loss.detach()), epoch=epoch)
            step += 1
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
