"""TinyTown: the in-package traffic world used instead of the Waymo Open Motion Dataset.

One signalised four-way intersection. Every arm has one incoming and one outgoing lane (right-hand
traffic, lane width 3.5 m); twelve connectors (straight / left / right from every approach) cross the
junction box. Lane centrelines are cut into map segments of at most 10 m (the paper's segment rule).

* **Signals**: one light per incoming lane, protected phases in turn (green 12 s, yellow 3 s, all-red
  2 s), so a cycle lasts 68 s; a random phase offset per run.
* **Arrivals**: a Poisson process of rate ``lambda_entry`` vehicles/s at each of the 4 entries; an arrival
  waits until its entry is clear. Vehicles (92 %) and cyclists (8 %) with type-dependent size and desired
  speed; a route (straight 0.6 / left 0.2 / right 0.2).
* **Longitudinal control**: the Intelligent Driver Model (IDM) towards the leader on the vehicle's route
  and towards the stop line when the light is red, or yellow and the vehicle can still stop::

      a = a_max [1 - (v / v0)^4 - (s*(v, dv) / s)^2],   s* = s0 + v T + v dv / (2 sqrt(a_max b))

  The desired speed is lowered before and on turning connectors (``v0 <= sqrt(v_turn^2 + 2 b_c d)``).
* **Lateral motion**: the lane centreline plus a smooth sinusoidal offset (amplitude <= 0.3 m) that the
  heading follows, so logs are kinematically consistent.
* **Exits**: a vehicle is removed when it reaches the end of its outgoing lane (the map boundary).

The simulation runs at 10 Hz; logs are kept at 2 Hz (dt = 0.5 s) as :class:`Scene` objects, the same
container the ScenarioNet reader produces, and cut into WOMD-like windows of 19 steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

# Agent types (the official vocabulary order).
VEHICLE, PEDESTRIAN, CYCLIST = 0, 1, 2
TYPE_NAMES = ("vehicle", "pedestrian", "cyclist")
# Traffic-light states.
GREEN, YELLOW, RED, UNKNOWN = 0, 1, 2, 3
# Segment types (MetaDrive-like flags, reduced).
SEG_LANE_IN, SEG_LANE_OUT, SEG_CONNECTOR, SEG_OTHER = 0, 1, 2, 3


@dataclass
class MapData:
    """A map cut into segments (the <MAP> tokens), plus dense centreline points for metrics.

    seg_points: [M, P, 2] points resampled along each segment (world frame).
    seg_pose: [M, 3] segment centre (x, y) and heading.
    seg_type: [M] int segment type.
    seg_lane: [M] lane id of the segment.
    dense_xy: [Q, 2] dense lane-centre points (0.5 m spacing); dense_heading [Q]; dense_lane [Q];
        dense_s [Q] arc length along the lane.
    light_seg: [K] the segment each traffic light controls (its lane's last segment before the stop line).
    bound: half side of the square region agents live in (None: no boundary, e.g. ScenarioNet maps).
    lane_half_width: half lane width, for the off-road metric.
    """

    seg_points: np.ndarray
    seg_pose: np.ndarray
    seg_type: np.ndarray
    seg_lane: np.ndarray
    dense_xy: np.ndarray
    dense_heading: np.ndarray
    dense_lane: np.ndarray
    dense_s: np.ndarray
    light_seg: np.ndarray
    bound: float | None = None
    lane_half_width: float = 1.75

    @property
    def num_segments(self) -> int:
        return int(self.seg_pose.shape[0])

    @cached_property
    def lane_tree(self):
        """A KD-tree (scipy ``cKDTree``) over ``dense_xy``, built on first use (nearest-lane queries)."""
        from scipy.spatial import cKDTree

        return cKDTree(self.dense_xy)

    @property
    def num_lights(self) -> int:
        return int(self.light_seg.shape[0])


@dataclass
class Scene:
    """A traffic log at 2 Hz (a TinyTown run, a window of it, a rollout, or a ScenarioNet scenario).

    states: [T, A, 4] (x, y, heading psi, speed v >= 0); the velocity vector is v (cos psi, sin psi).
    valid: [T, A] bool, agent present at step t.
    size: [A, 3] (length, width, height).
    types: [A] int (VEHICLE, PEDESTRIAN, CYCLIST).
    uid: [A] int unique agent ids.
    tl: [T, K] int light states.
    map: the :class:`MapData`.
    dt: seconds per step.
    """

    states: np.ndarray
    valid: np.ndarray
    size: np.ndarray
    types: np.ndarray
    uid: np.ndarray
    tl: np.ndarray
    map: MapData
    dt: float = 0.5

    @property
    def T(self) -> int:
        return int(self.states.shape[0])

    @property
    def A(self) -> int:
        return int(self.states.shape[1])

    def window(self, t0: int, length: int) -> Scene:
        """Steps [t0, t0 + length), keeping only agents present in them."""
        sl = slice(t0, t0 + length)
        keep = self.valid[sl].any(0)
        return Scene(
            self.states[sl][:, keep].copy(),
            self.valid[sl][:, keep].copy(),
            self.size[keep].copy(),
            self.types[keep].copy(),
            self.uid[keep].copy(),
            self.tl[sl].copy(),
            self.map,
            self.dt,
        )

    def counts(self) -> np.ndarray:
        """Agents present per step."""
        return self.valid.sum(1)


@dataclass(frozen=True)
class TinyTownConfig:
    """TinyTown parameters.

    lambda_entry: Poisson arrival rate per entry lane (vehicles/s), 4 entries.
    arm_length: distance from the junction centre to the map boundary (m).
    box_half: distance from the centre to the stop lines (m).
    lane_width: lane width (m).
    green: green time per protected phase (s).
    yellow: yellow time per protected phase (s).
    all_red: all-red time between phases (s).
    p_cyclist: share of cyclists among arrivals.
    route_probs: (straight, left, right) probabilities.
    v_turn: desired speed on turning connectors (m/s).
    idm_a: IDM maximum acceleration (m/s^2).
    idm_b: IDM comfortable braking (m/s^2).
    idm_T: IDM time headway (s).
    idm_s0: IDM jam distance (m).
    lateral_amp: bound of the smooth lane-keeping offset A ~ U(0, lateral_amp) per vehicle (m).
        The offset is e(s) = A sin(2 pi s / lateral_wavelength + phase); the heading follows it.
    lateral_wavelength: wavelength of the lateral offset (m).
    sim_dt: simulation step (s).
    log_dt: log step (s), a multiple of sim_dt.
    segment_max_len: longest map segment (m), as in the paper.
    """

    lambda_entry: float = 0.05
    arm_length: float = 60.0
    box_half: float = 8.0
    lane_width: float = 3.5
    green: float = 12.0
    yellow: float = 3.0
    all_red: float = 2.0
    p_cyclist: float = 0.08
    route_probs: tuple[float, float, float] = (0.6, 0.2, 0.2)
    v_turn: float = 7.0
    idm_a: float = 1.5
    idm_b: float = 2.0
    idm_T: float = 1.2
    idm_s0: float = 2.0
    lateral_amp: float = 0.3
    lateral_wavelength: float = 40.0
    sim_dt: float = 0.1
    log_dt: float = 0.5
    segment_max_len: float = 10.0

    def __post_init__(self) -> None:
        if self.lambda_entry <= 0 or self.arm_length <= self.box_half + 10:
            raise ValueError(f"bad TinyTownConfig: lambda={self.lambda_entry}, arm_length={self.arm_length}")
        ratio = self.log_dt / self.sim_dt
        if abs(ratio - round(ratio)) > 1e-9:
            raise ValueError("log_dt must be a multiple of sim_dt")

    @property
    def cycle(self) -> float:
        return 4 * (self.green + self.yellow + self.all_red)


# --------------------------------------------------------------------------------------------------
# Geometry
# --------------------------------------------------------------------------------------------------


def _resample(points: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Resample a polyline at ``step`` metres; returns points and their arc lengths."""
    seg = np.linalg.norm(np.diff(points, axis=0), axis=1)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    n = max(2, int(math.ceil(s[-1] / step)) + 1)
    s_new = np.linspace(0.0, s[-1], n)
    xy = np.stack([np.interp(s_new, s, points[:, 0]), np.interp(s_new, s, points[:, 1])], 1)
    return xy, s_new


def _headings(xy: np.ndarray) -> np.ndarray:
    d = np.gradient(xy, axis=0)
    return np.arctan2(d[:, 1], d[:, 0])


def wrap_angle(a):
    """Wrap to [-pi, pi)."""
    return (a + np.pi) % (2 * np.pi) - np.pi


def cut_segments(lane_xy: np.ndarray, max_len: float, n_points: int) -> list[np.ndarray]:
    """Cut a dense polyline into pieces of at most ``max_len`` metres, each resampled to ``n_points``.

    All pieces are sampled by one interpolation over the polyline, so the cost is linear in its length.
    """
    seg = np.linalg.norm(np.diff(lane_xy, axis=0), axis=1)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    n_pieces = max(1, int(math.ceil(s[-1] / max_len - 1e-9)))
    edges = np.linspace(0.0, s[-1], n_pieces + 1)
    ss = np.linspace(edges[:-1], edges[1:], n_points, axis=1).ravel()  # [n_pieces * n_points], sorted
    pts = np.stack([np.interp(ss, s, lane_xy[:, 0]), np.interp(ss, s, lane_xy[:, 1])], 1)
    return list(pts.reshape(n_pieces, n_points, 2))


def build_map(
    lanes: list[np.ndarray],
    lane_types: list[int],
    light_lanes: list[int],
    *,
    bound: float | None,
    lane_half_width: float,
    segment_max_len: float = 10.0,
    n_points: int = 11,
) -> MapData:
    """Cut lane polylines into <= ``segment_max_len`` segments and collect the map arrays."""
    seg_points, seg_type, seg_lane = [], [], []
    dense_xy, dense_h, dense_lane, dense_s = [], [], [], []
    last_seg_of_lane = {}
    for lane_id, (xy, lt) in enumerate(zip(lanes, lane_types, strict=True)):
        dxy, ds = _resample(np.asarray(xy, dtype=float), 0.5)
        dense_xy.append(dxy)
        dense_h.append(_headings(dxy))
        dense_lane.append(np.full(len(dxy), lane_id))
        dense_s.append(ds)
        for piece in cut_segments(dxy, segment_max_len, n_points):
            seg_points.append(piece)
            seg_type.append(lt)
            seg_lane.append(lane_id)
            last_seg_of_lane[lane_id] = len(seg_points) - 1
    pts = np.stack(seg_points)
    centre = pts.mean(1)
    d = pts[:, -1] - pts[:, 0]
    heading = np.arctan2(d[:, 1], d[:, 0])
    return MapData(
        seg_points=pts,
        seg_pose=np.concatenate([centre, heading[:, None]], 1),
        seg_type=np.asarray(seg_type),
        seg_lane=np.asarray(seg_lane),
        dense_xy=np.concatenate(dense_xy),
        dense_heading=np.concatenate(dense_h),
        dense_lane=np.concatenate(dense_lane),
        dense_s=np.concatenate(dense_s),
        light_seg=np.asarray([last_seg_of_lane[ln] for ln in light_lanes], dtype=int),
        bound=bound,
        lane_half_width=lane_half_width,
    )


def _bezier(p0, p1, p2, p3, n=60):
    t = np.linspace(0, 1, n)[:, None]
    return (1 - t) ** 3 * p0 + 3 * (1 - t) ** 2 * t * p1 + 3 * (1 - t) * t**2 * p2 + t**3 * p3


class TinyTown:
    """The world: geometry, signals and the simulator. ``TinyTown(cfg).simulate(duration, seed)``."""

    def __init__(self, cfg: TinyTownConfig | None = None):
        self.cfg = cfg = cfg or TinyTownConfig()
        c, L, w = cfg.box_half, cfg.arm_length, cfg.lane_width / 2
        u = [np.array([math.cos(d * math.pi / 2), math.sin(d * math.pi / 2)]) for d in range(4)]
        n = [np.array([-v[1], v[0]]) for v in u]
        lanes, types = [], []
        # lanes 0..3: incoming on arm d (towards the centre); 4..7: outgoing on arm d
        for d in range(4):
            lanes.append(np.stack([u[d] * L + w * n[d], u[d] * c + w * n[d]]))
            types.append(SEG_LANE_IN)
        for d in range(4):
            lanes.append(np.stack([u[d] * c - w * n[d], u[d] * L - w * n[d]]))
            types.append(SEG_LANE_OUT)
        # connectors 8..19: from approach a, manoeuvre m (0 straight, 1 left, 2 right)
        self.connector = {}
        for a in range(4):
            for m, b in enumerate(((a + 2) % 4, (a + 3) % 4, (a + 1) % 4)):
                p0, p3 = u[a] * c + w * n[a], u[b] * c - w * n[b]
                k = np.linalg.norm(p3 - p0) / 3
                xy = _bezier(p0, p0 - u[a] * k, p3 - u[b] * k, p3)
                self.connector[(a, m)] = len(lanes)
                lanes.append(xy)
                types.append(SEG_CONNECTOR)
        self.lanes = [(_resample(np.asarray(x, float), 0.25)) for x in lanes]  # (xy, s) per lane
        self.map = build_map(
            lanes, types, light_lanes=[0, 1, 2, 3], bound=L, lane_half_width=w, segment_max_len=cfg.segment_max_len
        )
        # routes: (approach a, manoeuvre m) -> lane list, dense path
        self.routes = {}
        for (a, m), conn in self.connector.items():
            b = ((a + 2) % 4, (a + 3) % 4, (a + 1) % 4)[m]
            ids = [a, conn, 4 + b]
            xy = np.concatenate([self.lanes[i][0] if j == 0 else self.lanes[i][0][1:] for j, i in enumerate(ids)])
            pxy, ps = _resample(xy, 0.25)
            offsets = np.cumsum([0.0] + [self.lanes[i][1][-1] for i in ids[:-1]])
            self.routes[(a, m)] = dict(
                lanes=ids,
                xy=pxy,
                s=ps,
                heading=_headings(pxy),
                offsets=offsets,
                heading_unwrapped=np.unwrap(_headings(pxy)),
                stop_s=float(self.lanes[a][1][-1]),
                conn_end=float(offsets[2]),
                length=float(ps[-1]),
                turning=m != 0,
            )

    # -- signals --------------------------------------------------------------------------------
    def light_states(self, time: float, offset: float) -> np.ndarray:
        """State of the 4 lights (one per approach) at ``time`` seconds."""
        cfg = self.cfg
        phase_len = cfg.green + cfg.yellow + cfg.all_red
        tc = (time + offset) % cfg.cycle
        active, tp = int(tc // phase_len), tc % phase_len
        out = np.full(4, RED)
        if tp < cfg.green:
            out[active] = GREEN
        elif tp < cfg.green + cfg.yellow:
            out[active] = YELLOW
        return out

    # -- simulation -----------------------------------------------------------------------------
    def simulate(self, duration: float, seed: int, warmup: float = 60.0) -> Scene:
        """Run for ``warmup + duration`` seconds; return the 2 Hz log of the last ``duration`` seconds.

        Per 10 Hz step: queue the arrivals due, spawn where an entry is clear (:meth:`_spawn`), move every
        vehicle by IDM and drop those that left the map (:meth:`_advance`), and every ``log_dt`` after the
        warm-up log the lights and the vehicles' poses (:meth:`_log_row`).
        """
        cfg = self.cfg
        rng = np.random.default_rng(seed)
        offset = rng.uniform(0, cfg.cycle)
        total = warmup + duration
        n_sim = int(round(total / cfg.sim_dt))
        every = int(round(cfg.log_dt / cfg.sim_dt))
        arrivals = self._arrivals(rng, total)
        pending: list[list] = [[] for _ in range(4)]
        ai = 0
        veh: list[dict] = []
        records: dict[int, dict] = {}
        log_tl, log_rows = [], []
        self.entry_times: list[float] = []
        self._next_uid = 0
        for k in range(n_sim):
            time = k * cfg.sim_dt
            while ai < len(arrivals) and arrivals[ai][0] <= time:
                pending[arrivals[ai][1]].append(arrivals[ai][0])
                ai += 1
            lights = self.light_states(time, offset)
            for a in range(4):
                if pending[a]:
                    self._spawn(a, pending[a], veh, rng, time, warmup)
            veh = self._advance(veh, lights)
            if time >= warmup - 1e-9 and k % every == 0:
                log_tl.append(lights.copy())
                log_rows.append(self._log_row(veh, records))
        meta = {u: (r["size"], r["type"]) for u, r in records.items()}
        return scene_from_rows(log_rows, log_tl, meta, self.map, cfg.log_dt)

    def _arrivals(self, rng: np.random.Generator, total: float) -> list[tuple[float, int]]:
        """Poisson arrival times per entry lane over ``total`` seconds, as sorted (time, entry) pairs."""
        arrivals = []
        for a in range(4):
            t = rng.exponential(1 / self.cfg.lambda_entry)
            while t < total:
                arrivals.append((t, a))
                t += rng.exponential(1 / self.cfg.lambda_entry)
        arrivals.sort()
        return arrivals

    def _spawn(self, a: int, pending: list, veh: list[dict], rng: np.random.Generator, time: float, warmup: float):
        """The first waiting arrival at entry ``a`` enters if the last vehicle on the entry lane is far enough
        (its type and length are drawn either way); it gets a route, a desired speed, size and lateral offset.
        Entries after the warm-up are recorded in ``entry_times``."""
        cfg = self.cfg
        on_lane = [v for v in veh if v["route"][0] == a and v["s"] < self.routes[v["route"]]["stop_s"]]
        last = min(on_lane, key=lambda v: v["s"]) if on_lane else None
        is_cyc = rng.random() < cfg.p_cyclist
        length = 1.8 if is_cyc else rng.uniform(4.0, 5.0)
        if last is not None and last["s"] - last["length"] / 2 - length / 2 < 8.0:
            return
        pending.pop(0)
        m = int(rng.choice(3, p=cfg.route_probs))
        v0 = rng.uniform(4.0, 6.0) if is_cyc else rng.uniform(10.0, 13.5)
        speed = v0 if last is None else min(v0, last["v"] + 0.5 * (last["s"] - 8.0) / 5.0)
        veh.append(
            dict(
                uid=self._next_uid,
                route=(a, m),
                s=length / 2,
                v=max(0.0, speed),
                v0=v0,
                length=length,
                width=0.7 if is_cyc else rng.uniform(1.8, 2.0),
                height=1.7 if is_cyc else 1.5,
                type=CYCLIST if is_cyc else VEHICLE,
                lat=(rng.uniform(0, cfg.lateral_amp), rng.uniform(0, 2 * math.pi)),
            )
        )
        if time >= warmup:
            self.entry_times.append(time)
        self._next_uid += 1

    def _advance(self, veh: list[dict], lights: np.ndarray) -> list[dict]:
        """One simulation step: IDM accelerations for all (from the same state), integrate speed (>= 0) and
        arc length, and keep the vehicles that have not reached the end of their route."""
        dt = self.cfg.sim_dt
        for v in veh:
            v["lane_pos"] = self._lane_pos(self.routes[v["route"]], v["s"])
        acc = [self._idm(v, veh, lights) for v in veh]
        for v, a in zip(veh, acc, strict=True):
            nv = max(0.0, v["v"] + a * dt)
            v["s"] += (v["v"] + nv) / 2 * dt
            v["v"] = nv
        return [v for v in veh if v["s"] < self.routes[v["route"]]["length"] - v["length"] / 2]

    def _log_row(self, veh: list[dict], records: dict[int, dict]) -> dict:
        """``{uid: (x, y, heading, speed)}`` of every vehicle: the route centreline at its arc length plus the
        smooth lateral offset, the heading turned by the offset's slope; records each vehicle's size and type."""
        row = {}
        for v in veh:
            r = self.routes[v["route"]]
            px, py = np.interp(v["s"], r["s"], r["xy"][:, 0]), np.interp(v["s"], r["s"], r["xy"][:, 1])
            h = float(np.interp(v["s"], r["s"], r["heading_unwrapped"]))
            amp, ph = v["lat"]
            k = 2 * math.pi / self.cfg.lateral_wavelength
            e, de = amp * math.sin(k * v["s"] + ph), amp * k * math.cos(k * v["s"] + ph)
            x, y = np.array([px, py]) + e * np.array([-math.sin(h), math.cos(h)])
            h = float(wrap_angle(h + math.atan(de)))
            row[v["uid"]] = (x, y, h, v["v"])
            records.setdefault(v["uid"], dict(size=(v["length"], v["width"], v["height"]), type=v["type"]))
        return row

    def _idm(self, me: dict, veh: list[dict], lights: np.ndarray) -> float:
        cfg = self.cfg
        r = self.routes[me["route"]]
        v = me["v"]
        v0 = me["v0"]
        if r["turning"] and me["s"] < r["conn_end"]:
            v0 = min(v0, math.sqrt(cfg.v_turn**2 + 2 * 1.0 * max(0.0, r["stop_s"] - me["s"])))
        free = 1 - (v / v0) ** 4
        gaps = []
        # leader on the route: other vehicles whose current lane is on my route and further ahead
        for o in veh:
            if o is me:
                continue
            lane_o, s_o = o["lane_pos"]
            if lane_o not in r["lanes"]:
                continue
            s_on_mine = r["offsets"][r["lanes"].index(lane_o)] + s_o
            gap = s_on_mine - me["s"] - (o["length"] + me["length"]) / 2
            if s_on_mine > me["s"]:
                gaps.append((gap, v - o["v"]))
        # stop line
        to_stop = r["stop_s"] - me["s"] - me["length"] / 2
        if to_stop > -0.5:
            state = lights[me["route"][0]]
            must_stop = state == RED or (state == YELLOW and to_stop > v * v / (2 * 3.0))
            if must_stop:
                gaps.append((to_stop + 0.5, v))
        inter = 0.0
        for gap, dv in gaps:
            s_star = cfg.idm_s0 + max(0.0, v * cfg.idm_T + v * dv / (2 * math.sqrt(cfg.idm_a * cfg.idm_b)))
            inter = max(inter, (s_star / max(gap, 0.1)) ** 2)
        return float(np.clip(cfg.idm_a * (free - inter), -9.0, cfg.idm_a))

    @staticmethod
    def _lane_pos(route: dict, s: float) -> tuple[int, float]:
        offs = route["offsets"]
        j = int(np.searchsorted(offs, s, side="right") - 1)
        j = max(0, min(j, len(offs) - 1))
        return route["lanes"][j], s - offs[j]


def scene_from_rows(log_rows: list[dict], tl_log: list, meta: dict, map_, dt: float) -> Scene:
    """Build a :class:`Scene` from per-step rows ``{uid: (x, y, heading, speed)}``, the per-step
    traffic-light states, and ``meta[uid] = (size (l, w, h), type)``; columns are sorted uids."""
    uids = sorted(meta)
    col = {u: j for j, u in enumerate(uids)}
    T, A = len(log_rows), len(uids)
    states = np.zeros((T, A, 4))
    valid = np.zeros((T, A), bool)
    for t, row in enumerate(log_rows):
        for u, st in row.items():
            states[t, col[u]] = st
            valid[t, col[u]] = True
    size = np.array([meta[u][0] for u in uids]).reshape(A, 3)
    types = np.array([meta[u][1] for u in uids], dtype=int)
    return Scene(states, valid, size, types, np.asarray(uids, dtype=int), np.stack(tl_log), map_, dt)


def align_to_even_steps(scene: Scene) -> Scene:
    """Agents may only appear at even steps (where an <AS> block exists, TG_SKIP_STEP = 2) and must be
    present on a contiguous span; an odd first step is dropped, and anything after a gap is dropped."""
    valid = scene.valid.copy()
    for a in range(scene.A):
        idx = np.flatnonzero(valid[:, a])
        if idx.size == 0:
            continue
        first = idx[0]
        gap = np.flatnonzero(np.diff(idx) > 1)
        if gap.size:
            valid[idx[gap[0] + 1] :, a] = False
        if first % 2 == 1:
            valid[first, a] = False
    keep = valid.any(0)
    return Scene(
        scene.states[:, keep],
        valid[:, keep],
        scene.size[keep],
        scene.types[keep],
        scene.uid[keep],
        scene.tl,
        scene.map,
        scene.dt,
    )


def cut_windows(scene: Scene, length: int = 19, stride: int = 4, max_agents: int = 24) -> list[Scene]:
    """WOMD-like windows of ``length`` steps (t0 even), aligned to even steps; windows with more than
    ``max_agents`` agents are skipped."""
    out = []
    for t0 in range(0, scene.T - length + 1, stride + stride % 2):
        w = align_to_even_steps(scene.window(t0, length))
        if 0 < w.A <= max_agents:
            out.append(w)
    return out


@dataclass
class TinyTownData:
    """Training windows and long ground-truth runs for one seed."""

    windows: list[Scene]
    long_runs: list[Scene] = field(default_factory=list)


def make_dataset(
    seed: int,
    n_train_runs: int,
    run_seconds: float,
    long_seconds: float,
    n_long: int = 1,
    cfg: TinyTownConfig | None = None,
    window_stride: int = 4,
    max_agents: int = 24,
) -> TinyTownData:
    """``n_train_runs`` runs cut into windows, plus ``n_long`` held-out long runs (different world seeds)."""
    world = TinyTown(cfg)
    windows = []
    for r in range(n_train_runs):
        windows += cut_windows(
            world.simulate(run_seconds, seed=10_000 * seed + r), stride=window_stride, max_agents=max_agents
        )
    longs = [world.simulate(long_seconds, seed=10_000 * seed + 5_000 + r) for r in range(n_long)]
    return TinyTownData(windows, longs)
