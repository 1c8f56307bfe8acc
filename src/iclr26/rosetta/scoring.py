"""Judging generated rewards without RL: reward-intent AUROC and the staged-reward monotonicity check.

* Reward-intent AUROC: scripted rollouts of many behaviours (each object into each bin, with or
  without the return home, at full or reduced speed, and both orders of two objects) are scored by
  the generated reward (episode return); the label is the hidden intent's checker. AUROC = P(a
  satisfying rollout outscores a non-satisfying one), ties count 1/2. An unusable reward (``{}``)
  scores 0.5.
* Monotonicity at stage completions (the paper's staging rule "the total never decreases"): on a
  scripted successful demo of a multi-stage intent, the reward at the step a stage completes is >= the
  reward one step before, for every completion and every env.
"""

from __future__ import annotations

import numpy as np

from .env import BIN_NAMES, HOME, OBJECT_NAMES
from .intent import Intent, check_intent, rollout_states
from .smoke import SmokeResult, SmokeRunner

__all__ = ["auroc", "behaviours", "completion_steps", "monotone_at_completions", "reward_auroc", "stacked_rollouts"]


def behaviours(n_objects: int = 2) -> list[tuple[Intent, float]]:
    """(executed intent, speed fraction) of every scripted behaviour used for scoring."""
    objs, out = OBJECT_NAMES[:n_objects], []
    for o in objs:
        for b in BIN_NAMES:
            for home in (False, True):
                for speed in (1.0, 0.5):
                    out.append((Intent(((o, b),), home=home), speed))
    for b in BIN_NAMES:
        for o1 in objs:
            for o2 in objs:
                if o1 != o2:
                    out.append((Intent(((o1, b), (o2, b)), ordered=True), 1.0))
    return out


def stacked_rollouts(n_objects: int, envs_per: int, seed: int) -> tuple[list[dict], list[np.ndarray]]:
    """All behaviours' rollouts stacked on the env axis: states t = 0..T and actions t = 0..T-1."""
    runs = [
        rollout_states(it, n_objects, envs_per, seed + 7919 * i, speed)
        for i, (it, speed) in enumerate(behaviours(n_objects))
    ]
    T = len(runs[0][1])
    states = [{k: np.concatenate([r[0][t][k] for r in runs]) for k in runs[0][0][t]} for t in range(T + 1)]
    actions = [np.concatenate([r[1][t] for r in runs]) for t in range(T)]
    return states, actions


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Mann-Whitney AUROC with ties as 1/2; 0.5 when one class is empty."""
    scores, labels = np.asarray(scores, float), np.asarray(labels, bool)
    pos, neg = scores[labels], scores[~labels]
    if len(pos) == 0 or len(neg) == 0:
        return 0.5
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


def reward_auroc(
    runner: SmokeRunner, funcs: dict[str, str], intent: Intent, states: list[dict], actions: list[np.ndarray]
) -> float:
    """AUROC of the episode return under ``funcs`` for the intent's success over stacked rollouts."""
    labels = check_intent(intent, states)["success"]
    if not funcs:
        return 0.5
    out = runner.rewards(funcs, states[1:], actions)
    if isinstance(out, SmokeResult):
        return 0.5
    return auroc(out[0].sum(0), labels)


def completion_steps(intent: Intent, states: list[dict], bin_radius: float = 0.05) -> np.ndarray:
    """[stages, N] first step t >= 1 at which each stage holds (places in order, then home; -1: never)."""
    from .env import in_bin

    T, out, after = len(states), [], np.zeros(states[0]["tcp_pos"].shape[0], int)
    for o, b in intent.places:
        hold = np.stack([in_bin(s[f"{o}_pos"], s[f"{o}_grasped"], s[f"{b}_pos"], bin_radius) for s in states])
        hold &= np.arange(T)[:, None] >= np.maximum(after, 1)[None, :]
        first = np.where(hold.any(0), hold.argmax(0), -1)
        out.append(first)
        after = np.maximum(after, first)
    if intent.home:
        home = np.stack([np.linalg.norm(s["tcp_pos"] - HOME, axis=1) < 0.05 for s in states])
        home &= np.arange(T)[:, None] >= np.maximum(after, 1)[None, :]
        out.append(np.where(home.any(0), home.argmax(0), -1))
    return np.stack(out)


def monotone_at_completions(rewards: np.ndarray, steps: np.ndarray) -> bool:
    """True when no stage completion loses reward: for every completion step t_c >= 2 (``rewards`` [T, N],
    row t-1 holds r_t), r_t >= r_{t_c - 1} for every t from t_c until the next completion (or the end)."""
    T = rewards.shape[0]
    for env in range(rewards.shape[1]):
        done = sorted(int(t) for t in steps[:, env] if t >= 1)
        for i, tc in enumerate(done):
            if tc < 2:
                continue
            end = done[i + 1] if i + 1 < len(done) else T + 1
            before = rewards[tc - 2, env]
            if np.any(rewards[tc - 1 : end - 1, env] < before - 1e-9):
                return False
    return True
