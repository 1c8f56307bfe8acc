"""A synthetic Mobile3M-style corpus, deterministic from a seed (spec §6).

Each app is a page tree (root -> sections -> items (+ a scrolled "more" page and filter results)
-> item tabs ("options") -> details) whose page names are discovery paths, plus cross-links that
turn the tree into a graph: "Recommended: <item>" deep links and a global search on the root,
"Popular: <item>" on section pages, "Similar: <item>" on item pages, and a Home tab everywhere.
Every target reachable through a shortcut therefore has two or more paths.

Noise: one ad app (a small subgraph an ad click leads into) and pop-up overlay screens (``Close`` /
``×`` and ``Open ad: ...``) that the noisy splits insert before trajectory steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from iclr26.sman_bench.corpus import (
    SCREEN_W,
    App,
    Corpus,
    click_string,
    input_string,
    page_xml,
    scroll_string,
)

SECTIONS = (
    "Electronics",
    "Clothing",
    "Books",
    "Sports",
    "Garden",
    "Toys",
    "Beauty",
    "Music",
    "Kitchen",
    "Travel",
    "Health",
    "Office",
    "Pets",
    "Games",
    "Outdoor",
    "Jewelry",
    "Movies",
    "Automotive",
    "Baby",
    "Crafts",
)
ADJECTIVES = (
    "Red",
    "Blue",
    "Green",
    "Vintage",
    "Smart",
    "Compact",
    "Deluxe",
    "Classic",
    "Wireless",
    "Organic",
    "Silver",
    "Golden",
    "Portable",
    "Premium",
    "Mini",
    "Urban",
    "Rustic",
    "Solar",
    "Bamboo",
    "Velvet",
)
NOUNS = (
    "Jacket",
    "Camera",
    "Lamp",
    "Kettle",
    "Backpack",
    "Speaker",
    "Notebook",
    "Sneakers",
    "Watch",
    "Blender",
    "Guitar",
    "Helmet",
    "Tent",
    "Mug",
    "Scarf",
    "Drone",
    "Pillow",
    "Puzzle",
    "Racket",
    "Candle",
)
OPTIONS = ("Reviews", "Specifications", "Questions", "Delivery", "Sellers", "Photos", "Warranty", "Price history")
DETAILS = (
    "Newest first",
    "Highest rated",
    "With photos",
    "Write a review",
    "Compare",
    "Save for later",
    "Report issue",
    "Contact seller",
)
AD_WORDS = ("Mega sale", "Flash deal", "Win a prize", "Limited offer", "Free gift")


@dataclass(frozen=True)
class GeneratorConfig:
    """Synthetic corpus size and structure.

    n_apps: number of apps (12 at small scale, 2 at smoke).
    n_sections: section buttons on the root page.
    n_items: items visible on a section page (one scroll reveals 2 more on the "more" page).
    n_more: items on the scrolled "more" page of a section.
    n_options: tabs ("options") on an item page.
    n_details: detail buttons on an option page.
    n_queries: filter queries per section page (input action -> results page).
    n_recommended: "Recommended: <item>" deep links on the root (shortcuts).
    n_search: global search inputs on the root that jump to an item page (shortcuts).
    p_popular: probability that a section page carries a "Popular: <item>" shortcut.
    p_similar: probability that an item page carries a "Similar: <item>" shortcut.
    """

    n_apps: int = 12
    n_sections: int = 4
    n_items: int = 4
    n_more: int = 2
    n_options: int = 3
    n_details: int = 2
    n_queries: int = 1
    n_recommended: int = 3
    n_search: int = 3
    p_popular: float = 0.7
    p_similar: float = 0.5

    def __post_init__(self):
        for name in ("n_apps", "n_sections", "n_items", "n_options", "n_details"):
            if getattr(self, name) < 1:
                raise ValueError(f"GeneratorConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.n_sections > len(SECTIONS):
            raise ValueError(f"n_sections <= {len(SECTIONS)}")
        if self.n_options > len(OPTIONS) or self.n_details > len(DETAILS):
            raise ValueError("n_options/n_details exceed the vocabulary")
        for name in ("p_popular", "p_similar"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"GeneratorConfig.{name} must be in [0, 1]")


SMOKE_CONFIG = GeneratorConfig(
    n_apps=2, n_sections=2, n_items=3, n_more=1, n_options=2, n_details=1, n_recommended=2, n_search=2
)


def _row(i: int) -> tuple[tuple[int, int], tuple[int, int]]:
    y = 240 + 150 * i
    return (40, y), (SCREEN_W - 40, y + 130)


HOME_BOUNDS = ((0, 2250), (360, 2400))
SEARCH_BOUNDS = ((40, 80), (SCREEN_W - 40, 200))


class _Builder:
    def __init__(self, name: str):
        self.name = name
        self.action_ids: dict[str, int] = {}
        self.page_actions: dict[str, list[int]] = {}
        self.elements: dict[str, list[dict]] = {}
        self.triples: list[tuple[str, int, str]] = []
        self.roles: dict[str, str] = {}
        self.edges: set[tuple[str, int]] = set()

    def aid(self, s: str, role: str) -> int:
        if s not in self.action_ids:
            self.action_ids[s] = len(self.action_ids)
            self.roles[str(self.action_ids[s])] = role
        return self.action_ids[s]

    def add_page(self, name: str):
        self.page_actions.setdefault(name, [])
        self.elements.setdefault(name, [])

    def add_edge(self, src: str, s: str, role: str, el: dict, dst: str | None) -> int:
        """Add a valid action on ``src``; ``dst=None`` means a new tree child named ``src_aid``."""
        a = self.aid(s, role)
        dst = f"{src}_{a}" if dst is None else dst
        if (src, a) in self.edges:
            return a
        self.edges.add((src, a))
        if a not in self.page_actions[src]:
            self.page_actions[src].append(a)
            if not any(e["text"] == el["text"] and e["kind"] == el["kind"] for e in self.elements[src]):
                self.elements[src].append(el)
        self.add_page(dst)
        self.triples.append((src, a, dst))
        return a

    def app(self) -> App:
        xml = {p: page_xml(els) for p, els in self.elements.items()}
        return App(
            self.name,
            self.action_ids,
            self.page_actions,
            self.triples,
            {p: i for i, p in enumerate(self.page_actions)},
            xml,
            self.roles,
        )


def _click_edge(b: _Builder, src: str, text: str, bounds, role: str, dst: str | None = None) -> int:
    """A click on ``text`` at ``bounds`` from ``src`` (to a new tree child when ``dst`` is None)."""
    return b.add_edge(src, click_string(text, bounds), role, {"kind": "click", "text": text, "bounds": bounds}, dst)


def _build_item(b: _Builder, cfg: GeneratorConfig, rng: np.random.Generator, src: str, item: str, row: int, item_page):
    """An item page under ``src`` with its option tabs and their detail buttons."""
    a = _click_edge(b, src, item, _row(row), "item")
    ip = f"{src}_{a}"
    item_page[item] = ip
    for oi, o in enumerate(rng.choice(len(OPTIONS), cfg.n_options, replace=False)):
        oa = _click_edge(b, ip, OPTIONS[o], _row(oi), "option")
        op = f"{ip}_{oa}"
        for di, d in enumerate(rng.choice(len(DETAILS), cfg.n_details, replace=False)):
            _click_edge(b, op, DETAILS[d], _row(di), "detail")


def _build_section(b: _Builder, cfg: GeneratorConfig, rng, root: str, si: int, sec: str, sec_items, item_page):
    """A section page: its items, the scrolled "more" page and the filter inputs."""
    sa = _click_edge(b, root, sec, _row(si), "section")
    sp = f"{root}_{sa}"
    for ii, it in enumerate(sec_items[: cfg.n_items]):
        _build_item(b, cfg, rng, sp, it, ii, item_page)
    list_bounds = (_row(0)[0], _row(cfg.n_items - 1)[1])
    if cfg.n_more > 0:
        region = {"kind": "scroll", "text": "scrollable list", "bounds": list_bounds}
        ma = b.add_edge(sp, scroll_string(list_bounds, "up"), "more", region, None)
        mp = f"{sp}_{ma}"
        for ii, it in enumerate(sec_items[cfg.n_items :]):
            _build_item(b, cfg, rng, mp, it, ii, item_page)
    for _qi in range(cfg.n_queries):
        q = sec_items[int(rng.integers(len(sec_items)))].split()[0].lower()
        field = {"kind": "input", "text": "Filter", "bounds": ((40, 2100), (SCREEN_W - 40, 2220))}
        b.add_edge(sp, input_string("Filter", q), "query", field, None)


def _add_root_shortcuts(b: _Builder, cfg: GeneratorConfig, rng, root: str, all_items: list[str], item_page):
    """ "Recommended: <item>" deep links and global search inputs on the root."""
    for k, it in enumerate(rng.choice(all_items, min(cfg.n_recommended, len(all_items)), replace=False)):
        _click_edge(b, root, f"Recommended: {it}", _row(cfg.n_sections + k), "shortcut", item_page[it])
    for it in rng.choice(all_items, min(cfg.n_search, len(all_items)), replace=False):
        field = {"kind": "input", "text": "Search", "bounds": SEARCH_BOUNDS}
        b.add_edge(root, input_string("Search", it.lower()), "shortcut", field, item_page[it])


def _add_page_shortcuts(b: _Builder, cfg: GeneratorConfig, rng, root: str, all_items: list[str], item_page):
    """ "Popular: <item>" on section pages, "Similar: <item>" on item pages, Home on every non-root page."""
    for page in list(b.page_actions):
        if page == root:
            continue
        depth = page.count("_")
        roles = {b.roles[str(a)] for a in b.page_actions[page]}
        if depth == 1 and rng.random() < cfg.p_popular:
            it = all_items[int(rng.integers(len(all_items)))]
            _click_edge(b, page, f"Popular: {it}", _row(cfg.n_items + 1), "shortcut", item_page[it])
        if "option" in roles and rng.random() < cfg.p_similar:
            it = all_items[int(rng.integers(len(all_items)))]
            if item_page[it] != page:
                _click_edge(b, page, f"Similar: {it}", _row(cfg.n_options + 1), "shortcut", item_page[it])
        _click_edge(b, page, "Home", HOME_BOUNDS, "home", root)


def generate_app(name: str, cfg: GeneratorConfig, rng: np.random.Generator) -> tuple[App, dict]:
    """One app. Returns the App and ``meta`` (item names -> page, used by noise/ads)."""
    b = _Builder(name)
    root = name
    b.add_page(root)
    sections = [SECTIONS[i] for i in rng.choice(len(SECTIONS), cfg.n_sections, replace=False)]
    n_per = cfg.n_items + cfg.n_more
    pairs = rng.choice(len(ADJECTIVES) * len(NOUNS), cfg.n_sections * n_per, replace=False)
    items = [f"{ADJECTIVES[p // len(NOUNS)]} {NOUNS[p % len(NOUNS)]}" for p in pairs]
    item_page: dict[str, str] = {}
    for si, sec in enumerate(sections):
        _build_section(b, cfg, rng, root, si, sec, items[si * n_per : (si + 1) * n_per], item_page)
    all_items = list(item_page)  # ---- shortcuts (edges to pages that already exist) ----
    _add_root_shortcuts(b, cfg, rng, root, all_items, item_page)
    _add_page_shortcuts(b, cfg, rng, root, all_items, item_page)
    return b.app(), {"items": item_page, "sections": sections}


def generate_ad_app(name: str = "adapp") -> App:
    """The ad subgraph an "Open ad" click leads into: landing -> offer -> sign-up (a trap, no way back)."""
    b = _Builder(name)
    b.add_page(name)
    a = b.add_edge(
        name,
        click_string("View offer", _row(0)),
        "ad",
        {"kind": "click", "text": "View offer", "bounds": _row(0)},
        None,
    )
    b.add_edge(
        f"{name}_{a}",
        click_string("Sign up now", _row(0)),
        "ad",
        {"kind": "click", "text": "Sign up now", "bounds": _row(0)},
        None,
    )
    return b.app()


def generate_corpus(seed: int, cfg: GeneratorConfig = GeneratorConfig()) -> tuple[Corpus, dict]:
    """The whole corpus (``cfg.n_apps`` apps + the ad app), deterministic from ``seed``."""
    rng = np.random.default_rng(seed)
    apps, meta = {}, {}
    for k in range(cfg.n_apps):
        app, m = generate_app(f"app{k}", cfg, rng)
        apps[app.name], meta[app.name] = app, m
    ad = generate_ad_app()
    apps[ad.name] = ad
    return Corpus(apps), meta


AD_PHRASINGS = {
    "train": {"ad": "Open ad: {deal} on {lure}", "deals": AD_WORDS, "dismiss": ("Close", "×")},
    "eval": {
        "ad": "Sponsored · {lure} {deal}",
        "deals": ("Hot bargain", "Super value", "Members only", "Last chance", "Bonus points"),
        "dismiss": ("Skip", "No thanks"),
    },
}
"""Disjoint ad and dismiss phrasings: ``train`` for anything an agent learns from, ``eval`` for the evaluated
noisy splits, so that a learned agent cannot key on the literal ad text or dismiss label (the layout is shared)."""


def popup_screen(rng: np.random.Generator, lure_words: list[str], phrasing: str = "train") -> list[dict]:
    """A pop-up/ad overlay: an ad (a targeted ad that reuses words of the task, as real ads do) and a dismiss
    button, worded by :data:`AD_PHRASINGS` [``phrasing``]. Returns element dicts in random order."""
    if phrasing not in AD_PHRASINGS:
        raise ValueError(f"phrasing must be one of {sorted(AD_PHRASINGS)}, got {phrasing!r}")
    ph = AD_PHRASINGS[phrasing]
    deals = ph["deals"]
    lure = " ".join(lure_words) if lure_words else deals[int(rng.integers(len(deals)))]
    ad = {
        "kind": "click",
        "text": ph["ad"].format(deal=deals[int(rng.integers(len(deals)))], lure=lure),
        "bounds": ((140, 900), (940, 1500)),
        "role": "ad",
    }
    close = {
        "kind": "click",
        "text": ph["dismiss"][int(rng.integers(len(ph["dismiss"])))],
        "bounds": ((880, 760), (980, 860)),
        "role": "dismiss",
    }
    return [ad, close] if rng.random() < 0.5 else [close, ad]
