"""Loaders for the released MobileBench-v2 files that are not Mobile3M app directories.

* **Noisy subsets** (``noisy-instruction-{2,3,4}``, ``shopping-instruction``; also the layout of
  ``anbu-instruction``): one folder of episodes. Episode ``<N>`` is ``<N>.json`` (the GT, read by the released
  ``eval.py`` ``noise_data_test`` as ``gt_file['trajectories'][i]['action']`` with ``'action'`` the action name and
  ``'info'`` holding ``'coordinate'`` (``[x, y]`` for a click, ``[[xs, ys], [xe, ye]]`` for a swipe) or
  ``'text'``; the instruction is ``user_instruction.query``, as ``appagent_noisy.py`` reads it) plus one view
  hierarchy per screen, ``<N>-<k>.xml`` (screenshots ``<N>-<k>.png`` / ``-check.png`` are not read), screens
  ordered by ``k``. The runner opens the JSON as gb18030 and the evaluator as ISO-8859-1: we read UTF-8 and fall
  back to gb18030.
* **Ambiguous task files** (``appagent_ambiguous.py``): a JSON list of records with ``name`` (target page of the
  Mobile3M corpus), ``easy_instruct``, ``complete_instruct`` and ``step_instruct`` (a list). The released runner
  leaves the prompt's question/answer placeholders unfilled and names no Q&A field; we read our ``qa`` list
  (``{"slot", "question", "answer"}``) or parallel ``questions`` / ``answers`` lists when a file has them.

* **Answer files** (what ``appagent_noisy.py`` writes, one per episode, ``<task>.txt``): one prediction line per
  screen -- ``click([x1,y1][x2,y2])`` as the element's bounds, ``scroll([x1,y1][x2,y2]<direction>)``,
  ``input(<text>)``, or ``click error`` / ``scroll error`` / ``no such act`` / ``error`` -- each ended by a
  newline. :func:`score_answer_file` scores one against its episode. The released ``noise_data_test`` reads
  ``text.split('\n')[:-2]``: it assumes one more line after the predictions (a final line such as a summary),
  so on the runner's own layout it DROPS the last screen's prediction and leaves that screen out of the
  denominator; ``compat=True`` reads files exactly so. Our reading takes one line per screen, whichever of the
  two layouts the file has (a final extra line is ignored; a missing line counts as an error).

A bad episode or record never aborts a run: it is skipped and counted, with the file and the reason.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from iclr26.sman_bench.corpus import _BOUNDS, Corpus, UIElement
from iclr26.sman_bench.evaluate import Action
from iclr26.sman_bench.instructions import Task

GT_TYPES = {"click": "click", "swipe": "scroll", "swpie": "scroll", "scroll": "scroll", "text": "type", "type": "type"}
"""Released trajectory action names -> our GT types (``back`` stays ``back``; anything else is never credited)."""


def read_json_bytes(path: Path):
    """JSON of a released file: UTF-8 first, gb18030 (what ``appagent_noisy.py`` opens) as the fallback."""
    raw = Path(path).read_bytes()
    for enc in ("utf-8", "gb18030"):
        try:
            return json.loads(raw.decode(enc))
        except (UnicodeDecodeError, ValueError, RecursionError):
            continue
    raise ValueError(f"{path}: neither UTF-8 nor gb18030 JSON")


def _node_text(node) -> str:
    """A node's text or content-desc, else the first descendant's (a clickable container labelled by a child)."""
    for n in node.iter():
        t = (n.get("text") or n.get("content-desc") or "").strip()
        if t:
            return t
    return ""


def screen_elements(xml_text: str) -> list[UIElement]:
    """The elements of a released screen's view hierarchy: EditText -> input, clickable with a text (its own or a
    descendant's) -> click, scrollable -> one scroll region (its four swipes), each with its bounds."""
    out = []
    for node in ET.fromstring(xml_text).iter("node"):
        m = _BOUNDS.fullmatch(node.get("bounds", ""))
        if not m:
            continue
        b = ((int(m.group(1)), int(m.group(2))), (int(m.group(3)), int(m.group(4))))
        if "EditText" in node.get("class", ""):
            out.append(UIElement("input", _node_text(node) or "input field", b))
        elif node.get("clickable") == "true" and (text := _node_text(node)):
            out.append(UIElement("click", text, b))
        elif node.get("scrollable") == "true":
            out.append(UIElement("scroll", "scrollable region", b))
    return out


