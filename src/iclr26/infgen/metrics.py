"""Scene statistics used by the claims: agent counts, Wasserstein-1 distances of speed / acceleration /
headway, box collisions (separating-axis test) and off-road events. All work on :class:`Scene` objects, so
ground-truth runs, log-replay and generated rollouts are measured by the same code."""

from __future__ import annotations

import numpy as np

from iclr26.infgen.world import MapData, Scene, wrap_angle


def box_corners(x, y, psi, length, width) -> np.ndarray:
    """Corners [..., 4, 2] of oriented boxes (front-left, front-right, rear-right, rear-left)."""
    x, y, psi, length, width = (np.asarray(v, dtype=float) for v in (x, y, psi, length, width))
    c, s = np.cos(psi), np.sin(psi)
    hl, hw = length / 2, width / 2
    local = np.stack(
        [np.stack([hl, hw], -1), np.stack([hl, -hw], -1), np.stack([-hl, -hw], -1), np.stack([-hl, hw], -1)], -2
    )  # [..., 4, 2]
    rx = local[..., 0] * c[..., None] - local[..., 1] * s[..., None] + x[..., None]
    ry = local[..., 0] * s[..., None] + local[..., 1] * c[..., None] + y[..., None]
    return np.stack([rx, ry], -1)


def boxes_overlap(ca: np.ndarray, cb: np.ndarray) -> np.ndarray:
    """Whether oriented boxes intersect (shapely polygons; touching counts): ca [..., 4, 2], cb [..., 4, 2]
    corner arrays (as from :func:`box_corners`), broadcast against each other -> bool [...]."""
    import shapely

    ca, cb = np.broadcast_arrays(np.asarray(ca, float), np.asarray(cb, float))
    shape = ca.shape[:-2]
    if not ca.size:
        return np.zeros(shape, bool)
    pa = shapely.polygons(ca.reshape(-1, 4, 2))
    pb = shapely.polygons(cb.reshape(-1, 4, 2))
    return np.asarray(shapely.intersects(pa, pb), bool).reshape(shape)


def collisions_per_step(states: np.ndarray, valid: np.ndarray, size: np.ndarray) -> np.ndarray:
    """[T, A] bool: agent overlaps some other agent's box at step t."""
    T, A = valid.shape
    out = np.zeros((T, A), bool)
    for t in range(T):
        idx = np.flatnonzero(valid[t])
        if idx.size < 2:
            continue
        s = states[t, idx]
        cr = box_corners(s[:, 0], s[:, 1], s[:, 2], size[idx, 0], size[idx, 1])
        # cheap distance prefilter
        d = np.linalg.norm(s[:, None, :2] - s[None, :, :2], axis=-1)
        rad = np.hypot(size[idx, 0], size[idx, 1]) / 2
        cand = (d < rad[:, None] + rad[None, :]) & ~np.eye(idx.size, dtype=bool)
        ii, jj = np.nonzero(np.triu(cand))
        if ii.size:
            hit = boxes_overlap(cr[ii], cr[jj])
            out[t, idx[ii[hit]]] = True
            out[t, idx[jj[hit]]] = True
    return out


