"""PuppetWorld: a vectorised torch stand-in for the paper's SMPL humanoid (no mocap or simulator offline).

A puppet with 12 actuated joints, stepped for a whole batch of environments as tensor operations:

* 6 leg joints (per leg: hip pitch, knee, hip abduction) move the root by a *stance-thrust* rule: a leg
  whose knee is extended is in stance, and its foot's motion relative to the body pushes the body the
  other way (hip pitch → forward/backward, abduction → sideways, unequal forward thrust → yaw);
* 6 distractor joints (shoulder and elbow per arm, torso, head) never move the root, like the many
  degrees of freedom of the humanoid whose jitter METRA rewards (RGSD Sec. 1, Fig. 1).

Actions are PD position targets in [−1, 1] per joint (the humanoid's PD targets): q* = clip(a · span, lo, hi),
q̈ = k_p (q* − q) − k_d q̇, semi-implicit Euler. Observations are local-frame only,
[q, 0.1 q̇, v_body (2), yaw rate] (2J + 3 = 27 dims): there is no global pose, so a cyclic motion
revisits its states (the paper's Sec. 6 argument about METRA).

The 8 reference clips (4 s at 20 Hz) are CPG joint targets rolled through the same dynamics, so each
clip is feasible by construction and replaying its recorded actions reproduces it exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["JOINTS", "KEYPOINTS", "PuppetConfig", "PuppetWorld", "Reference", "REFERENCE_NAMES", "make_references"]

JOINTS = (
    "hip_l",
    "knee_l",
    "abd_l",
    "hip_r",
    "knee_r",
    "abd_r",
    "shoulder_l",
    "elbow_l",
    "shoulder_r",
    "elbow_r",
    "torso",
    "head",
)
KEYPOINTS = ("knee_l", "foot_l", "knee_r", "foot_r", "chest", "head", "elbow_l", "hand_l", "elbow_r", "hand_r")
_LO = (-0.8, 0.0, -0.5, -0.8, 0.0, -0.5, -1.5, 0.0, -1.5, 0.0, -0.5, -0.6)
_HI = (0.8, 1.4, 0.5, 0.8, 1.4, 0.5, 1.5, 2.0, 1.5, 2.0, 0.5, 0.6)


@dataclass(frozen=True)
class PuppetConfig:
    """PuppetWorld physics and reference clips.

    dt: control step in seconds (20 Hz, as the clips).
    substeps: PD integration substeps per control step.
    kp (k_p): PD stiffness.
    kd (k_d): PD damping.
    leg_length: thigh + shin length in m (thrust = leg length × joint speed).
    hip_width: half distance between the hips in m (yaw from unequal thrust).
    stance_knee: a knee bent less than this (rad) is in stance.
    stance_width: softness of the stance gate (rad).
    yaw_gain: yaw rate per unit of left/right thrust difference over the hip width.
    clip_frames: frames per reference clip (4 s at 20 Hz).
    warmup_frames: frames run before recording so that each clip starts on its limit cycle.
    references: names of the reference clips (a subset of REFERENCE_NAMES).
    """

    dt: float = 0.05
    substeps: int = 2
    kp: float = 100.0
    kd: float = 14.0
    leg_length: float = 0.9
    hip_width: float = 0.15
    stance_knee: float = 0.25
    stance_width: float = 0.05
    yaw_gain: float = 0.2
    clip_frames: int = 80
    warmup_frames: int = 20
    references: tuple[str, ...] = (
        "walk_slow",
        "walk_fast",
        "run",
        "sidestep_left",
        "sidestep_right",
        "backward",
        "punch",
        "turn",
    )


@dataclass
class Reference:
    """One reference clip m = (s_1..s_l) and everything needed for RSI and the Cartesian error.

    name / category: clip name and its semantic group (walk, run, sidestep, backward, punch, turn).
    obs: [T, D] observations (the features the encoder sees). q, qd: [T, J] joint state. root: [T, 3]
    (x, y, yaw). actions: [T, J] the PD targets that produced frame t+1 from frame t. period: frames per
    gait cycle (the clip holds an integer number of cycles).
    """

    name: str
    category: str
    obs: torch.Tensor
    q: torch.Tensor
    qd: torch.Tensor
    root: torch.Tensor
    actions: torch.Tensor
    period: int

    def __len__(self) -> int:
        return int(self.obs.shape[0])


class PuppetWorld:
    """N puppets stepped together. State: q, qd [N, J]; root [N, 3] = (x, y, yaw)."""

    n_joints = len(JOINTS)
    obs_dim = 2 * len(JOINTS) + 3
    act_dim = len(JOINTS)

    def __init__(self, cfg: PuppetConfig, n_envs: int):
        self.cfg = cfg
        self.n = int(n_envs)
        self.lo = torch.tensor(_LO)
        self.hi = torch.tensor(_HI)
        self.span = torch.maximum(self.lo.abs(), self.hi.abs())
        self.q = torch.zeros(self.n, self.n_joints).clamp(self.lo, self.hi)
        self.qd = torch.zeros(self.n, self.n_joints)
        self.root = torch.zeros(self.n, 3)
        self.vel = torch.zeros(self.n, 3)  # v_x, v_y (body frame), yaw rate

    # ---------------------------------------------------------------------------------------------
    def set_state(self, idx: torch.Tensor, q: torch.Tensor, qd: torch.Tensor, root: torch.Tensor) -> None:
        """Reference state initialisation (RSI): puppets ``idx`` take the given joint and root state."""
        self.q[idx], self.qd[idx], self.root[idx] = q, qd, root
        self.vel[idx] = self.root_velocity(q, qd)

    def target_of_action(self, a: torch.Tensor) -> torch.Tensor:
        """q* = clip(a · max(|lo|, |hi|), lo, hi), a clipped to [−1, 1]: a = 0 is the upright rest pose."""
        return torch.minimum(torch.maximum(a.clamp(-1.0, 1.0) * self.span, self.lo), self.hi)

    def action_of_target(self, target: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`target_of_action` (targets clipped to the joint limits)."""
        return torch.minimum(torch.maximum(target, self.lo), self.hi) / self.span

    def root_velocity(self, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        """Stance-thrust rule: (v_x, v_y, ω) in the body frame from the leg joints.

        s_l = σ((knee_thresh − knee_l)/width) (stance gate); v_l = −L q̇_hip,l (a stance foot moving back
        pushes the body forward); v_x = Σ s_l v_l / max(Σ s_l, 1); v_y = −Σ s_l side_l L q̇_abd,l / max(Σ s_l, 1);
        ω = g_yaw (s_R v_R − s_L v_L) / (2 w). Arms, torso and head never enter.
        """
        c = self.cfg
        knee = q[:, [1, 4]]
        s = torch.sigmoid((c.stance_knee - knee) / c.stance_width)
        v_leg = -c.leg_length * qd[:, [0, 3]]
        side = torch.tensor([1.0, -1.0])
        v_lat = -c.leg_length * side * qd[:, [2, 5]]
        norm = s.sum(-1).clamp_min(1.0)
        vx = (s * v_leg).sum(-1) / norm
        vy = (s * v_lat).sum(-1) / norm
        om = c.yaw_gain * (s[:, 1] * v_leg[:, 1] - s[:, 0] * v_leg[:, 0]) / (2.0 * c.hip_width)
        return torch.stack([vx, vy, om], dim=-1)

    def step(self, a: torch.Tensor) -> torch.Tensor:
        """One control step with PD targets ``a`` in [−1, 1]^J; returns the new observations."""
        c = self.cfg
        target = self.target_of_action(a)
        h = c.dt / c.substeps
        q, qd = self.q, self.qd
        for _ in range(c.substeps):
            qdd = c.kp * (target - q) - c.kd * qd  # q̈ = k_p (q* − q) − k_d q̇
            qd = qd + h * qdd
            q = q + h * qd
            hit = (q < self.lo) | (q > self.hi)
            q = torch.minimum(torch.maximum(q, self.lo), self.hi)
            qd = torch.where(hit, torch.zeros_like(qd), qd)
        self.q, self.qd = q, qd
        self.vel = self.root_velocity(q, qd)
        vx, vy, om = self.vel.unbind(-1)
        x, y, yaw = self.root.unbind(-1)
        yaw = yaw + c.dt * om
        x = x + c.dt * (vx * torch.cos(yaw) - vy * torch.sin(yaw))
        y = y + c.dt * (vx * torch.sin(yaw) + vy * torch.cos(yaw))
        self.root = torch.stack([x, y, yaw], dim=-1)
        return self.obs()

    def obs(self) -> torch.Tensor:
        """Local-frame observation [q, 0.1 q̇, v_x, v_y, ω] (no global position or heading)."""
        return torch.cat([self.q, 0.1 * self.qd, self.vel], dim=-1)

    def keypoints_local(self) -> torch.Tensor:
        return keypoints_local(self.q)

    def keypoints_world(self) -> torch.Tensor:
        return keypoints_world(self.q, self.root)


def keypoints_local(q: torch.Tensor) -> torch.Tensor:
    """Forward kinematics of the stick figure: [N, 10, 3] body-frame keypoints (pelvis at height 1)."""
    n = q.shape[0]
    pts = []
    pelvis = torch.tensor([0.0, 0.0, 1.0]).expand(n, 3)
    for side, (ih, ik, ia) in ((1.0, (0, 1, 2)), (-1.0, (3, 4, 5))):
        th, kn, ab = q[:, ih], q[:, ik], q[:, ia]
        hip = pelvis + torch.tensor([0.0, side * 0.15, 0.0])
        d1 = torch.stack([torch.sin(th) * torch.cos(ab), side * torch.sin(ab), -torch.cos(th) * torch.cos(ab)], -1)
        knee = hip + 0.45 * d1
        d2 = torch.stack(
            [torch.sin(th - kn) * torch.cos(ab), side * torch.sin(ab), -torch.cos(th - kn) * torch.cos(ab)], -1
        )
        pts += [knee, knee + 0.45 * d2]
    tau, eta = q[:, 10], q[:, 11]
    chest = pelvis + 0.5 * torch.stack([torch.sin(tau), torch.zeros_like(tau), torch.cos(tau)], -1)
    head = chest + 0.25 * torch.stack([torch.sin(tau + eta), torch.zeros_like(tau), torch.cos(tau + eta)], -1)
    pts += [chest, head]
    for side, (isd, iel) in ((1.0, (6, 7)), (-1.0, (8, 9))):
        ph, el = q[:, isd], q[:, iel]
        shoulder = chest + torch.tensor([0.0, side * 0.2, 0.0])
        elbow = shoulder + 0.3 * torch.stack([torch.sin(ph), torch.zeros_like(ph), -torch.cos(ph)], -1)
        hand = elbow + 0.3 * torch.stack([torch.sin(ph + el), torch.zeros_like(ph), -torch.cos(ph + el)], -1)
        pts += [elbow, hand]
    return torch.stack(pts, dim=1)


def keypoints_world(q: torch.Tensor, root: torch.Tensor) -> torch.Tensor:
    """Body-frame keypoints rotated by the yaw and shifted by the root position: [N, 10, 3]."""
    kp = keypoints_local(q)
    c, s = torch.cos(root[:, 2:3]), torch.sin(root[:, 2:3])
    x = c * kp[..., 0] - s * kp[..., 1] + root[:, 0:1]
    y = s * kp[..., 0] + c * kp[..., 1] + root[:, 1:2]
    return torch.stack([x, y, kp[..., 2]], dim=-1)


# -------------------------------------------------------------------------------------------------
# Reference clips: CPG joint targets q*(t), phase φ = 2π f t.
# -------------------------------------------------------------------------------------------------

REFERENCE_NAMES = ("walk_slow", "walk_fast", "run", "sidestep_left", "sidestep_right", "backward", "punch", "turn")
_CATEGORY = {
    "walk_slow": "walk",
    "walk_fast": "walk",
    "run": "run",
    "sidestep_left": "sidestep",
    "sidestep_right": "sidestep",
    "backward": "backward",
    "punch": "punch",
    "turn": "turn",
}
_FREQ = {
    "walk_slow": 1.0,
    "walk_fast": 1.25,
    "run": 2.0,
    "sidestep_left": 1.0,
    "sidestep_right": 1.0,
    "backward": 1.0,
    "punch": 1.0,
    "turn": 1.0,
}


def _gait(phi: torch.Tensor, amp: float, knee: float, backward: bool) -> tuple[torch.Tensor, ...]:
    """Alternating legs: hip = A sin φ; the knee bends while the hip swings forward (or back, walking backward)."""
    sgn = -1.0 if backward else 1.0
    hl, hr = amp * torch.sin(phi), amp * torch.sin(phi + math.pi)
    kl = knee * torch.clamp(sgn * torch.cos(phi), min=0.0)
    kr = knee * torch.clamp(sgn * torch.cos(phi + math.pi), min=0.0)
    return hl, kl, hr, kr


def cpg_targets(name: str, t: torch.Tensor) -> torch.Tensor:
    """Joint targets [T, 12] of clip ``name`` at times ``t`` (seconds).

    Distractor joints hold the same posture (elbows 0.3, torso and head 0) in every locomotion clip, so
    that no static posture identifies a clip: the legs' motion and the root velocity must.
    """
    if name not in _FREQ:
        raise ValueError(f"unknown reference '{name}'; known: {', '.join(REFERENCE_NAMES)}")
    phi = 2.0 * math.pi * _FREQ[name] * t
    z = torch.zeros_like(t)
    q = {j: z.clone() for j in JOINTS}
    if name in ("walk_slow", "walk_fast", "run", "backward"):
        amp, knee = {"walk_slow": (0.35, 0.8), "walk_fast": (0.5, 1.0), "run": (0.7, 1.3), "backward": (0.35, 0.8)}[
            name
        ]
        q["hip_l"], q["knee_l"], q["hip_r"], q["knee_r"] = _gait(phi, amp, knee, backward=name == "backward")
        swing = 0.6 if name == "run" else 0.3
        q["shoulder_l"], q["shoulder_r"] = swing * torch.sin(phi + math.pi), swing * torch.sin(phi)
        q["elbow_l"] = q["elbow_r"] = z + 0.3
    elif name in ("sidestep_left", "sidestep_right"):
        sgn = 1.0 if name == "sidestep_left" else -1.0
        q["abd_l"] = q["abd_r"] = 0.3 * torch.sin(phi)  # feet spread and close; stance alternates
        q["knee_l"] = 0.6 * torch.clamp(sgn * torch.cos(phi), min=0.0)
        q["knee_r"] = 0.6 * torch.clamp(-sgn * torch.cos(phi), min=0.0)
        q["elbow_l"] = q["elbow_r"] = z + 0.3
    elif name == "punch":
        q["knee_l"] = q["knee_r"] = z + 0.1
        for side, off in (("l", 0.0), ("r", math.pi)):
            s = torch.clamp(torch.sin(phi + off), min=0.0) ** 2
            q[f"shoulder_{side}"] = 0.6 + 0.8 * s
            q[f"elbow_{side}"] = 1.8 - 1.6 * s
        q["torso"] = 0.15 * torch.sin(phi)
    elif name == "turn":
        q["hip_l"], q["hip_r"] = 0.35 * torch.sin(phi), 0.35 * torch.sin(phi)
        q["knee_l"] = 0.8 * torch.clamp(torch.cos(phi), min=0.0)
        q["knee_r"] = 0.8 * torch.clamp(-torch.cos(phi), min=0.0)
        q["elbow_l"] = q["elbow_r"] = z + 0.3
    return torch.stack([q[j] for j in JOINTS], dim=-1)


def make_references(cfg: PuppetConfig) -> list[Reference]:
    """Roll each clip's CPG targets through PuppetWorld: warm-up, then record ``clip_frames`` frames."""
    refs = []
    total = cfg.warmup_frames + cfg.clip_frames
    for name in cfg.references:
        t = torch.arange(total, dtype=torch.float32) * cfg.dt
        targets = cpg_targets(name, t)
        env = PuppetWorld(cfg, 1)
        env.set_state(
            torch.tensor([0]), targets[:1].clamp(env.lo, env.hi), torch.zeros(1, env.n_joints), torch.zeros(1, 3)
        )
        obs, q, qd, root, acts = [], [], [], [], []
        for i in range(total):
            if i == cfg.warmup_frames:
                env.root = torch.zeros(1, 3)  # the recorded clip starts at the origin, heading 0
            a = env.action_of_target(targets[i : i + 1])
            if i >= cfg.warmup_frames:
                obs.append(env.obs()[0])
                q.append(env.q[0].clone())
                qd.append(env.qd[0].clone())
                root.append(env.root[0].clone())
                acts.append(a[0])
            env.step(a)
        period = round(1.0 / (_FREQ[name] * cfg.dt))
        refs.append(
            Reference(
                name,
                _CATEGORY[name],
                torch.stack(obs),
                torch.stack(q),
                torch.stack(qd),
                torch.stack(root),
                torch.stack(acts),
                period,
            )
        )
    return refs