def _point(v, n: int):
    """``[x, y]`` (n=1) or ``[[xs, ys], [xe, ye]]`` (n=2) of ints, else None."""
    pts = [v] if n == 1 else v
    if not isinstance(pts, list) or len(pts) != n:
        return None
    for p in pts:
        if not (isinstance(p, list) and len(p) == 2 and all(isinstance(c, int | float) for c in p)):
            return None
    return [int(c) for c in v] if n == 1 else [[int(c) for c in p] for p in v]


def gt_from_released(step) -> dict:
    """One released trajectory step -> our GT action dict; ValueError on a malformed step."""
    act = step.get("action") if isinstance(step, dict) else None
    if not isinstance(act, dict) or not isinstance(act.get("action"), str):
        raise ValueError(f"expected {{'action': {{'action': name, 'info': ...}}}}, got {str(step)[:80]}")
    name = act["action"].lower()
    if name == "back":
        return {"type": "back"}
    kind, info = GT_TYPES.get(name), act.get("info")
    if kind is None:
        return {"type": name}  # e.g. home: never credited, stays in the denominator
    if not isinstance(info, dict):
        raise ValueError(f"{name} step without an 'info' object")
    if kind == "type":
        if not isinstance(info.get("text"), str):
            raise ValueError(f"{name} step without a text")
        return {"type": "type", "text": info["text"]}
    pts = _point(info.get("coordinate"), 1 if kind == "click" else 2)
    if pts is None:
        raise ValueError(f"{name} step with a malformed coordinate {str(info.get('coordinate'))[:60]}")
    return {"type": "click", "point": pts} if kind == "click" else {"type": "scroll", "start": pts[0], "end": pts[1]}


def _screens(folder: Path, stem: str) -> list[Path]:
    """``<stem>-<k>.xml`` files ordered by k."""
    pat = re.compile(rf"^{re.escape(stem)}-(\d+)\.xml$")
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := pat.match(p.name))]
    return [p for _, p in sorted(found)]


def load_noisy_episode(folder: Path, stem: str) -> dict:
    """One released noisy episode as the ``{"task", "screens"}`` dict :func:`evaluate.noisy_episode` scores;
    ValueError (naming the file) when it cannot be read."""
    path = folder / f"{stem}.json"
    rec = read_json_bytes(path)
    if not isinstance(rec, dict) or not isinstance(rec.get("trajectories"), list) or not rec["trajectories"]:
        raise ValueError(f"{path}: expected an object with a non-empty 'trajectories' list")
    ui = rec.get("user_instruction")
    query = ui.get("query", "") if isinstance(ui, dict) else ""
    query = query if isinstance(query, str) else ""
    xmls = _screens(folder, stem)
    if len(xmls) < len(rec["trajectories"]):
        n = len(rec["trajectories"])
        raise ValueError(f"{path}: {n} trajectory steps but {len(xmls)} screens ({stem}-<k>.xml)")
    screens = []
    for i, step in enumerate(rec["trajectories"]):
        try:
            gt = gt_from_released(step)
        except ValueError as exc:
            raise ValueError(f"{path}: trajectories[{i}]: {exc}") from None
        try:
            els = screen_elements(xmls[i].read_text(encoding="utf-8", errors="replace"))
        except ET.ParseError as exc:
            raise ValueError(f"{xmls[i]}: not a view hierarchy ({exc})") from None
        screens.append({"page": xmls[i].stem, "elements": els, "action": gt, "step_instruction": None, "noise": False})
    task = Task(folder.name, stem, query, [], query, query)
    return {"task": task, "screens": screens, "n_noise": 0}


def _natural(stem: str):
    return (not stem.isdigit(), int(stem) if stem.isdigit() else 0, stem)


