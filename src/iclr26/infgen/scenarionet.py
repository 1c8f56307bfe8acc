"""Reader for ScenarioNet scenarios (the official data format: WOMD / nuScenes / nuPlan converted with
``scenarionet.convert_*``) into the same :class:`Scene` / token sequences TinyTown produces.

A ScenarioNet scenario is a dict (one pickle per scenario) with

* ``tracks[id] = {"type": "VEHICLE" | "PEDESTRIAN" | "CYCLIST" | ..., "state": {"position": [T, 2|3],
  "heading": [T], "velocity": [T, 2], "length", "width", "height": [T] or [T, 1], "valid": [T]}}``
* ``map_features[id] = {"type": "LANE_SURFACE_STREET" | "ROAD_LINE_..." | ..., "polyline": [N, 2|3]}``
* ``dynamic_map_states[id] = {"type": "TRAFFIC_LIGHT", "lane": lane id, "state": {"object_state": [T]}}``
* ``metadata = {"sdc_id": id, ...}``

Conversion (paper section 3.1): 10 Hz -> 2 Hz (every 5th frame: 91 frames -> 19 steps), coordinates centred on
the SDC at the current frame (index 10 at 10 Hz), lanes cut into segments of <= 10 m sorted by distance to the
SDC (at most ``max_segments``), at most ``max_agents`` agents (the SDC first, then by distance), light states
mapped to green / yellow / red / unknown. Only lane polylines become <MAP> segments here (road lines, edges and
crosswalks are dropped: a simplification of the official 27-D vector features).

Files are untrusted: :func:`load_scenarios` unpickles only the scenario files the dataset's index
(``dataset_summary.pkl`` / ``dataset_mapping.pkl``, read as in the official ``read_dataset_summary``) lists,
only inside the dataset folder, and only with ``trust_pickles=True`` (a pickle can run code when loaded).
"""

from __future__ import annotations

import pickle
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from iclr26.infgen.world import (
    CYCLIST,
    GREEN,
    PEDESTRIAN,
    RED,
    SEG_LANE_IN,
    UNKNOWN,
    VEHICLE,
    YELLOW,
    MapData,
    Scene,
    build_map,
)

TYPE_MAP = {"VEHICLE": VEHICLE, "PEDESTRIAN": PEDESTRIAN, "CYCLIST": CYCLIST}


def light_state(s: Any) -> int:
    s = str(s).upper()
    if "CAUTION" in s or "YELLOW" in s:
        return YELLOW
    if "STOP" in s or "RED" in s:
        return RED
    if "GO" in s or "GREEN" in s:
        return GREEN
    return UNKNOWN


