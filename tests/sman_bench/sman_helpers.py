"""Shared helpers for the sman_bench tests (a hand-made app with one shortcut)."""

from iclr26.sman_bench.corpus import App, Corpus, click_string, input_string, scroll_string
from iclr26.sman_bench.evaluate import Action
from iclr26.sman_bench.instructions import Task


def _b(i):
    return (40, 240 + 150 * i), (1040, 370 + 150 * i)


def tiny_app() -> App:
    """r --0:A--> r_0 --3:X--> r_0_3 --5:Z--> r_0_3_5 (gold), plus the shortcut r --2--> r_0_3,
    r --1:B--> r_1, r_0 --4:Y--> r_0_4, an input and a scroll on r_1."""
    acts = {
        click_string("A", _b(0)): 0,
        click_string("B", _b(1)): 1,
        click_string("Recommended: X", _b(2)): 2,
        click_string("X", _b(0)): 3,
        click_string("Y", _b(1)): 4,
        click_string("Z", _b(0)): 5,
        input_string("Filter", "red"): 6,
        scroll_string(((40, 240), (1040, 1000)), "up"): 7,
    }
    page_actions = {
        "r": [0, 1, 2],
        "r_0": [3, 4],
        "r_0_3": [5],
        "r_0_3_5": [],
        "r_1": [6, 7],
        "r_0_4": [],
        "r_1_6": [],
        "r_1_7": [],
    }
    triples = [
        ("r", 0, "r_0"),
        ("r", 1, "r_1"),
        ("r", 2, "r_0_3"),
        ("r_0", 3, "r_0_3"),
        ("r_0", 4, "r_0_4"),
        ("r_0_3", 5, "r_0_3_5"),
        ("r_1", 6, "r_1_6"),
        ("r_1", 7, "r_1_7"),
    ]
    return App("r", acts, page_actions, triples)


def tiny_corpus() -> Corpus:
    return Corpus({"r": tiny_app()})


def tiny_task(name="r_0_3_5") -> Task:
    n = name.count("_")
    return Task("r", name, "", [f"step {i}" for i in range(n)], "Open A, X and Z.", "Open A, X and something.")


class ScriptAgent:
    """Plays ``plan[page]``: an action id, "back" or "invalid" (default: invalid)."""

    def __init__(self, app: App, plan: dict):
        self.app, self.plan = app, plan

    def act(self, obs):
        p = self.plan.get(obs.page, "invalid")
        if p in ("back", "invalid"):
            return Action(p)
        kind, idx, arg = self.app.page(obs.page).action_for(p)
        return Action(kind, idx, text=arg if kind == "input" else None, direction=arg if kind == "scroll" else None)
