"""Mobile3M-style graph corpus: action strings, the on-disk format, the loader and the transition model.

One app directory holds (spec §3.1):

* ``all_action_id.json``: action string -> integer id, stored as JSON-encoded *text* (decode twice);
* ``all_page_actions.json``: ``{"data": [{"name": page, "action_valid": [ids...]}]}``;
* ``all_page_id.json``: page name -> id;
* ``all_triple.json``: ``{"data": [[src_page, action_id, dst_page], ...]}`` (the transition graph T);
* one folder per page ``<page>/`` with ``<page>-xml.txt`` (view hierarchy) and ``<page>-html.txt``.

Page names encode their discovery path ``root_a1_a2_..._an``: the root is ``name.split('_')[0]``,
the gold (GT) path of a task whose target is ``name`` is ``[a1, ..., an]`` and ``back`` moves to the
discovery parent ``name.rsplit('_', 1)[0]``.

Action strings:

* ``click(<text>, [x1,y1][x2,y2])``
* ``input(<field description>, '<text>')``
* ``scroll([xs,ys], [xe,ye])``: endpoints from the region bounds and a direction, mid ± a quarter
  of the width (left/right) or height (up/down), see :func:`scroll_endpoints`.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

SCREEN_W, SCREEN_H = 1080, 2400
DIRECTIONS = ("up", "down", "left", "right")

Bounds = tuple[tuple[int, int], tuple[int, int]]


# --------------------------------------------------------------------------------------------------
# Action strings
# --------------------------------------------------------------------------------------------------


def fmt_bounds(b: Bounds) -> str:
    (x1, y1), (x2, y2) = b
    return f"[{x1},{y1}][{x2},{y2}]"


def click_string(text: str, bounds: Bounds) -> str:
    return f"click({text}, {fmt_bounds(bounds)})"


def input_string(field_desc: str, text: str) -> str:
    return f"input({field_desc}, '{text}')"


def scroll_endpoints(bounds: Bounds, direction: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """Swipe endpoints for ``direction`` in a region: mid ± width/4 or height/4.

    ``up`` swipes the finger upward (start below the middle, end above it), ``left`` swipes
    leftward; ``down`` / ``right`` are the reverses.
    """
    (x1, y1), (x2, y2) = bounds
    mx, my = (x1 + x2) // 2, (y1 + y2) // 2
    qw, qh = (x2 - x1) // 4, (y2 - y1) // 4
    if direction == "up":
        return (mx, my + qh), (mx, my - qh)
    if direction == "down":
        return (mx, my - qh), (mx, my + qh)
    if direction == "left":
        return (mx + qw, my), (mx - qw, my)
    if direction == "right":
        return (mx - qw, my), (mx + qw, my)
    raise ValueError(f"unknown scroll direction {direction!r}; valid: {DIRECTIONS}")


def scroll_string(bounds: Bounds, direction: str) -> str:
    (xs, ys), (xe, ye) = scroll_endpoints(bounds, direction)
    return f"scroll([{xs},{ys}], [{xe},{ye}])"


def swipe_direction(start, end) -> str:
    """Direction of a swipe by smallest-angle match to up/down/left/right (screen y grows downward)."""
    dx, dy = end[0] - start[0], end[1] - start[1]
    if abs(dx) >= abs(dy):
        return "right" if dx > 0 else "left"
    return "down" if dy > 0 else "up"


_CLICK = re.compile(r"^click\((.*), \[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]\)$", re.S)
_INPUT = re.compile(r"^input\((.*), '(.*)'\)$", re.S)
_SCROLL = re.compile(r"^scroll\(\[(-?\d+),(-?\d+)\], \[(-?\d+),(-?\d+)\]\)$")
# released Mobile3M forms: scroll(str(([xs, ys], [xe, ye]))) and click(<html line>) / input(<html line>, 'text')
_SCROLL_TUPLE = re.compile(r"^scroll\(\(\[ ?(-?\d+), ?(-?\d+)\], ?\[ ?(-?\d+), ?(-?\d+)\]\)\)$")
_HTML_BOUNDS = re.compile(r'bounds="\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]"')
_HTML_DESC = re.compile(r'description="([^"]*)"')


def html_line_element(line: str) -> tuple[str, Bounds | None]:
    r"""Text and bounds of one line of a page's ``-html.txt`` (the released ``click(<html line>)`` form).

    Text: what stands between the first ``>`` and the next ``<`` (the element's text, as the released
    ``actions_generate`` reads it with ``>\s*([^<>]+)\s*<``), else the ``description`` attribute. Bounds: the
    ``bounds="[x1,y1][x2,y2]"`` attribute when the line has one, else None. Linear time (no backtracking)."""
    i = line.find(">")
    j = line.find("<", i + 1) if i >= 0 else -1
    text = line[i + 1 : j].strip() if j > i >= 0 else ""
    if not text and (d := _HTML_DESC.search(line)):
        text = d.group(1).strip()
    b = _HTML_BOUNDS.search(line)
    bounds = ((int(b.group(1)), int(b.group(2))), (int(b.group(3)), int(b.group(4)))) if b else None
    return text, bounds


def parse_action_string(s: str) -> dict:
    """Parse an action string into ``{"kind", ...}``; raises ValueError on anything else (linear time: the
    closing-suffix checks come first, so the greedy groups never backtrack over a long non-matching tail).

    Accepted forms: ``click(<text>, [x1,y1][x2,y2])``, ``input(<field>, '<text>')``, ``scroll([xs,ys], [xe,ye])``
    (our writer) and the released Mobile3M keys ``click(<html line>)``, ``input(<html line>, '<text>')``
    (element text and bounds read from the line, see :func:`html_line_element`; ``"html"`` keeps the line)
    and ``scroll(([xs, ys], [xe, ye]))`` (Python's ``str`` of the released endpoint tuple)."""
    if not isinstance(s, str):
        raise ValueError(f"not an action string: {type(s).__name__}")
    if s.endswith(")") and (m := _CLICK.match(s)):
        x1, y1, x2, y2 = (int(v) for v in m.groups()[1:])
        return {"kind": "click", "text": m.group(1), "bounds": ((x1, y1), (x2, y2))}
    if s.startswith("click(<") and s.endswith(")"):
        text, bounds = html_line_element(s[6:-1])
        return {"kind": "click", "text": text, "bounds": bounds, "html": s[6:-1]}
    if s.endswith("')") and (m := _INPUT.match(s)):
        field, html = m.group(1), None
        if field.startswith("<"):
            html, (field, _) = field, html_line_element(field)
        return {"kind": "input", "field": field, "text": m.group(2), **({"html": html} if html else {})}
    if m := (_SCROLL.match(s) or _SCROLL_TUPLE.match(s)):
        xs, ys, xe, ye = (int(v) for v in m.groups())
        return {"kind": "scroll", "start": (xs, ys), "end": (xe, ye), "direction": swipe_direction((xs, ys), (xe, ye))}
    raise ValueError(f"not an action string: {s[:200]!r}")


# --------------------------------------------------------------------------------------------------
# Pages, apps, the transition model
# --------------------------------------------------------------------------------------------------


@dataclass
class UIElement:
    """One element an agent sees: ``kind`` in click/input/scroll, its text (or field description)
    and its bounds. Inputs are one element per field, scrolls one per region."""

    kind: str
    text: str
    bounds: Bounds | None

    def to_json(self) -> dict:
        return {"kind": self.kind, "text": self.text, "bounds": [list(p) for p in self.bounds] if self.bounds else None}


@dataclass
class Page:
    """A page: its elements and the map from (element index, argument) to corpus action id."""

    name: str
    elements: list[UIElement] = field(default_factory=list)
    # (index, arg) -> action id; arg is None for clicks, the lower-cased text for inputs, the direction for scrolls
    lookup: dict[tuple[int, str | None], int] = field(default_factory=dict)
    skipped: list[tuple[int, str]] = field(default_factory=list)
    """valid action ids of the page that the agent cannot be shown, with the reason (an unparsable string)."""

    def resolve(self, kind: str, index, arg=None) -> int | None:
        """Corpus action id for an agent action on this page, or None when it is not valid here."""
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(self.elements):
            return None
        el = self.elements[index]
        if el.kind != kind:
            return None
        if kind == "click":
            return self.lookup.get((index, None))
        if not isinstance(arg, str):
            return None
        key = arg.strip().lower()
        return self.lookup.get((index, key))

    def action_for(self, aid: int) -> tuple[str, int, str | None] | None:
        """Inverse of :meth:`resolve`: ``(kind, index, arg)`` for a valid action id, else None."""
        for (i, arg), a in self.lookup.items():
            if a == aid:
                return self.elements[i].kind, i, arg
        return None


def page_root(name: str) -> str:
    return name.split("_")[0]


def page_path_ids(name: str) -> list[int]:
    """The discovery path ``[a1, ..., an]`` encoded in ``root_a1_..._an``."""
    return [int(p) for p in name.split("_")[1:]]


def page_parent(name: str) -> str:
    """``back``: the discovery parent ``rsplit('_', 1)[0]``; the root's back is a no-op."""
    return name.rsplit("_", 1)[0] if "_" in name else name


@dataclass
class App:
    """One app of the corpus (spec §3.1): the action-id map, valid actions per page and the graph T."""

    name: str
    action_ids: dict[str, int]
    page_actions: dict[str, list[int]]
    triples: list[tuple[str, int, str]]
    page_ids: dict[str, int] = field(default_factory=dict)
    xml: dict[str, str] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)  # generator-only: str(action id) -> slot role

    def __post_init__(self):
        self.id_to_action = {v: k for k, v in self.action_ids.items()}
        self.T: dict[tuple[str, int], str] = {(s, int(a)): d for s, a, d in self.triples}
        self._pages: dict[str, Page] = {}

    def unparsable_actions(self) -> dict[int, str]:
        """Action ids whose strings none of the known forms parses (:meth:`page` skips them), with the string."""
        out = {}
        for aid, text in self.id_to_action.items():
            try:
                parse_action_string(text)
            except ValueError:
                out[aid] = text[:120]
        return out

    @property
    def root(self) -> str:
        return page_root(next(iter(self.page_actions)))

    def step(self, page: str, aid) -> str:
        """T(page, a); an invalid or unknown action keeps the page."""
        return self.T.get((page, aid), page)

    def page(self, name: str) -> Page:
        """The agent's view of a page, built from its valid action strings (cached)."""
        if name in self._pages:
            return self._pages[name]
        page = Page(name)
        fields: dict[str, int] = {}
        regions: dict[tuple[int, int], int] = {}
        for aid in self.page_actions.get(name, []):
            try:
                p = parse_action_string(self.id_to_action[aid])
            except (KeyError, ValueError) as exc:  # a bad entry never aborts a run: skipped, with its reason
                reason = "unknown action id" if isinstance(exc, KeyError) else "not a click/input/scroll string"
                page.skipped.append((aid, reason))
                continue
            if p["kind"] == "click":
                page.elements.append(UIElement("click", p["text"], p["bounds"]))
                page.lookup[(len(page.elements) - 1, None)] = aid
            elif p["kind"] == "input":
                if p["field"] not in fields:
                    page.elements.append(UIElement("input", p["field"], None))
                    fields[p["field"]] = len(page.elements) - 1
                page.lookup[(fields[p["field"]], p["text"].strip().lower())] = aid
            else:
                (xs, ys), (xe, ye) = p["start"], p["end"]
                center = ((xs + xe) // 2, (ys + ye) // 2)
                if center not in regions:
                    hw = max(abs(xe - xs), 1) if p["direction"] in ("left", "right") else SCREEN_W // 2
                    hh = max(abs(ye - ys), 1) if p["direction"] in ("up", "down") else 100
                    b = ((max(0, center[0] - hw), center[1] - hh), (min(SCREEN_W, center[0] + hw), center[1] + hh))
                    page.elements.append(UIElement("scroll", "scrollable list", b))
                    regions[center] = len(page.elements) - 1
                page.lookup[(regions[center], p["direction"])] = aid
        self._pages[name] = page
        return page


@dataclass
class Corpus:
    apps: dict[str, App]

    def app_of(self, page: str) -> App:
        for app in self.apps.values():
            if page in app.page_actions:
                return app
        raise KeyError(f"page {page!r} is in no app of the corpus")


# --------------------------------------------------------------------------------------------------
# View hierarchy (xml) and its HTML simplification; element extraction (``actions_generate``)
# --------------------------------------------------------------------------------------------------


def page_xml(elements: list[dict]) -> str:
    """An Android-like view hierarchy for a page's elements (dicts with kind/text/bounds)."""
    root = ET.Element("hierarchy", rotation="0")
    frame = ET.SubElement(
        root,
        "node",
        {
            "class": "android.widget.FrameLayout",
            "bounds": f"[0,0][{SCREEN_W},{SCREEN_H}]",
            "text": "",
            "content-desc": "",
            "clickable": "false",
            "scrollable": "false",
        },
    )
    for i, e in enumerate(elements):
        cls = {
            "click": "android.widget.Button",
            "input": "android.widget.EditText",
            "scroll": "androidx.recyclerview.widget.RecyclerView",
        }[e["kind"]]
        ET.SubElement(
            frame,
            "node",
            {
                "index": str(i),
                "class": cls,
                "resource-id": f"id/el{i}",
                "text": e["text"] if e["kind"] == "click" else "",
                "content-desc": e["text"] if e["kind"] != "click" else "",
                "clickable": str(e["kind"] != "scroll").lower(),
                "scrollable": str(e["kind"] == "scroll").lower(),
                "bounds": fmt_bounds(e["bounds"]),
            },
        )
    return ET.tostring(root, encoding="unicode")


_BOUNDS = re.compile(r"\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]")


def xml_to_html(xml_text: str) -> str:
    """The HTML-like simplification: one tag per element with id, class, description, bounds."""
    lines = []
    for node in ET.fromstring(xml_text).iter("node"):
        cls = node.get("class", "")
        tag = (
            "input"
            if "EditText" in cls
            else "button"
            if node.get("clickable") == "true"
            else "div"
            if node.get("scrollable") == "true"
            else "p"
        )
        text = node.get("text") or node.get("content-desc") or ""
        lines.append(
            f'<{tag} id="{node.get("resource-id", "")}" class="{cls}" description="{text}" '
            f'clickable="{node.get("clickable")}" scrollable="{node.get("scrollable")}" '
            f'bounds="{node.get("bounds")}">{text}</{tag}>'
        )
    return "\n".join(lines)


def actions_generate(xml_text: str) -> list[str]:
    """Candidate action strings of a page from its view hierarchy (before filtering by validity):
    clickable elements with text/description -> click, EditText -> input field, scrollable -> 4 scrolls.
    Input candidates are returned as ``input(<field>, '')`` (the text is the agent's)."""
    out = []
    for node in ET.fromstring(xml_text).iter("node"):
        m = _BOUNDS.fullmatch(node.get("bounds", ""))
        if not m:
            continue
        b = ((int(m.group(1)), int(m.group(2))), (int(m.group(3)), int(m.group(4))))
        text = node.get("text") or node.get("content-desc") or ""
        if "EditText" in node.get("class", ""):
            out.append(input_string(text, ""))
        elif node.get("clickable") == "true" and text:
            out.append(click_string(text, b))
        elif node.get("scrollable") == "true":
            out.extend(scroll_string(b, d) for d in DIRECTIONS)
    return out


# --------------------------------------------------------------------------------------------------
# Writing and loading the on-disk format
# --------------------------------------------------------------------------------------------------


def write_app(app: App, out_dir: Path, write_pages: bool = True) -> Path:
    """Write one app in Mobile3M format (``all_action_id.json`` double-JSON-encoded)."""
    d = Path(out_dir) / app.name
    d.mkdir(parents=True, exist_ok=True)
    (d / "all_action_id.json").write_text(json.dumps(json.dumps(app.action_ids)))
    (d / "all_page_actions.json").write_text(
        json.dumps({"data": [{"name": p, "action_valid": ids} for p, ids in app.page_actions.items()]})
    )
    page_ids = app.page_ids or {p: i for i, p in enumerate(app.page_actions)}
    (d / "all_page_id.json").write_text(json.dumps(page_ids))
    (d / "all_triple.json").write_text(json.dumps({"data": [list(t) for t in app.triples]}))
    if app.roles:
        (d / "roles.json").write_text(json.dumps(app.roles))
    if write_pages:
        for p, x in app.xml.items():
            (d / p).mkdir(exist_ok=True)
            (d / p / f"{p}-xml.txt").write_text(x)
            (d / p / f"{p}-html.txt").write_text(xml_to_html(x))
    return d


# The loader treats every file as untrusted: each path is resolved (symlinks, "..") and must stay inside the
# corpus folder, and every malformed entry is a ValueError naming the file and the entry.


def _inside(boundary: Path, path: Path) -> Path:
    """``path`` resolved; ValueError when it leaves ``boundary`` (a symlink or ``..`` pointing elsewhere)."""
    try:
        real = path.resolve()
    except (OSError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{path}: cannot resolve path ({type(exc).__name__}: {exc})") from None
    if not real.is_relative_to(boundary):
        raise ValueError(
            f"{path}: resolves to {real}, outside the corpus folder {boundary}; refused "
            "(symlinks and '..' may not leave the corpus)"
        )
    return real


def _read_text(boundary: Path, path: Path) -> str:
    real = _inside(boundary, path)
    try:
        return real.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: unreadable corpus file ({type(exc).__name__}: {exc})") from None


def _read_json(boundary: Path, path: Path, twice: bool = False):
    """JSON of ``path``; ``twice``: a JSON string is decoded once more (the released ``all_action_id.json``)."""
    text = _read_text(boundary, path)
    try:
        obj = json.loads(text)
        if twice and isinstance(obj, str):
            obj = json.loads(obj)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: malformed corpus file (not JSON: {type(exc).__name__}: {exc})") from None
    return obj


def _as_id(v, path: Path, entry: str) -> int:
    """An integer id (an int, or a string of decimal digits); anything else is a ValueError."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str) and re.fullmatch(r"-?[0-9]{1,18}", v):
        return int(v)
    raise ValueError(f"{path}: {entry}: id {v!r} is not an integer")


def _expect(cond: bool, path: Path, msg: str) -> None:
    if not cond:
        raise ValueError(f"{path}: {msg}")


def _id_map(obj, path: Path, what: str) -> dict[str, int]:
    """``{name: id}`` with unique integer ids (``all_action_id.json``, ``all_page_id.json``)."""
    _expect(isinstance(obj, dict), path, f"expected an object mapping {what} to integer ids, got {type(obj).__name__}")
    out, owner = {}, {}
    for k, v in obj.items():
        i = _as_id(v, path, f"entry {k!r}")
        _expect(i not in owner, path, f"entry {k!r}: duplicate id {i} (already used by {owner.get(i)!r})")
        owner[i] = k
        out[k] = i
    return out


def _page_actions(obj, path: Path, known: dict[int, str]) -> dict[str, list[int]]:
    """``{"data": [{"name", "action_valid"}]}`` -> ``{page: [ids]}`` (known, unique ids; unique pages)."""
    data = obj.get("data") if isinstance(obj, dict) else None
    _expect(isinstance(data, list), path, 'expected {"data": [{"name": ..., "action_valid": [...]}, ...]}')
    out: dict[str, list[int]] = {}
    for j, e in enumerate(data):
        _expect(
            isinstance(e, dict)
            and isinstance(e.get("name"), str)
            and e["name"]
            and isinstance(e.get("action_valid"), list),
            path,
            f"data[{j}]: expected {{'name': non-empty str, 'action_valid': list}}, got {str(e)[:80]}",
        )
        name = e["name"]
        _expect(name not in out, path, f"data[{j}]: duplicate page {name!r}")
        ids = [_as_id(a, path, f"data[{j}] (page {name!r})") for a in e["action_valid"]]
        for a in ids:
            _expect(a in known, path, f"data[{j}] (page {name!r}): unknown action id {a} (not in all_action_id.json)")
        _expect(len(set(ids)) == len(ids), path, f"data[{j}] (page {name!r}): an action id is listed twice")
        out[name] = ids
    return out


def _triples(obj, path: Path, known: dict[int, str]) -> list[tuple[str, int, str]]:
    data = obj.get("data") if isinstance(obj, dict) else None
    _expect(isinstance(data, list), path, 'expected {"data": [[src_page, action_id, dst_page], ...]}')
    out = []
    for j, t in enumerate(data):
        _expect(
            isinstance(t, list) and len(t) == 3 and isinstance(t[0], str) and isinstance(t[2], str) and t[0] and t[2],
            path,
            f"data[{j}]: expected [src_page, action_id, dst_page], got {str(t)[:80]}",
        )
        a = _as_id(t[1], path, f"data[{j}]")
        _expect(a in known, path, f"data[{j}]: unknown action id {a} (not in all_action_id.json)")
        out.append((t[0], a, t[2]))
    return out


def _roles(obj, path: Path, known: dict[int, str]) -> dict[str, str]:
    _expect(isinstance(obj, dict), path, f"expected an object mapping action ids to roles, got {type(obj).__name__}")
    for k, v in obj.items():
        _expect(_as_id(k, path, f"entry {k!r}") in known, path, f"entry {k!r}: unknown action id")
        _expect(isinstance(v, str), path, f"entry {k!r}: role {v!r} is not a string")
    return dict(obj)


def load_app(app_dir: str | Path, read_xml: bool = False, corpus_root: str | Path | None = None) -> App:
    """Read one Mobile3M-style app directory; nothing outside ``corpus_root`` (default: the app directory)
    is read. Raises ValueError naming the file and the entry on bad structure (types, ids, unknown or duplicate
    ids). An action string that no known form parses is not an error: :meth:`App.page` leaves it out of the
    page's elements and records it in ``Page.skipped``; :meth:`App.unparsable_actions` lists them."""
    d = Path(app_dir)
    boundary = Path(corpus_root if corpus_root is not None else d).resolve()
    _inside(boundary, d)
    names = ("all_action_id.json", "all_page_actions.json", "all_triple.json")
    try:
        action_ids = _id_map(_read_json(boundary, d / names[0], twice=True), d / names[0], "action strings")
        known = {i: a for a, i in action_ids.items()}
        page_actions = _page_actions(_read_json(boundary, d / names[1]), d / names[1], known)
        triples = _triples(_read_json(boundary, d / names[2]), d / names[2], known)
    except FileNotFoundError as exc:
        raise ValueError(f"{d}: not a Mobile3M app directory (missing {Path(exc.filename).name})") from None
    opt = {n: d / n for n in ("all_page_id.json", "roles.json")}
    page_ids = (
        _id_map(_read_json(boundary, opt["all_page_id.json"], twice=True), opt["all_page_id.json"], "page names")
        if opt["all_page_id.json"].exists()
        else {}
    )
    roles = (
        _roles(_read_json(boundary, opt["roles.json"]), opt["roles.json"], known) if opt["roles.json"].exists() else {}
    )
    for s, _, t in triples:  # pages that appear only in triples still exist (e.g. leaves with no valid action)
        page_actions.setdefault(s, [])
        page_actions.setdefault(t, [])
    _expect(
        bool(page_actions),
        d / names[1],
        "the app has no pages (empty data in all_page_actions.json and all_triple.json)",
    )
    xml = {}
    if read_xml:
        for p in page_actions:
            f = d / p / f"{p}-xml.txt"
            if _inside(boundary, f).exists():
                xml[p] = _read_text(boundary, f)
    return App(d.name, action_ids, page_actions, triples, page_ids, xml, roles)


def write_corpus(corpus: Corpus, out_dir: str | Path, write_pages: bool = True) -> Path:
    out = Path(out_dir)
    for app in corpus.apps.values():
        write_app(app, out, write_pages)
    return out


def load_corpus(root: str | Path, read_xml: bool = False) -> Corpus:
    """Every app directory (one holding ``all_triple.json``) under ``root``; nothing outside ``root`` is read
    (an app folder or file that is a symlink leaving ``root`` is refused)."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root}: corpus directory does not exist")
    apps = {}
    for d in sorted(p for p in root.iterdir() if (p / "all_triple.json").exists()):
        apps[d.name] = load_app(d, read_xml, corpus_root=root)
    if not apps:
        raise ValueError(f"{root}: no app directory with all_triple.json found")
    return Corpus(apps)
