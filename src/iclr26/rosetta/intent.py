"""Hidden intents, their programmatic checkers, scripted demos and the synthetic preference set.

An :class:`Intent` is what the person really wants: objects into bins (optionally in order), optionally
a return home and a speed cap. :func:`check_intent` judges a rollout against it; it replaces the
paper's success label and annotator score (intent success = every component satisfied; satisfaction
proxy = the fraction satisfied).

:func:`make_preferences` builds the preference set: each :class:`Preference` has a surface form with
the phenomena of the paper's free-form feedback (pronouns, "the other bin", synonyms, "slower",
"reverse the order", compliments, multi-part requests), the previous task description, the previous
round's behaviour (shown as a demo) and the hidden intent.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .env import BIN_NAMES, HOME, OBJECT_NAMES, EnvConfig, TabletopLite, in_bin

__all__ = [
    "SLOW_CAP",
    "Intent",
    "Preference",
    "check_intent",
    "make_preferences",
    "rollout_states",
    "scripted_actions",
]

SLOW_CAP = 0.03  # metres per step: "slower" (max_step is 0.05)
HOME_RADIUS = 0.05
SYNONYMS = {"red_cube": "red block", "blue_cube": "blue block", "green_sphere": "green ball"}
SPOKEN = {"red_cube": "red cube", "blue_cube": "blue cube", "green_sphere": "green sphere"}


@dataclass(frozen=True)
class Intent:
    """A hidden intent.

    places: (object, bin) pairs that must hold at the end of the episode.
    ordered: the places must be first achieved in the listed order.
    home: the gripper must end within 5 cm of its home position.
    speed_cap: metres per step the gripper may never exceed (None: any speed).
    """

    places: tuple[tuple[str, str], ...]
    ordered: bool = False
    home: bool = False
    speed_cap: float | None = None

    def components(self) -> list[str]:
        out = [f"{o}_in_{b}" for o, b in self.places]
        if self.ordered and len(self.places) > 1:
            out.append("order")
        if self.home:
            out.append("home")
        if self.speed_cap is not None:
            out.append("speed")
        return out

    @property
    def multi_stage(self) -> bool:
        return len(self.places) + int(self.home) > 1


@dataclass(frozen=True)
class Preference:
    """One free-form preference with its context and hidden intent.

    pid: identifier. kind: template name. text: what the person said. task: the previous task
    description. demo: the previous round's behaviour (an Intent the recorded policy executed).
    intent: the hidden intent. n_objects: objects in the scene. chain: (scenario id, round) for
    multi-round scenarios, else None.
    """

    pid: str
    kind: str
    text: str
    task: str
    demo: Intent
    intent: Intent
    n_objects: int = 2
    chain: tuple[int, int] | None = None
    meta: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------------- checking
def check_intent(intent: Intent, states: list[dict], bin_radius: float = 0.05) -> dict[str, np.ndarray]:
    """Per-component bool[N] over a rollout ``states`` (state dicts at t = 0..T); keys ``success``, ``satisfaction``.

    place (o, b): o in b at the final step; order: first step each place holds is strictly increasing;
    home: final gripper within 5 cm of home; speed: max per-step gripper displacement <= speed_cap (+1e-6).
    """
    last, out = states[-1], {}
    first = []
    for o, b in intent.places:
        ins = np.stack([in_bin(s[f"{o}_pos"], s[f"{o}_grasped"], s[f"{b}_pos"], bin_radius) for s in states])
        out[f"{o}_in_{b}"] = ins[-1]
        first.append(np.where(ins.any(0), ins.argmax(0), len(states)))
    if intent.ordered and len(intent.places) > 1:
        f = np.stack(first)
        out["order"] = np.all(f[1:] > f[:-1], axis=0) & (f[-1] < len(states))
    if intent.home:
        out["home"] = np.linalg.norm(last["tcp_pos"] - last["home_pos"], axis=1) < HOME_RADIUS
    if intent.speed_cap is not None:
        v = np.stack([np.linalg.norm(s["tcp_vel"], axis=1) for s in states]).max(0)
        out["speed"] = v <= intent.speed_cap + 1e-6
    comps = np.stack([out[c] for c in intent.components()])
    out["success"] = comps.all(0)
    out["satisfaction"] = comps.mean(0)
    return out


# ----------------------------------------------------------------------------------- scripted demos
def _waypoints(env: TabletopLite, intent: Intent) -> list[tuple[np.ndarray, bool]]:
    """(target xyz [N,3], grip closed) waypoints executing ``intent`` for every env."""
    h, wps = env.cfg.half_size, []
    for o, b in intent.places:
        k, j = env.objects.index(o), BIN_NAMES.index(b)
        obj = env.obj[:, k].copy()
        above = obj + np.array([0.0, 0.0, 0.06])
        wps += [(above, False), (obj, False), (obj, True), (above, True)]
        top = env.bins[:, j].copy()
        top[:, 2] = h + 0.06
        wps += [(top, True), (top, False)]
    if intent.home:
        wps.append((np.broadcast_to(HOME, (env.n, 3)).copy(), False))
    return wps


def scripted_actions(env: TabletopLite, intent: Intent, speed: float = 1.0):
    """Yield actions of a waypoint controller that executes ``intent`` (speed: fraction of max_step)."""
    for target, closed in _waypoints(env, intent):
        for _ in range(env.cfg.episode_len):
            delta = target - env.tcp
            dist = np.linalg.norm(delta, axis=1, keepdims=True)
            step = np.minimum(1.0, dist / (env.cfg.max_step * speed + 1e-12)) * speed
            move = np.where(dist > 1e-9, delta / np.maximum(dist, 1e-12), 0.0) * step
            yield np.c_[move, np.full(env.n, 1.0 if closed else -1.0)]
            if np.all(np.linalg.norm(target - env.tcp, axis=1) < 1e-6):
                break
    while True:
        yield np.c_[np.zeros((env.n, 3)), -np.ones(env.n)]


def rollout_states(
    intent: Intent, n_objects: int, n_envs: int, seed: int, speed: float = 1.0, episode_len: int | None = None
) -> tuple[list[dict], list[np.ndarray]]:
    """A scripted demo of ``intent``: (states t = 0..T, actions t = 0..T-1)."""
    cfg = EnvConfig(n_objects=n_objects)
    if episode_len is not None:
        cfg = replace(cfg, episode_len=episode_len)
    env = TabletopLite(n_envs, cfg, seed)
    states, acts, gen = [env.state()], [], scripted_actions(env, intent, speed)
    for _ in range(cfg.episode_len):
        a = next(gen)
        env.step(a)
        acts.append(a)
        states.append(env.state())
    return states, acts


# ----------------------------------------------------------------------------------- preference set
def _other(x: str, pool: tuple[str, ...]) -> str:
    return [p for p in pool if p != x][0]


def _templates(o: str, o2: str, b: str, rng: np.random.Generator) -> list[tuple[str, list[str], Intent, Intent]]:
    """(kind, surface forms, demo, hidden intent) for one scene draw."""
    ob = _other(b, BIN_NAMES)
    one, two = Intent(((o, b),)), Intent(((o, b), (o2, b)), ordered=True)
    cap = SLOW_CAP
    return [
        (
            "not_that_one",
            ["Not that one.", "No, not that one - the other one.", "Wrong one, use the other one."],
            one,
            Intent(((o2, b),)),
        ),
        (
            "other_bin",
            ["Put it in the other bin.", "Good, but it belongs in the other bin.", "Other bin please."],
            one,
            Intent(((o, ob),)),
        ),
        (
            "slower",
            ["Slow it down.", "Great job! Just be less aggressive.", "A bit gentler please, that was too fast."],
            one,
            Intent(((o, b),), speed_cap=cap),
        ),
        (
            "slow_other_bin",
            ["Slow it down and put it in the other bin.", "Other bin, and more gently this time."],
            one,
            Intent(((o, ob),), speed_cap=cap),
        ),
        (
            "return_home",
            [
                "After you drop it off, go back to where you started.",
                "Nice. Then return home afterwards.",
                "Put it there and then go back to the start.",
            ],
            one,
            Intent(((o, b),), home=True),
        ),
        ("synonym", [f"Use the {SYNONYMS[o2]} instead.", f"I meant the {SYNONYMS[o2]}."], one, Intent(((o2, b),))),
        (
            "ordered",
            [
                f"Put the {SYNONYMS[o]} in first, then the {SYNONYMS[o2]}.",
                f"First the {SPOKEN[o]}, then the {SPOKEN[o2]}, both into {b}.",
            ],
            Intent(((o2, b), (o, b)), ordered=True),
            two,
        ),
        (
            "reverse",
            ["Reverse the order.", "Do it the other way round: swap the order."],
            Intent(((o2, b), (o, b)), ordered=True),
            two,
        ),
    ]


def _task_text(demo: Intent, specified: bool) -> str:
    if not specified:
        return "Put the objects where they belong." if len(demo.places) > 1 else "Put an object into a bin."
    parts = [f"the {SPOKEN[o]} into {b}" for o, b in demo.places]
    return "Put " + " and then ".join(parts) + "."


def make_preferences(n: int = 100, seed: int = 0, n_chains: int = 10) -> list[Preference]:
    """``n`` single-round preferences plus ``n_chains`` two-round scenarios (round 2 builds on round 1)."""
    rng = np.random.default_rng(seed)
    out: list[Preference] = []
    for i in range(n):
        o, o2 = (str(x) for x in rng.choice(OBJECT_NAMES[:2], 2, replace=False))
        b = str(rng.choice(BIN_NAMES))
        kind, forms, demo, intent = _templates(o, o2, b, rng)[i % 8]
        text = str(forms[int(rng.integers(len(forms)))])
        specified = bool(rng.random() < 0.5)
        out.append(Preference(f"p{i:03d}", kind, text, _task_text(demo, specified), demo, intent))
    for c in range(n_chains):
        o, o2 = (str(x) for x in rng.choice(OBJECT_NAMES[:2], 2, replace=False))
        b = str(rng.choice(BIN_NAMES))
        r1 = Intent(((o, _other(b, BIN_NAMES)),))
        out.append(
            Preference(
                f"c{c:02d}r1",
                "other_bin",
                "Put it in the other bin.",
                _task_text(Intent(((o, b),)), False),
                Intent(((o, b),)),
                r1,
                chain=(c, 1),
            )
        )
        r2 = replace(r1, speed_cap=SLOW_CAP) if c % 2 == 0 else replace(r1, home=True)
        text2 = "Good. Now slow it down." if c % 2 == 0 else "Good. Afterwards go back to where you started."
        out.append(
            Preference(f"c{c:02d}r2", "round2_slower" if c % 2 == 0 else "round2_home", text2, "", r1, r2, chain=(c, 2))
        )
    return out