class BadScenario(ValueError):
    """A scenario that cannot become a :class:`Scene` (the SDC is missing, of an unknown type, never valid,
    invalid or non-finite at the current frame; no lanes; not a scenario dict). ``reason`` is a short category
    (for counting), the message names the scenario. :class:`LazyScenes` counts and skips them."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def _track_states(tr: Any, T10: int, frames: np.ndarray, cur: int) -> tuple[dict, str | None]:
    """The arrays of one track at the sampled ``frames`` (and its position at frame ``cur``), or a skip
    reason: 'not a track', 'empty track' (no or zero-length arrays), 'length mismatch', 'never valid' (at
    the sampled frames), 'non-finite state' (NaN / inf position, heading, velocity or size where valid),
    'bad size' (length or width <= 0)."""
    st = tr.get("state") if isinstance(tr, dict) else None
    if not isinstance(st, dict):
        return {}, "not a track"
    try:
        raw = {k: np.asarray(st[k], dtype=float) for k in ("position", "heading", "velocity", "length", "width")}
        raw["height"] = np.asarray(st.get("height", np.zeros(T10)), dtype=float)
        valid = np.asarray(st["valid"], dtype=bool).reshape(-1)
    except (KeyError, TypeError, ValueError):
        return {}, "empty track"
    if valid.size == 0 or any(v.size == 0 for v in raw.values()):
        return {}, "empty track"
    if valid.size != T10 or any(v.shape[0] != T10 for v in raw.values()):
        return {}, "length mismatch"
    if raw["position"].ndim != 2 or raw["position"].shape[1] < 2 or raw["velocity"].reshape(T10, -1).shape[1] < 2:
        return {}, "empty track"
    vf = valid[frames]
    if not vf.any():
        return {}, "never valid"
    first = int(frames[np.flatnonzero(vf)[0]])
    out = dict(
        pos=raw["position"][frames, :2],
        head=raw["heading"].reshape(T10, -1)[frames, 0],
        speed=np.linalg.norm(raw["velocity"].reshape(T10, -1)[frames, :2], axis=1),
        valid=vf,
        cur_valid=bool(valid[cur]) and bool(np.isfinite(raw["position"][cur, :2]).all()),
        cur_pos=raw["position"][cur, :2],
        size=[float(raw[k].reshape(T10, -1)[first, 0]) for k in ("length", "width", "height")],
    )
    finite = np.isfinite(out["pos"]).all(1) & np.isfinite(out["head"]) & np.isfinite(out["speed"])
    if not finite[vf].all() or not np.isfinite(out["size"]).all():
        return {}, "non-finite state"
    if out["size"][0] <= 0 or out["size"][1] <= 0:
        return {}, "bad size"
    return out, None


def scenario_to_scene(
    sd: dict,
    *,
    every: int = 5,
    current: int = 10,
    max_agents: int = 128,
    max_segments: int = 3000,
    skipped: Counter | None = None,
) -> Scene:
    """One ScenarioNet scenario dict -> :class:`Scene` at 10 Hz / ``every`` (2 Hz by default).

    Agent 0 is always the SDC (``metadata.sdc_id``). A scenario whose SDC is missing, not a vehicle /
    pedestrian / cyclist, has an unusable track (see :func:`_track_states`) or is not valid at the current
    frame raises :class:`BadScenario` (no other agent is ever promoted to agent 0). Other tracks that are
    unusable, of another type, or lights whose lane is not a lane of the map are dropped, counted by reason
    in ``skipped`` if given (e.g. ``{"track: never valid": 3, "track: type TRAFFIC_CONE": 1}``).
    """
    if not isinstance(sd, dict):
        raise BadScenario(f"not a ScenarioNet scenario: a {type(sd).__name__}, not a dict", "not a scenario")
    for key in ("tracks", "map_features", "metadata"):
        if key not in sd:
            raise BadScenario(f"not a ScenarioNet scenario: missing '{key}'", "not a scenario")
    skipped = Counter() if skipped is None else skipped
    name = sd.get("id", sd["metadata"].get("scenario_id", "?"))
    sdc, tracks = sd["metadata"].get("sdc_id"), sd["tracks"]
    if sdc not in tracks:
        raise BadScenario(f"scenario {name}: sdc_id {sdc!r} is not among the tracks", "SDC not among the tracks")
    if not isinstance(tracks[sdc], dict) or tracks[sdc].get("type") not in TYPE_MAP:
        raise BadScenario(f"scenario {name}: the SDC {sdc!r} is not a {' / '.join(sorted(TYPE_MAP))} track", "SDC type")
    try:
        T10 = len(np.asarray(tracks[sdc]["state"]["valid"]).reshape(-1))
    except (KeyError, TypeError):
        T10 = 0
    if T10 == 0:
        raise BadScenario(f"scenario {name}: the SDC {sdc!r} has an empty track", "SDC empty track")
    frames = np.arange(0, T10, every)
    cur = min(current, T10 - 1)
    ego, why = _track_states(tracks[sdc], T10, frames, cur)
    if why is not None:
        raise BadScenario(f"scenario {name}: the SDC {sdc!r} track is unusable ({why})", f"SDC {why}")
    if not ego["cur_valid"]:
        raise BadScenario(
            f"scenario {name}: the SDC {sdc!r} is not valid at the current frame {cur}",
            "SDC not valid at the current frame",
        )
    origin = ego["cur_pos"].copy()
    rows = []
    for tid, tr in tracks.items():
        if tid == sdc:
            st = ego
        elif not isinstance(tr, dict) or tr.get("type") not in TYPE_MAP:
            skipped[f"track: type {tr.get('type') if isinstance(tr, dict) else '?'}"] += 1
            continue
        else:
            st, why = _track_states(tr, T10, frames, cur)
            if why is not None:
                skipped[f"track: {why}"] += 1
                continue
        pos = st["pos"] - origin
        dist = float(np.linalg.norm(st["cur_pos"] - origin)) if st["cur_valid"] else 1e9
        rows.append(
            (tid != sdc, dist, str(tid), TYPE_MAP[tr["type"]], pos, st["head"], st["speed"], st["valid"], st["size"])
        )
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    if len(rows) > max_agents:
        skipped["track: beyond max_agents"] += len(rows) - max_agents
        rows = rows[:max_agents]
    assert not rows[0][0], "agent 0 must be the SDC"
    T, A = len(frames), len(rows)
    states = np.zeros((T, A, 4))
    valid = np.zeros((T, A), bool)
    for j, r in enumerate(rows):
        states[:, j, :2], states[:, j, 2], states[:, j, 3], valid[:, j] = r[4], r[5], r[6], r[7]
    states[~valid] = 0.0  # invalid frames carry no state (real files hold zeros or NaN there)
    size = np.array([r[8] for r in rows]).reshape(A, 3)
    types = np.array([r[3] for r in rows], dtype=int)
    map_, lane_index = scenario_map(sd, origin, max_segments, skipped)
    tl = np.full((T, max(1, map_.num_lights)), UNKNOWN)
    for k, (_lane, dyn) in enumerate(lane_index.get("_lights", [])):
        obj = list(dyn.get("state", {}).get("object_state", []))
        for t, f in enumerate(frames):
            tl[t, k] = light_state(obj[f]) if f < len(obj) else UNKNOWN
    if map_.num_lights == 0:
        tl = np.zeros((T, 0), int)
    return Scene(states, valid, size, types, np.arange(A), tl, map_, 0.1 * every)


def scenario_map(
    sd: dict, origin: np.ndarray, max_segments: int, skipped: Counter | None = None
) -> tuple[MapData, dict]:
    """Lanes -> segments; lights whose lane exists get the lane's segment nearest its end. Lanes with
    non-finite points and lights on no lane of the map are dropped, counted in ``skipped``."""
    skipped = Counter() if skipped is None else skipped
    lanes, ids = [], []
    for fid, feat in sd["map_features"].items():
        if str(feat.get("type", "")).upper().startswith("LANE") and "polyline" in feat:
            pl = np.asarray(feat["polyline"], float).reshape(-1, np.shape(feat["polyline"])[-1])[:, :2] - origin
            if not np.isfinite(pl).all():
                skipped["lane: non-finite points"] += 1
                continue
            if len(pl) >= 2 and np.linalg.norm(np.diff(pl, axis=0), axis=1).sum() > 0.5:
                lanes.append(pl)
                ids.append(str(fid))
    if not lanes:
        raise BadScenario(f"scenario {sd.get('id', '?')}: no lane polylines", "no lanes")
    # real Waymo ScenarioNet files key map features by strings ("123") but give a light's lane as an int
    # (123): compare them as strings, or every light is silently lost
    lights = [
        (str(dyn.get("lane")), dyn)
        for dyn in sd.get("dynamic_map_states", {}).values()
        if str(dyn.get("type", "TRAFFIC_LIGHT")).upper() == "TRAFFIC_LIGHT" and str(dyn.get("lane")) in ids
    ]
    n_lights = sum(
        str(dyn.get("type", "TRAFFIC_LIGHT")).upper() == "TRAFFIC_LIGHT"
        for dyn in sd.get("dynamic_map_states", {}).values()
    )
    if n_lights > len(lights):
        skipped["light: lane not in the map"] += n_lights - len(lights)
    light_lanes = [ids.index(lane) for lane, _ in lights]
    full = build_map(lanes, [SEG_LANE_IN] * len(lanes), light_lanes, bound=None, lane_half_width=1.75)
    if full.num_segments > max_segments:  # keep the segments nearest to the SDC
        keep = np.sort(np.argsort(np.linalg.norm(full.seg_pose[:, :2], axis=1))[:max_segments])
        remap = -np.ones(full.num_segments, int)
        remap[keep] = np.arange(len(keep))
        ok = remap[full.light_seg] >= 0
        lights = [lt for lt, good in zip(lights, ok, strict=True) if good]
        if not ok.all():
            skipped["light: lane beyond max_segments"] += int((~ok).sum())
        full = MapData(
            full.seg_points[keep],
            full.seg_pose[keep],
            full.seg_type[keep],
            full.seg_lane[keep],
            full.dense_xy,
            full.dense_heading,
            full.dense_lane,
            full.dense_s,
            remap[full.light_seg[ok]],
            None,
            full.lane_half_width,
        )
    return full, {"_lights": lights}


SUMMARY_FILE, MAPPING_FILE = "dataset_summary.pkl", "dataset_mapping.pkl"


def _load_index_file(path: Path):
    """One index pickle (read only after the caller opted in with ``trust_pickles``)."""
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh)
    except Exception as exc:  # a broken pickle can raise nearly anything
        raise ValueError(f"{path}: not a readable pickle ({type(exc).__name__}: {exc})") from None


def _inside(path: Path, roots: list[Path]) -> bool:
    """``path`` (symlinks and ``..`` resolved) lies in one of ``roots``."""
    try:
        real = path.resolve()
    except (OSError, ValueError, RuntimeError):
        return False
    return any(real.is_relative_to(r) for r in roots)


def scenario_files(path: str | Path, trust_pickles: bool = False, allowed_roots: tuple = ()) -> list[Path]:
    """The scenario files the dataset index lists, in index order (official ``read_dataset_summary``:
    ``dataset_summary.pkl`` maps file names to metadata, ``dataset_mapping.pkl`` maps them to a folder
    relative to the dataset; no mapping file = every file next to the summary).

    A listed name must be a bare ``*.pkl`` file name, and its resolved path (symlinks followed) must lie in
    the dataset folder or one of ``allowed_roots`` (e.g. the source folders of a merged dataset, whose
    mapping points at ``../<source>``); anything else is a ValueError naming the entry.
    """
    if not trust_pickles:
        raise ValueError(
            "ScenarioNet scenarios are Python pickles, and unpickling a file can run arbitrary code: pass "
            "trust_pickles=True (--set paper.trust_pickles=true) only for a dataset you converted yourself or "
            "otherwise trust. Only files listed in its dataset_summary.pkl are read."
        )
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"{root}: not a folder; point at the ScenarioNet dataset folder holding {SUMMARY_FILE}")
    roots = [root.resolve(), *(Path(r).resolve() for r in allowed_roots)]
    if not (root / SUMMARY_FILE).is_file():
        raise FileNotFoundError(
            f"{root}: no {SUMMARY_FILE}; not a ScenarioNet dataset (only files listed in the index are read)"
        )
    for idx in (SUMMARY_FILE, MAPPING_FILE):
        if (root / idx).exists() and not _inside(root / idx, roots[:1]):
            raise ValueError(f"{root / idx}: resolves outside the dataset folder; refused")
    summary = _load_index_file(root / SUMMARY_FILE)
    if not isinstance(summary, dict) or not summary:
        raise ValueError(f"{root / SUMMARY_FILE}: expected a non-empty dict of scenario file name -> metadata")
    has_mapping = (root / MAPPING_FILE).is_file()
    mapping = _load_index_file(root / MAPPING_FILE) if has_mapping else {}
    if not isinstance(mapping, dict):
        raise ValueError(f"{root / MAPPING_FILE}: expected a dict of scenario file name -> folder")
    files = []
    for name in summary:
        if not (
            isinstance(name, str)
            and name.endswith(".pkl")
            and Path(name).name == name
            and name not in (SUMMARY_FILE, MAPPING_FILE)
        ):
            raise ValueError(f"{root / SUMMARY_FILE}: entry {str(name)[:100]!r} is not a bare scenario file name")
        folder = mapping.get(name) if has_mapping else ""
        if not isinstance(folder, str) or "\x00" in folder:
            raise ValueError(f"{root / MAPPING_FILE}: entry {name!r}: folder {folder!r} is missing or not a string")
        f = root / folder / name
        if not _inside(f, roots):
            raise ValueError(
                f"{root / MAPPING_FILE}: entry {name!r}: {f} resolves outside the dataset folder "
                f"{roots[0]}; refused (pass allowed_roots for the sources of a merged dataset)"
            )
        if not f.is_file():
            raise ValueError(f"{root / SUMMARY_FILE}: entry {name!r}: listed file {f} does not exist")
        files.append(f)
    return files


def read_scenario(f: Path) -> dict:
    """Unpickle one index-listed scenario file (the caller opted in with ``trust_pickles``)."""
    with open(f, "rb") as fh:
        try:
            sd = pickle.load(fh)  # trusted by the caller (trust_pickles=True), listed in the index
        except Exception as exc:  # a broken pickle can raise nearly anything
            raise ValueError(f"{f}: not a readable scenario pickle ({type(exc).__name__}: {exc})") from None
    if not (isinstance(sd, dict) and "tracks" in sd):
        raise ValueError(f"{f}: listed in the index but not a ScenarioNet scenario dict")
    return sd


def load_scenarios(
    path: str | Path, limit: int | None = None, *, trust_pickles: bool = False, allowed_roots: tuple = ()
) -> list[dict]:
    """The scenarios a ScenarioNet dataset's index lists (see :func:`scenario_files`), first ``limit`` only,
    all in memory (:class:`LazyScenes` reads them one at a time instead).

    Unpickling runs only with ``trust_pickles=True``; without it this raises a ValueError saying why.
    """
    return [read_scenario(f) for f in scenario_files(path, trust_pickles, allowed_roots)[:limit]]


class LazyScenes(Sequence):
    """Scenes of scenario files, each read and converted only when first asked for, with the last
    ``cache_size`` kept (so a training rank holds only the scenes it draws, never the whole dataset).

    ``files`` come from :func:`scenario_files` (the trust opt-in and the index checks happen there). A scenario
    that raises :class:`BadScenario` is a counted skip: ``scenes[i]`` is then the first usable scene after
    ``i`` (wrapping around), ``skipped`` counts the reasons (scenario-level ones as ``"scenario: ..."``, plus
    the dropped tracks and lights of the scenes read) and ``bad`` maps the skipped file to its message. An
    unreadable file stays an error (:func:`read_scenario`). ``convert`` takes the scenario dict and the
    ``skipped`` counter, e.g. ``lambda sd, skipped: scenario_to_scene(sd, skipped=skipped)``.
    """

    def __init__(self, files: Sequence[Path], convert: Callable[[dict, Counter], Scene], cache_size: int = 64):
        self.files = list(files)
        self.convert = convert
        self.cache_size = max(0, int(cache_size))
        self.skipped: Counter = Counter()
        self.bad: dict[str, str] = {}
        self.reads = 0
        self._counted: set[int] = set()
        self._cache: OrderedDict[int, Scene] = OrderedDict()

    def __len__(self) -> int:
        return len(self.files)

    def _scene(self, i: int) -> Scene | None:
        if i in self._cache:
            self._cache.move_to_end(i)
            return self._cache[i]
        if str(self.files[i]) in self.bad:
            return None
        self.reads += 1
        sd = read_scenario(self.files[i])
        dropped: Counter = Counter()
        try:
            scene = self.convert(sd, dropped)
        except BadScenario as exc:
            self.skipped[f"scenario: {exc.reason}"] += 1
            self.bad[str(self.files[i])] = str(exc)
            return None
        if i not in self._counted:  # a scene read again after leaving the cache is counted once
            self._counted.add(i)
            self.skipped.update(dropped)
        if self.cache_size:
            self._cache[i] = scene
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return scene

    def __getitem__(self, i: int) -> Scene:
        n = len(self.files)
        if not -n <= i < n:
            raise IndexError(i)
        for j in range(n):
            scene = self._scene((i + j) % n)
            if scene is not None:
                return scene
        raise ValueError(f"no usable scenario among {n} files: {self.skipped}")
