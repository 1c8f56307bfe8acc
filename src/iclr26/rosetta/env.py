"""TabletopLite: a vectorised numpy table-top with a point gripper, 2-3 objects and 2 bins.

A CPU stand-in for the paper's ManiSkill3 short-horizon tasks (SphereAndBins, BallAndTarget): the same
method names (``evaluate``, ``compute_dense_reward``, ``setup_description``, ``state_str``) and the same
contract for generated reward code, which never sees this object: it receives the plain ``state`` dict
of :meth:`TabletopLite.state` (numpy arrays with a leading ``num_envs`` axis) and returns

    evaluate(state) -> {"success": bool[N], ...}
    compute_dense_reward(state, action, info) -> float[N]

Physics (kinematic): the gripper moves by ``action[:3] * max_step`` (clipped to the workspace); the grip
is closed when ``action[3] > 0``. Closing within ``grasp_radius`` of a free object grasps the nearest
one, which then moves with the gripper; opening releases it and it falls onto the table (z = half
size). An object is *in* a bin when released with its xy within ``bin_radius`` of the bin centre.

:class:`TabletopPrimitives` is the long-horizon variant: one action = one primitive
(pick(xyz), place(xyz), push(p1, p2)), six primitives per episode (paper's ``actprim`` setting).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "BIN_NAMES",
    "OBJECT_NAMES",
    "EnvConfig",
    "TabletopLite",
    "TabletopPrimitives",
    "in_bin",
    "sphere_and_bins_reward",
    "state_text",
]

OBJECT_NAMES = ("red_cube", "blue_cube", "green_sphere")
BIN_NAMES = ("bin1", "bin2")
HOME = np.array([0.0, 0.0, 0.15])


@dataclass(frozen=True)
class EnvConfig:
    """TabletopLite geometry and dynamics.

    n_objects: objects on the table (2 or 3; the first n of red_cube, blue_cube, green_sphere).
    episode_len: steps per episode (time limit; no early termination).
    max_step: metres the gripper moves per step at |action| = 1 (velocity limit).
    grasp_radius: gripper-object centre distance below which closing the grip grasps.
    bin_radius: xy radius of a bin.
    half_size: object half size (resting height above the table).
    """

    n_objects: int = 2
    episode_len: int = 40
    max_step: float = 0.05
    grasp_radius: float = 0.03
    bin_radius: float = 0.05
    half_size: float = 0.02


def in_bin(obj_pos: np.ndarray, grasped: np.ndarray, bin_pos: np.ndarray, radius: float) -> np.ndarray:
    """Released object whose xy lies within ``radius`` of the bin centre: bool[N]."""
    d = np.linalg.norm(obj_pos[:, :2] - bin_pos[:, :2], axis=1)
    return (d < radius) & ~grasped


class TabletopLite:
    """``num_envs`` independent tables stepped together (all arrays have a leading env axis)."""

    obs_scale = 10.0  # positions enter the observation in decimetres (unit-scale inputs for the MLP)

    def __init__(self, num_envs: int, cfg: EnvConfig = EnvConfig(), seed: int = 0) -> None:
        if not 2 <= cfg.n_objects <= len(OBJECT_NAMES):
            raise ValueError(f"n_objects must be 2 or 3, got {cfg.n_objects}")
        if num_envs < 1:
            raise ValueError("num_envs must be >= 1")
        self.n, self.cfg = num_envs, cfg
        self.objects = OBJECT_NAMES[: cfg.n_objects]
        self.rng = np.random.default_rng(seed)
        self.obs_dim = 3 + 1 + 7 * len(self.objects) + 2 * 2 + 2 * 2 * len(self.objects) + 3 + 1
        self.reset()

    # -------------------------------------------------------------- reset / step
    def reset(self) -> np.ndarray:
        n, k, c = self.n, len(self.objects), self.cfg
        self.tcp = HOME + self.rng.uniform(-0.02, 0.02, (n, 3))
        self.vel = np.zeros((n, 3))
        self.closed = np.zeros(n, bool)
        self.held = np.full(n, -1)  # index of the grasped object or -1
        # objects in the near half, spread along y with jitter (never overlapping)
        ys = np.linspace(-0.12, 0.12, k)[None, :] + self.rng.uniform(-0.03, 0.03, (n, k))
        order = np.argsort(self.rng.random((n, k)), axis=1)
        xs = self.rng.uniform(-0.15, -0.05, (n, k))
        self.obj = np.stack([xs, np.take_along_axis(ys, order, 1), np.full((n, k), c.half_size)], -1)
        self.bins = np.zeros((n, 2, 3))
        self.bins[:, 0, :2] = np.array([0.15, -0.12]) + self.rng.uniform(-0.02, 0.02, (n, 2))
        self.bins[:, 1, :2] = np.array([0.15, 0.12]) + self.rng.uniform(-0.02, 0.02, (n, 2))
        self.t = np.zeros(n, int)
        return self.obs()

    def step(self, action: np.ndarray) -> np.ndarray:
        """Apply ``action`` [N, 4] in [-1, 1] (clipped); returns the next observation."""
        a = np.clip(np.asarray(action, float), -1.0, 1.0)
        if a.shape != (self.n, 4):
            raise ValueError(f"action must have shape ({self.n}, 4), got {a.shape}")
        c, rows = self.cfg, np.arange(self.n)
        old = self.tcp.copy()
        self.tcp = np.clip(self.tcp + a[:, :3] * c.max_step, [-0.3, -0.3, c.half_size], [0.3, 0.3, 0.3])
        self.vel = self.tcp - old
        closing = a[:, 3] > 0
        # release: the held object falls onto the table
        rel = ~closing & (self.held >= 0)
        if rel.any():
            self.obj[rows[rel], self.held[rel], 2] = c.half_size
            self.held[rel] = -1
        holding = self.held >= 0
        self.obj[rows[holding], self.held[holding]] = self.tcp[holding]
        # grasp: a closed grip near a free object grasps the nearest one
        d = np.linalg.norm(self.obj - self.tcp[:, None, :], axis=2)
        near = d.argmin(1)
        grab = closing & (self.held < 0) & (d[rows, near] < c.grasp_radius)
        self.held[grab] = near[grab]
        self.obj[rows[grab], near[grab]] = self.tcp[grab]
        self.closed = closing
        self.t += 1
        return self.obs()

    # -------------------------------------------------------------- views
    def obs(self) -> np.ndarray:
        """Policy observation: tcp, grip, per object (pos, grasped, pos - tcp), bin xy, every object-bin xy
        offset, home - tcp, time fraction (relative vectors make the small MLP's job easier)."""
        k = len(self.objects)
        grasped = self.held[:, None] == np.arange(k)[None, :]
        rel = self.obj - self.tcp[:, None, :]
        sc = self.obs_scale
        per_obj = np.concatenate([sc * self.obj, grasped[..., None], sc * rel], -1).reshape(self.n, 7 * k)
        obj_bin = (self.bins[:, None, :, :2] - self.obj[:, :, None, :2]).reshape(self.n, 4 * k)
        tfrac = (self.t / self.cfg.episode_len)[:, None]
        bins = self.bins[:, :, :2].reshape(self.n, 4)
        parts = [sc * self.tcp, self.closed[:, None], per_obj, sc * bins, sc * obj_bin, sc * (HOME - self.tcp), tfrac]
        return np.concatenate(parts, 1).astype(np.float32)

    def state(self) -> dict[str, np.ndarray]:
        """The dict generated reward code reads (names are the env's documented API)."""
        s = {
            "tcp_pos": self.tcp.copy(),
            "tcp_vel": self.vel.copy(),
            "gripper_closed": self.closed.copy(),
            "home_pos": np.broadcast_to(HOME, (self.n, 3)).copy(),
            "elapsed_steps": self.t.copy(),
        }
        for i, name in enumerate(self.objects):
            s[f"{name}_pos"] = self.obj[:, i].copy()
            s[f"{name}_grasped"] = self.held == i
        for j, name in enumerate(BIN_NAMES):
            s[f"{name}_pos"] = self.bins[:, j].copy()
        return s

    def evaluate(self) -> dict[str, np.ndarray]:
        """Base info: per object and bin ``<obj>_in_<bin>``, per object ``<obj>_grasped``."""
        s, out = self.state(), {}
        for name in self.objects:
            out[f"{name}_grasped"] = s[f"{name}_grasped"]
            for b in BIN_NAMES:
                out[f"{name}_in_{b}"] = in_bin(
                    s[f"{name}_pos"], s[f"{name}_grasped"], s[f"{b}_pos"], self.cfg.bin_radius
                )
        return out

    def compute_dense_reward(self, action: np.ndarray | None = None) -> np.ndarray:
        """The env's default reward (SphereAndBins formula) for its first object and bin1."""
        s = self.state()
        return sphere_and_bins_reward(s, self.objects[0], "bin1", self.cfg.bin_radius)

    def setup_description(self) -> str:
        """The scene in words (shown to grounding and planning)."""
        objs = ", ".join(self.objects)
        return (
            f"A table with {len(self.objects)} objects ({objs}) and two bins: bin1 on the robot's right "
            "(negative y) and bin2 on its left (positive y). x points away from the robot, z up. "
            f"Objects rest at z={self.cfg.half_size}; a bin is a {self.cfg.bin_radius} m disc on the table. "
            f"The gripper starts at home {tuple(HOME.tolist())}."
        )

    def state_str(self, env: int = 0) -> str:
        """Numeric state of one env as text (the captioning input)."""
        parts = [f"gripper at {np.round(self.tcp[env], 3).tolist()} ({'closed' if self.closed[env] else 'open'})"]
        for i, name in enumerate(self.objects):
            held = " (grasped)" if self.held[env] == i else ""
            parts.append(f"{name} at {np.round(self.obj[env, i], 3).tolist()}{held}")
        for j, name in enumerate(BIN_NAMES):
            parts.append(f"{name} at {np.round(self.bins[env, j], 3).tolist()}")
        return "; ".join(parts)


def sphere_and_bins_reward(state: dict, obj: str, bin_name: str, bin_radius: float = 0.05) -> np.ndarray:
    """Default reward of the official SphereAndBins env, on a TabletopLite state.

        r = 2 (1 - tanh 5 d_tcp)                if not grasped
        r = 4 + (1 - tanh 5 d_bin_top)          if grasped
        r = 13                                  on success (object in the bin)

    d_tcp: gripper-object distance; d_bin_top: object to the point one object-size above the bin centre.
    """
    tcp, pos, grasped = state["tcp_pos"], state[f"{obj}_pos"], state[f"{obj}_grasped"]
    bin_top = state[f"{bin_name}_pos"] + np.array([0.0, 0.0, 0.04])
    reach = 2.0 * (1.0 - np.tanh(5.0 * np.linalg.norm(tcp - pos, axis=1)))
    place = 4.0 + (1.0 - np.tanh(5.0 * np.linalg.norm(pos - bin_top, axis=1)))
    r = np.where(grasped, place, reach)
    return np.where(in_bin(pos, grasped, state[f"{bin_name}_pos"], bin_radius), 13.0, r)


class TabletopPrimitives:
    """Long-horizon variant: each step executes one parameterised primitive (``actprim``).

    action = [score_pick, score_place, score_push | p1 (xyz) | p2 (xyz)]; the primitive is the argmax of
    the scores. pick(p1): grasps the object nearest p1 if within ``reach`` (gripper goes to p1);
    place(p1): puts the held object at p1's xy on the table; push(p1, p2): a free object within ``reach``
    of p1 slides to p2's xy. Episodes last ``horizon`` primitives.
    """

    PRIMS = ("pick", "place", "push")

    def __init__(
        self, num_envs: int, cfg: EnvConfig = EnvConfig(), seed: int = 0, horizon: int = 6, reach: float = 0.05
    ) -> None:
        self.base = TabletopLite(num_envs, cfg, seed)
        self.horizon, self.reach = horizon, reach

    def reset(self) -> dict[str, np.ndarray]:
        self.base.reset()
        return self.base.state()

    def step(self, action: np.ndarray) -> dict[str, np.ndarray]:
        b, a = self.base, np.asarray(action, float)
        if a.shape != (b.n, 9):
            raise ValueError(f"action must have shape ({b.n}, 9), got {a.shape}")
        prim, p1, p2 = a[:, :3].argmax(1), a[:, 3:6], a[:, 6:9]
        rows, h = np.arange(b.n), b.cfg.half_size
        d = np.linalg.norm(b.obj - p1[:, None, :], axis=2)
        near = d.argmin(1)
        ok_near = d[rows, near] < self.reach
        pick = (prim == 0) & (b.held < 0) & ok_near
        b.held[pick] = near[pick]
        b.tcp[prim == 0] = p1[prim == 0]
        place = (prim == 1) & (b.held >= 0)
        b.obj[rows[place], b.held[place]] = np.c_[p1[place, :2], np.full(place.sum(), h)]
        b.held[place] = -1
        push = (prim == 2) & ok_near & (b.held != near)
        b.obj[rows[push], near[push]] = np.c_[p2[push, :2], np.full(push.sum(), h)]
        holding = b.held >= 0
        b.obj[rows[holding], b.held[holding]] = b.tcp[holding]
        b.t += 1
        return b.state()


def state_text(state: dict, env: int = 0) -> str:
    """:meth:`TabletopLite.state_str` of a state dict (the captioning input of a recorded demo)."""
    parts = [
        f"gripper at {np.round(state['tcp_pos'][env], 3).tolist()} "
        f"({'closed' if state['gripper_closed'][env] else 'open'})"
    ]
    for name in OBJECT_NAMES:
        if f"{name}_pos" in state:
            held = " (grasped)" if state[f"{name}_grasped"][env] else ""
            parts.append(f"{name} at {np.round(state[f'{name}_pos'][env], 3).tolist()}{held}")
    for name in BIN_NAMES:
        parts.append(f"{name} at {np.round(state[f'{name}_pos'][env], 3).tolist()}")
    return "; ".join(parts)
