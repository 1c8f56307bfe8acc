"""Reward-code templates of the scripted stand-in coder (and of the oracle reward), with its bug classes.

The templates follow the paper's coding checklist (Sec. 3, "Coding"; the official short-horizon code
prompt): dense ``1 - tanh(5 d)`` shaping, all three target coordinates, staged masks that enable a
stage only when its prerequisite stage is *complete* and keep completed stages at their maximum (so the
total never drops at a completion), stages with equal maxima (1 each), a success bump of a quarter of
the total, and speed preferences as a constant-threshold penalty rather than a dense one.

For a plan with stages s_1..s_K (K = number of stages) the staged reward is

    r = Σ_k m_k · v_k + (K / 4) · 1[success] − 0.5 · 1[|Δtcp| > cap]
    v_k (get o to b) = (reach_k + carry_k) / 3 (1 once done),
                       reach_k = 1 − tanh(5 ‖tcp − p_o‖)  (1 once grasped / done),
                       carry_k = 1 − tanh(5 ‖p_o − (c_b + h ẑ)‖) while grasped (1 once done, 0 before)
    v_k (travel home) = 1 − tanh(5 ‖tcp − home‖)
    m_k = 1[stage k−1 done]  (m_1 = 1; completed stages stay at v_k = 1)

The unstaged variant (no_staging ablation and Eureka-like baseline) sums the same terms without masks
or kept maxima. Bug classes the stand-in injects (each fixed only by its review or, for runtime errors,
by a fix request that quotes the failing statement):

* ``missing_z``: reach distance on x, y only (the gripper hovers above the object and never grasps);
* ``dense_speed``: −20 ‖Δtcp‖ every step instead of the threshold penalty;
* ``premature_mask``: stage k enabled when stage k−1's object is *grasped* rather than done;
* runtime errors ``clone`` (torch's ``.clone()`` on a numpy array), ``key`` (a misspelt state key),
  ``scalar`` (``float()`` of a per-env array).
"""

from __future__ import annotations

import re

from .intent import Intent

__all__ = ["RUNTIME_BUGS", "SEMANTIC_BUGS", "fix_runtime", "fix_semantic", "render_reward", "runtime_bugs_in"]

SEMANTIC_BUGS = ("missing_z", "dense_speed", "premature_mask")
RUNTIME_BUGS = ("clone", "key", "scalar")
_RUNTIME_TEXT = {
    "clone": ('tcp = state["tcp_pos"]', 'tcp = state["tcp_pos"].clone()'),
    "key": (
        'speed = np.linalg.norm(state["tcp_vel"], axis=1)',
        'speed = np.linalg.norm(state["tcp_velocity"], axis=1)',
    ),
    "scalar": ('bump = BUMP * info["success"]', 'bump = BUMP * float(info["success"])'),
}


def _evaluate_src(intent: Intent, staged: bool) -> str:
    lines = ["def evaluate(state):", "    info = {}", '    prev = np.ones(state["tcp_pos"].shape[0], dtype=bool)']
    k = 0
    for k, (o, b) in enumerate(intent.places, 1):
        lines += [
            f'    d{k} = np.linalg.norm(state["{o}_pos"][:, :2] - state["{b}_pos"][:, :2], axis=1)',
            f'    placed{k} = (d{k} < 0.05) & np.logical_not(state["{o}_grasped"])',
            f'    info["stage{k}_done"] = placed{k} & prev' if staged else f'    info["stage{k}_done"] = placed{k}',
            f'    prev = info["stage{k}_done"]' if staged else f"    prev = prev & placed{k}",
        ]
    if intent.home:
        k += 1
        lines += [
            '    at_home = np.linalg.norm(state["tcp_pos"] - state["home_pos"], axis=1) < 0.05',
            f'    info["stage{k}_done"] = at_home & prev',
            f'    prev = info["stage{k}_done"]',
        ]
    lines += ['    info["success"] = prev', "    return info"]
    return "\n".join(lines)


def _place_stage(k: int, o: str, b: str, staged: bool, prereq: str) -> list[str]:
    out = [
        f"    # stage {k}: get {o} to {b}",
        f'    pos{k} = state["{o}_pos"]',
        f'    grasped{k} = state["{o}_grasped"]',
        f'    target{k} = state["{b}_pos"] + np.array([0.0, 0.0, 0.02])',
        f"    reach{k} = 1.0 - np.tanh(5.0 * np.linalg.norm(tcp - pos{k}, axis=1))",
        f"    carry{k} = 1.0 - np.tanh(5.0 * np.linalg.norm(pos{k} - target{k}, axis=1))",
    ]
    if staged:
        out += [
            f'    done{k} = info["stage{k}_done"]',
            f"    reach{k} = np.where(grasped{k} | done{k}, 1.0, reach{k})",
            f"    carry{k} = np.where(done{k}, 1.0, np.where(grasped{k}, carry{k}, 0.0))",
            f"    prereq{k} = {prereq}",
            f"    value{k} = np.where(done{k}, 1.0, np.where(prereq{k}, (reach{k} + carry{k}) / 3.0, 0.0))",
        ]
    else:
        out.append(f"    value{k} = (reach{k} + carry{k}) / 3.0")
    return out