def nearest_lane_point(map_: MapData, xy: np.ndarray, psi: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Index of the nearest dense lane point (aligned within 90 deg if ``psi`` given) and its distance, from a
    KD-tree over the lane points (``map_.lane_tree``): the k nearest are searched for an aligned one, k grows
    until one is found or every point was looked at (then the distance is ``inf`` and the index 0)."""
    xy = np.asarray(xy, float).reshape(-1, 2)
    tree, Q = map_.lane_tree, len(map_.dense_xy)
    if psi is None:
        d, j = tree.query(xy)
        return np.asarray(j, int), np.asarray(d, float)
    psi = np.asarray(psi, float).reshape(-1)
    j_out, d_out = np.zeros(len(xy), int), np.full(len(xy), np.inf)
    todo, k = np.arange(len(xy)), min(Q, 16)
    while todo.size:
        d, j = tree.query(xy[todo], k=k)
        d, j = d.reshape(len(todo), k), j.reshape(len(todo), k)
        ok = np.abs(wrap_angle(psi[todo, None] - map_.dense_heading[j])) < np.pi / 2
        found = ok.any(1)
        first = ok.argmax(1)  # the nearest aligned point (query results are sorted by distance)
        rows = np.flatnonzero(found)
        j_out[todo[rows]], d_out[todo[rows]] = j[rows, first[rows]], d[rows, first[rows]]
        if k == Q:
            break
        todo, k = todo[~found], min(Q, 4 * k)
    return j_out, d_out


def offroad_per_step(scene: Scene, margin: float = 0.5) -> np.ndarray:
    """[T, A] bool: distance to the nearest lane centre > lane half-width + margin (inside the map bound)."""
    out = np.zeros(scene.valid.shape, bool)
    for t in range(scene.T):
        idx = np.flatnonzero(scene.valid[t])
        if idx.size == 0:
            continue
        _, d = nearest_lane_point(scene.map, scene.states[t, idx, :2])
        out[t, idx] = d > scene.map.lane_half_width + margin
    return out


def headways(scene: Scene, max_gap: float = 60.0, steps: np.ndarray | None = None) -> np.ndarray:
    """Gaps (m, bumper to bumper) to the same-lane leader, pooled over the given steps."""
    out = []
    steps = np.arange(scene.T) if steps is None else steps
    for t in steps:
        idx = np.flatnonzero(scene.valid[t])
        if idx.size < 2:
            continue
        s = scene.states[t, idx]
        j, _ = nearest_lane_point(scene.map, s[:, :2], s[:, 2])
        lane, arc = scene.map.dense_lane[j], scene.map.dense_s[j]
        length = scene.size[idx, 0]
        for a in range(idx.size):
            ahead = (lane == lane[a]) & (arc > arc[a])
            if ahead.any():
                b = np.flatnonzero(ahead)[arc[ahead].argmin()]
                gap = arc[b] - arc[a] - (length[a] + length[b]) / 2
                if gap < max_gap:
                    out.append(gap)
    return np.asarray(out, dtype=float)


def speeds_accels(scene: Scene, steps: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Speeds of present agents and accelerations (v_{t+1} - v_t) / dt of agents present at t and t+1."""
    steps = np.arange(scene.T) if steps is None else np.asarray(steps)
    v = scene.states[..., 3]
    sp = v[steps][scene.valid[steps]]
    st = steps[steps + 1 < scene.T]
    both = scene.valid[st] & scene.valid[st + 1]
    acc = ((v[st + 1] - v[st]) / scene.dt)[both]
    return sp, acc


def wasserstein1(a: np.ndarray, b: np.ndarray) -> float:
    """W1 between two 1-D empirical distributions; ``inf`` when either sample is empty (an empty road
    has no speed distribution: it is counted as infinitely far from traffic)."""
    a, b = np.sort(np.asarray(a, float)), np.sort(np.asarray(b, float))
    if a.size == 0 or b.size == 0:
        return float("inf")
    from scipy.stats import wasserstein_distance

    return float(wasserstein_distance(a, b))


def scene_stats(scene: Scene, t_from: int, t_to: int) -> dict:
    """Pooled samples and rates over steps [t_from, t_to)."""
    steps = np.arange(t_from, min(t_to, scene.T))
    sp, acc = speeds_accels(scene, steps)
    sub = Scene(
        scene.states[steps],
        scene.valid[steps],
        scene.size,
        scene.types,
        scene.uid,
        scene.tl[steps],
        scene.map,
        scene.dt,
    )
    col = collisions_per_step(sub.states, sub.valid, sub.size)
    off = offroad_per_step(sub)
    n = int(sub.valid.sum())
    return dict(
        speed=sp,
        accel=acc,
        headway=headways(sub),
        count=float(sub.valid.sum(1).mean()) if len(steps) else 0.0,
        collisions=int(col.sum()),
        offroad=int(off.sum()),
        agent_steps=n,
    )
