"""Slot-based instruction generation (spec §3.2).

1. Sample trajectories (root -> target page) from the graph: the gold path is the target's
   discovery path ``page_path_ids(name)``.
2. A template library keyed by the trajectory's *typed slot sequence* (the role of each action:
   section, item, more (a scroll), query (an input), option, detail). A template matches a trajectory
   when its slot sequence equals the trajectory's role sequence.
3. Slot values are the clicked element texts and input strings of the trajectory; filling gives the
   final instruction (``complete_instruct``), one step instruction per transition
   (``step_instruct``) and the MobileBench-style ``task`` text (numbered steps, then the overall
   instruction on the last line).
4. Ambiguous variant: ``easy_instruct`` replaces the dropped slot values with vague phrases and
   ``qa`` holds one preset question/answer pair per dropped slot (the answer restores the value).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from iclr26.sman_bench.corpus import App, Corpus, page_path_ids, parse_action_string

TEMPLATES: dict[tuple[str, ...], tuple[str, ...]] = {
    ("section", "item"): ("Open {section} and view {item}.", "Find {item} in the {section} section."),
    ("section", "more", "item"): ("Browse {section}, scroll for more and open {item}.",),
    ("section", "query"): ("In {section}, filter the list by {query}.", "Search {section} for {query}."),
    ("section", "item", "option"): (
        "In {section}, open {item} and check its {option}.",
        "Show the {option} of {item} from {section}.",
    ),
    ("section", "more", "item", "option"): ("Browse {section}, scroll to {item} and open its {option}.",),
    ("section", "item", "option", "detail"): ("Go to {section}, find {item}, open {option} and choose {detail}.",),
    ("section", "more", "item", "option", "detail"): (
        "In {section}, scroll to {item}, open {option} and pick {detail}.",
    ),
}
"""Task templates with typed slots, keyed by the slot (role) sequence they align with."""

STEP_TEMPLATES = {
    "section": "Open the {value} section.",
    "item": "Select {value}.",
    "more": "Swipe up on the list to see more items.",
    "query": "Type '{value}' into the Filter box.",
    "option": "Open the {value} tab.",
    "detail": "Choose '{value}'.",
}
"""One step instruction per transition, by the role of its action."""

VAGUE = {
    "section": "a section",
    "item": "a product",
    "query": "something",
    "option": "one of its tabs",
    "detail": "an option",
}
"""Vague phrases that replace dropped slot values in ``easy_instruct`` (the ``train`` phrasing)."""

VAGUE_PHRASINGS = {
    "train": VAGUE,
    "eval": {
        "section": "my usual place",
        "item": "that thing I wanted",
        "query": "my keyword",
        "option": "whatever page I need",
        "detail": "whichever entry fits",
    },
}
"""Disjoint vague phrasings: ``train`` for the tasks an agent learns from, ``eval`` for the evaluated tasks."""

QUESTIONS = {
    "section": "Which section should I open?",
    "item": "Which product do you mean?",
    "query": "What should I filter by?",
    "option": "Which tab should I open?",
    "detail": "Which option should I choose?",
}

DROPPABLE = ("item", "option", "detail", "query")
"""Slots an ambiguous variant may drop (the section is always kept)."""


@dataclass
class Task:
    """One benchmark task (MobileBench-v2 style fields)."""

    app: str
    name: str
    """target page; the gold path is ``page_path_ids(name)``."""
    task: str
    """numbered step instructions, then the overall instruction on the last line."""
    step_instruct: list[str]
    complete_instruct: str
    easy_instruct: str
    qa: list[dict] = field(default_factory=list)
    """preset Q&A: ``{"slot", "question", "answer"}`` per dropped slot."""
    slots: dict[str, str] = field(default_factory=dict)
    template: str = ""
    roles: list[str] = field(default_factory=list)

    @property
    def gold(self) -> list[int]:
        return page_path_ids(self.name)

    @property
    def root(self) -> str:
        return self.name.split("_")[0]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> Task:
        keys = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in keys})


def slot_value(app: App, aid: int) -> str:
    """The slot value of an action: the clicked text or the typed string."""
    p = parse_action_string(app.id_to_action[aid])
    return p.get("text", "") if p["kind"] != "scroll" else ""


def trajectory_roles(app: App, page: str) -> list[str]:
    return [app.roles.get(str(a), "?") for a in page_path_ids(page)]


def make_task(app: App, target: str, rng: np.random.Generator, n_drop: int = 1, phrasing: str = "train") -> Task | None:
    """Fill a matching template for the trajectory root -> ``target``; None when no template matches.
    ``phrasing`` picks the vague phrases of ``easy_instruct`` (:data:`VAGUE_PHRASINGS`)."""
    roles = trajectory_roles(app, target)
    templates = TEMPLATES.get(tuple(roles))
    if not templates:
        return None
    gold = page_path_ids(target)
    values = {r: slot_value(app, a) for r, a in zip(roles, gold) if r != "more"}
    tpl = templates[int(rng.integers(len(templates)))]
    complete = tpl.format(**values)
    steps = [STEP_TEMPLATES[r].format(value=values.get(r, "")) for r in roles]
    droppable = [r for r in roles if r in DROPPABLE]
    k = min(max(1, n_drop), len(droppable))
    dropped = sorted(rng.choice(droppable, k, replace=False).tolist(), key=roles.index)
    vague = VAGUE_PHRASINGS[phrasing]
    easy = tpl.format(**{r: (vague[r] if r in dropped else v) for r, v in values.items()})
    qa = [{"slot": r, "question": QUESTIONS[r], "answer": values[r]} for r in dropped]
    task_text = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(steps)) + "\n" + complete
    return Task(app.name, target, task_text, steps, complete, easy, qa, values, tpl, roles)


def generate_tasks(
    corpus: Corpus,
    n_tasks: int,
    seed: int,
    apps: list[str] | None = None,
    n_drop: int = 1,
    min_len: int = 2,
    phrasing: str = "train",
) -> list[Task]:
    """Sample ``n_tasks`` distinct target pages uniformly over template-matching trajectories; ``phrasing``: the
    vague phrases of the ambiguous variants (``train`` for training tasks, ``eval`` for evaluated ones)."""
    if phrasing not in VAGUE_PHRASINGS:
        raise ValueError(f"phrasing must be one of {sorted(VAGUE_PHRASINGS)}, got {phrasing!r}")
    rng = np.random.default_rng(seed)
    names = apps if apps is not None else [a for a in corpus.apps if "section" in corpus.apps[a].roles.values()]
    candidates = []
    for a in names:
        app = corpus.apps[a]
        for p in app.page_actions:
            if p.count("_") >= min_len and tuple(trajectory_roles(app, p)) in TEMPLATES:
                candidates.append((a, p))
    if not candidates:
        raise ValueError("no trajectory in the corpus matches any template")
    order = rng.permutation(len(candidates))[:n_tasks]
    tasks = []
    for i in order:
        a, p = candidates[int(i)]
        t = make_task(corpus.apps[a], p, rng, n_drop, phrasing)
        if t is not None:
            tasks.append(t)
    return tasks


def with_qa(instruction: str, qa: list[dict]) -> str:
    """The instruction with the preset questions and answers in the prompt (the released ambiguous template's
    ``<questions>`` / ``<answers>``), one ``Q: ... A: ...`` pair per dropped slot."""
    return " ".join([instruction] + [f"Q: {q.get('question', q['slot'])} A: {q['answer']}" for q in qa])