def _dense_src(intent: Intent, staged: bool) -> str:
    lines = ["def compute_dense_reward(state, action, info):", '    tcp = state["tcp_pos"]']
    k, prev_obj = 0, None
    for k, (o, b) in enumerate(intent.places, 1):
        prereq = "True" if k == 1 else f'info["stage{k - 1}_done"]'
        lines += _place_stage(k, o, b, staged, prereq)
        prev_obj = o
    if intent.home:
        k += 1
        lines += [
            f"    # stage {k}: travel to the home position",
            f'    value{k} = 1.0 - np.tanh(5.0 * np.linalg.norm(tcp - state["home_pos"], axis=1))',
        ]
        if staged and k > 1:
            lines += [
                f'    prereq{k} = info["stage{k - 1}_done"]',
                f"    value{k} = np.where(prereq{k}, value{k}, 0.0)",
            ]
    total = " + ".join(f"value{j}" for j in range(1, k + 1))
    lines += [
        f"    reward = {total}",
        f"    BUMP = {k / 4.0}",
        '    bump = BUMP * info["success"]',
        "    reward = reward + bump",
    ]
    if intent.speed_cap is not None:
        lines += [
            '    speed = np.linalg.norm(state["tcp_vel"], axis=1)',
            f"    reward = reward - 0.5 * (speed > {intent.speed_cap})",
        ]
    lines.append("    return reward")
    del prev_obj
    return "\n".join(lines)


def render_reward(intent: Intent, staged: bool = True, bugs: tuple[str, ...] = ()) -> dict[str, str]:
    """``{"evaluate": src, "compute_dense_reward": src}`` for ``intent`` with the named bugs injected."""
    funcs = {"evaluate": _evaluate_src(intent, staged), "compute_dense_reward": _dense_src(intent, staged)}
    return {name: inject(src, bugs, intent) for name, src in funcs.items()}


def inject(src: str, bugs: tuple[str, ...], intent: Intent) -> str:
    """Apply bug classes to one function's source (a bug whose pattern is absent is a no-op)."""
    for bug in bugs:
        if bug == "missing_z":
            src = re.sub(r"norm\(tcp - (pos\d+), axis=1\)", r"norm(tcp[:, :2] - \1[:, :2], axis=1)", src)
        elif bug == "dense_speed":
            src = re.sub(r"reward - 0\.5 \* \(speed > [0-9.]+\)", "reward - 20.0 * speed", src)
        elif bug == "premature_mask":
            for k, (o, _) in enumerate(intent.places[:-1], 1):
                src = src.replace(f'prereq{k + 1} = info["stage{k}_done"]', f'prereq{k + 1} = state["{o}_grasped"]')
            if intent.home and len(intent.places) >= 1:
                k, o = len(intent.places), intent.places[-1][0]
                src = src.replace(f'prereq{k + 1} = info["stage{k}_done"]', f'prereq{k + 1} = state["{o}_grasped"]')
        elif bug in _RUNTIME_TEXT:
            good, bad = _RUNTIME_TEXT[bug]
            src = src.replace(good, bad, 1)
    return src


def fix_semantic(src: str, bug: str, speed_cap: float | None) -> str:
    """The edit a review makes for its bug class (identity when the bug is absent)."""
    if bug == "missing_z":
        return re.sub(r"norm\(tcp\[:, :2\] - (pos\d+)\[:, :2\], axis=1\)", r"norm(tcp - \1, axis=1)", src)
    if bug == "dense_speed" and speed_cap is not None:
        return src.replace("reward - 20.0 * speed", f"reward - 0.5 * (speed > {speed_cap})")
    if bug == "premature_mask":
        return re.sub(
            r'prereq(\d+) = state\["\w+_grasped"\]',
            lambda m: f'prereq{m.group(1)} = info["stage{int(m.group(1)) - 1}_done"]',
            src,
        )
    return src


def runtime_bugs_in(src: str) -> list[str]:
    """Runtime bug classes present in ``src``."""
    return [b for b, (_, bad) in _RUNTIME_TEXT.items() if bad in src]


def fix_runtime(src: str, error_line: str | None) -> str:
    """Repair the runtime bug whose statement is quoted in ``error_line`` (nothing else is repaired)."""
    if not error_line:
        return src
    for good, bad in _RUNTIME_TEXT.values():
        if bad.strip() in error_line and bad in src:
            return src.replace(bad, good, 1)
    return src
