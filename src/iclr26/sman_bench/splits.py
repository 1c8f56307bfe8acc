"""The benchmark splits built from a corpus and its tasks.

* single-path / multi-path: the common tasks (:func:`iclr26.sman_bench.instructions.generate_tasks`);
* ambiguous: the same tasks with ``easy_instruct`` and preset ``qa`` (run through the multi-path walk);
* noisy: teacher-forced screen sequences of a task with pop-up/ad overlays inserted before random steps
  (the GT action on an overlay is a click on its dismiss button);
* AITZ-Noise analogue: the same, where a noise screen's GT is either a dismiss click or ``back`` (GT
  back steps are skipped by the scorer, as in the released evaluation).
"""

from __future__ import annotations

import numpy as np

from iclr26.sman_bench.corpus import Corpus, UIElement, scroll_endpoints
from iclr26.sman_bench.generator import popup_screen
from iclr26.sman_bench.instructions import Task


def _tokens(text: str) -> list[str]:
    return [w for w in text.replace(",", " ").replace(".", " ").split() if len(w) > 2]


def gt_action(app, page: str, aid: int, rng: np.random.Generator) -> dict:
    """The coordinate-level GT of a corpus action on a page (a tap point inside the element, the swipe
    endpoints, or the typed text)."""
    view = app.page(page)
    kind, idx, arg = view.action_for(aid)
    el = view.elements[idx]
    if kind == "click":
        (x1, y1), (x2, y2) = el.bounds
        return {
            "type": "click",
            "point": [
                int(rng.integers(x1 + (x2 - x1) // 4, x2 - (x2 - x1) // 4 + 1)),
                int(rng.integers(y1 + (y2 - y1) // 4, y2 - (y2 - y1) // 4 + 1)),
            ],
        }
    if kind == "scroll":
        s, e = scroll_endpoints(el.bounds, arg)
        return {"type": "scroll", "start": list(s), "end": list(e)}
    return {"type": "type", "text": arg}


def noisy_episode_from_task(
    corpus: Corpus,
    task: Task,
    rng: np.random.Generator,
    p_noise: float = 0.6,
    max_popups: int = 2,
    aitz: bool = False,
    clean: bool = False,
    phrasing: str = "train",
) -> dict:
    """Screens of the gold trajectory with up to ``max_popups`` overlays (each task is noisy with
    probability ``p_noise``). Returns ``{"task", "screens", "n_noise"}``; ``clean=True`` draws the same
    random numbers but inserts nothing (the clean control of the same episode)."""
    app = corpus.apps[task.app]
    gold = task.gold
    noisy = rng.random() < p_noise
    k = int(rng.integers(1, max_popups + 1)) if noisy else 0
    positions = set(rng.choice(len(gold), min(k, len(gold)), replace=False).tolist()) if k else set()
    lure = _tokens(task.slots.get("item", "") or task.slots.get("section", ""))
    screens, page = [], task.root
    for i, g in enumerate(gold):
        step = task.step_instruct[i]
        if i in positions:
            els = popup_screen(rng, lure[:1], phrasing)
            back = aitz and rng.random() < 0.5
            if not clean:
                ui = [UIElement(e["kind"], e["text"], e["bounds"]) for e in els]
                dismiss = next(e for e in els if e["role"] == "dismiss")
                (x1, y1), (x2, y2) = dismiss["bounds"]
                gt = {"type": "back"} if back else {"type": "click", "point": [(x1 + x2) // 2, (y1 + y2) // 2]}
                screens.append(
                    {"page": f"{page}#popup", "elements": ui, "action": gt, "step_instruction": step, "noise": True}
                )
        screens.append(
            {
                "page": page,
                "elements": app.page(page).elements,
                "action": gt_action(app, page, g, rng),
                "step_instruction": step,
                "noise": False,
            }
        )
        page = f"{page}_{g}"
    return {"task": task, "screens": screens, "n_noise": sum(s["noise"] for s in screens)}


def build_noisy_split(
    corpus: Corpus,
    tasks: list[Task],
    seed: int,
    p_noise: float = 0.6,
    aitz: bool = False,
    clean: bool = False,
    phrasing: str = "train",
) -> list[dict]:
    """One noisy episode per task, deterministic from ``seed`` (``clean`` gives the matched control); ``phrasing``
    words the overlays (:data:`iclr26.sman_bench.generator.AD_PHRASINGS`)."""
    if not 0 <= p_noise <= 1:
        raise ValueError(f"p_noise must be in [0, 1], got {p_noise}")
    rng = np.random.default_rng(seed)
    return [noisy_episode_from_task(corpus, t, rng, p_noise, aitz=aitz, clean=clean, phrasing=phrasing) for t in tasks]