def load_noisy_dir(folder: str | Path) -> tuple[list[dict], list[tuple[str, str]]]:
    """Every episode of a released noisy folder (``<N>.json`` + ``<N>-<k>.xml``), in the order of N.
    Returns ``(episodes, skipped)``; ``skipped`` holds ``(file, reason)`` for each episode that could not be read."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: noisy data folder does not exist")
    stems = sorted((p.stem for p in folder.glob("*.json")), key=_natural)
    episodes, skipped = [], []
    for stem in stems:
        try:
            episodes.append(load_noisy_episode(folder, stem))
        except (OSError, ValueError) as exc:
            skipped.append((f"{stem}.json", str(exc)))
    return episodes, skipped


def _qa(rec: dict) -> list[dict]:
    if isinstance(rec.get("qa"), list):
        return [q for q in rec["qa"] if isinstance(q, dict) and {"slot", "answer"} <= q.keys()]
    qs, ans = rec.get("questions"), rec.get("answers")
    if isinstance(qs, list) and isinstance(ans, list):
        return [{"slot": f"q{i + 1}", "question": str(q), "answer": str(a)} for i, (q, a) in enumerate(zip(qs, ans))]
    return []


def ambiguous_task(rec, corpus: Corpus) -> Task:
    """One released ambiguous record -> Task (ValueError when a field is missing or the page is in no app)."""
    if not isinstance(rec, dict):
        raise ValueError(f"expected an object, got {type(rec).__name__}")
    for k in ("name", "easy_instruct", "complete_instruct"):
        if not isinstance(rec.get(k), str) or not rec[k]:
            raise ValueError(f"field {k!r} missing or not a string")
    steps = rec.get("step_instruct", [])
    if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
        raise ValueError("step_instruct is not a list of strings")
    try:
        app = corpus.app_of(rec["name"]).name
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None
    return Task(app, rec["name"], "\n".join(steps), steps, rec["complete_instruct"], rec["easy_instruct"], _qa(rec))


def load_ambiguous_tasks(path: str | Path, corpus: Corpus) -> tuple[list[Task], list[tuple[str, str]]]:
    """A released ambiguous task file; returns ``(tasks, skipped)`` with ``(record index, reason)`` per bad record."""
    data = read_json_bytes(Path(path))
    if isinstance(data, dict):
        data = data.get("data", list(data.values()))
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of task records")
    tasks, skipped = [], []
    for i, rec in enumerate(data):
        try:
            tasks.append(ambiguous_task(rec, corpus))
        except ValueError as exc:
            skipped.append((f"{Path(path).name}[{i}]", str(exc)))
    return tasks, skipped


# --------------------------------------------------------------------------------------------------
# answer files of the released noisy runner
# --------------------------------------------------------------------------------------------------

_PAIR = re.compile(r"\[(\d+),(\d+)\]")


def released_answer_lines(text: str) -> list[str]:
    """The lines the released ``noise_data_test`` scores: ``text.split('\\n')[:-2]``."""
    return text.split("\n")[:-2]


def answer_lines(text: str, n_screens: int) -> list[str]:
    """One prediction line per screen: the file's first ``n_screens`` lines (a final extra line and the trailing
    newline ignored); screens without a line get ``error``."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    lines = lines[:n_screens]
    return lines + ["error"] * (n_screens - len(lines))


def parse_answer_line(line: str, elements: list[UIElement]) -> tuple[Action, list[UIElement]]:
    """A released prediction line -> (an :class:`Action`, the screen's elements with the predicted region
    appended when the action names bounds). The action points at that appended region, so scoring reads the
    bounds the runner wrote, whether or not they coincide with a parsed element. Unknown lines are invalid."""
    name = line.split("(", 1)[0]
    pairs = [(int(x), int(y)) for x, y in _PAIR.findall(line)]
    if name in ("click", "scroll") and len(pairs) >= 2:
        region = UIElement(name, "", (pairs[0], pairs[1]))
        direction = line.rsplit("]", 1)[-1].split(")", 1)[0] if name == "scroll" else None
        return Action(name, len(elements), direction=direction), [*elements, region]
    if name == "input" and "(" in line:
        return Action("input", None, text=line.split("(", 1)[1].rsplit(")", 1)[0]), elements
    return Action("invalid", text=line[:80]), elements


class _Replay:
    """An agent that replays parsed predictions, one per screen, in order."""

    def __init__(self, actions: list[Action]):
        self.actions = list(actions)

    def reset(self, task=None) -> None:
        pass

    def act(self, obs) -> Action:
        return self.actions[obs.round] if obs.round < len(self.actions) else Action("invalid", text="no line")


def score_answer_file(text: str, episode: dict, compat: bool = False) -> dict:
    """Score one released answer file against its episode (:func:`load_noisy_episode`) with
    :func:`~iclr26.sman_bench.evaluate.noisy_episode`. ``compat``: the lines of :func:`released_answer_lines`
    and only the screens they cover, as ``noise_data_test``; default: :func:`answer_lines`, every screen."""
    from iclr26.sman_bench.evaluate import noisy_episode

    screens = episode["screens"]
    lines = released_answer_lines(text)[: len(screens)] if compat else answer_lines(text, len(screens))
    actions, replayed = [], []
    for line, scr in zip(lines, screens):
        act, els = parse_answer_line(line, scr["elements"])
        actions.append(act)
        replayed.append({**scr, "elements": els})
    return noisy_episode({**episode, "screens": replayed}, _Replay(actions), compat=compat)
