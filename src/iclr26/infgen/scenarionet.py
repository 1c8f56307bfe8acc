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


def _col(x: Any, T: int) -> np.ndarray:
    a = np.asarray(x, dtype=float).reshape(T, -1)
    return a[:, 0]


def scenario_to_scene(
    sd: dict, *, every: int = 5, current: int = 10, max_agents: int = 128, max_segments: int = 3000
) -> Scene:
    """One ScenarioNet scenario dict -> :class:`Scene` at 10 Hz / ``every`` (2 Hz by default)."""
    for key in ("tracks", "map_features", "metadata"):
        if key not in sd:
            raise ValueError(f"not a ScenarioNet scenario: missing '{key}'")
    sdc = sd["metadata"].get("sdc_id")
    tracks = sd["tracks"]
    if sdc not in tracks:
        raise ValueError(f"sdc_id {sdc!r} is not among the tracks")
    T10 = len(np.asarray(tracks[sdc]["state"]["valid"]))
    frames = np.arange(0, T10, every)
    cur = min(current, T10 - 1)
    origin = np.asarray(tracks[sdc]["state"]["position"], float)[cur, :2]
    rows = []
    for tid, tr in tracks.items():
        if tr.get("type") not in TYPE_MAP:
            continue
        st = tr["state"]
        valid = np.asarray(st["valid"], bool).reshape(-1)
        if not valid[frames].any():
            continue
        pos = np.asarray(st["position"], float)[:, :2] - origin
        head = np.asarray(st["heading"], float).reshape(-1)
        vel = np.asarray(st["velocity"], float)[:, :2]
        first = int(np.flatnonzero(valid)[0])
        size = [float(_col(st[k], len(valid))[first]) for k in ("length", "width", "height")]
        dist = float(np.linalg.norm(pos[cur])) if valid[cur] else 1e9
        rows.append(
            (
                tid != sdc,
                dist,
                tid,
                TYPE_MAP[tr["type"]],
                pos[frames],
                head[frames],
                np.linalg.norm(vel[frames], axis=1),
                valid[frames],
                size,
            )
        )
    rows.sort(key=lambda r: (r[0], r[1], str(r[2])))
    rows = rows[:max_agents]
    T, A = len(frames), len(rows)
    states = np.zeros((T, A, 4))
    valid = np.zeros((T, A), bool)
    for j, r in enumerate(rows):
        states[:, j, :2], states[:, j, 2], states[:, j, 3], valid[:, j] = r[4], r[5], r[6], r[7]
    size = np.array([r[8] for r in rows]).reshape(A, 3)
    types = np.array([r[3] for r in rows], dtype=int)
    map_, lane_index = scenario_map(sd, origin, max_segments)
    tl = np.full((T, max(1, map_.num_lights)), UNKNOWN)
    for k, (_lane, dyn) in enumerate(lane_index.get("_lights", [])):
        obj = list(dyn.get("state", {}).get("object_state", []))
        for t, f in enumerate(frames):
            tl[t, k] = light_state(obj[f]) if f < len(obj) else UNKNOWN
    if map_.num_lights == 0:
        tl = np.zeros((T, 0), int)
    return Scene(states, valid, size, types, np.arange(A), tl, map_, 0.1 * every)


def scenario_map(sd: dict, origin: np.ndarray, max_segments: int) -> tuple[MapData, dict]:
    """Lanes -> segments; lights whose lane exists get the lane's segment nearest its end."""
    lanes, ids = [], []
    for fid, feat in sd["map_features"].items():
        if str(feat.get("type", "")).upper().startswith("LANE") and "polyline" in feat:
            pl = np.asarray(feat["polyline"], float)[:, :2] - origin
            if len(pl) >= 2 and np.linalg.norm(np.diff(pl, axis=0), axis=1).sum() > 0.5:
                lanes.append(pl)
                ids.append(str(fid))
    if not lanes:
        raise ValueError("scenario has no lane polylines")
    # real Waymo ScenarioNet files key map features by strings ("123") but give a light's lane as an int
    # (123): compare them as strings, or every light is silently lost
    lights = [
        (str(dyn.get("lane")), dyn)
        for dyn in sd.get("dynamic_map_states", {}).values()
        if str(dyn.get("type", "TRAFFIC_LIGHT")).upper() == "TRAFFIC_LIGHT" and str(dyn.get("lane")) in ids
    ]
    light_lanes = [ids.index(lane) for lane, _ in lights]
    full = build_map(lanes, [SEG_LANE_IN] * len(lanes), light_lanes, bound=None, lane_half_width=1.75)
    if full.num_segments > max_segments:  # keep the segments nearest to the SDC
        keep = np.sort(np.argsort(np.linalg.norm(full.seg_pose[:, :2], axis=1))[:max_segments])
        remap = -np.ones(full.num_segments, int)
        remap[keep] = np.arange(len(keep))
        ok = remap[full.light_seg] >= 0
        lights = [lt for lt, good in zip(lights, ok, strict=True) if good]
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


def load_scenarios(
    path: str | Path, limit: int | None = None, *, trust_pickles: bool = False, allowed_roots: tuple = ()
) -> list[dict]:
    """The scenarios a ScenarioNet dataset's index lists (see :func:`scenario_files`), first ``limit`` only.

    Unpickling runs only with ``trust_pickles=True``; without it this raises a ValueError saying why.
    """
    out = []
    for f in scenario_files(path, trust_pickles, allowed_roots)[:limit]:
        with open(f, "rb") as fh:
            try:
                sd = pickle.load(fh)  # trusted by the caller (trust_pickles=True), listed in the index
            except Exception as exc:  # a broken pickle can raise nearly anything
                raise ValueError(f"{f}: not a readable scenario pickle ({type(exc).__name__}: {exc})") from None
        if not (isinstance(sd, dict) and "tracks" in sd):
            raise ValueError(f"{f}: listed in the index but not a ScenarioNet scenario dict")
        out.append(sd)
    return out
