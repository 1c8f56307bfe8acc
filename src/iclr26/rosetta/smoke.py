"""Sandboxed execution of generated reward code: the smoke test of the error loop and the RL reward.

Generated functions never run in this process: they are assembled into one module and served by
``iclr26.core.sandbox.SandboxServer`` (one locked-down child, many calls; killed and replaced on any
violation). A trusted harness function is appended:

    rosetta_step(state, action) -> (compute_dense_reward(state, action, evaluate(state)), evaluate(state)["success"])

Smoke test (official ``pipelines/error_code_short_horizon.py``): 4 envs, reset, 10 steps of random
actions; the reward must have shape (num_envs,) and be finite. Every failure becomes a
:class:`SmokeResult` with a kind (a sandbox error kind, ``Incomplete``, ``BadShape`` or ``NonFinite``),
a one-line message, the failing generated function and the error line (see :mod:`.extract`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from iclr26.core.sandbox import SandboxLimits, SandboxServer, model_code_isolation

from .env import EnvConfig, TabletopLite
from .extract import assemble, error_line, function_at_line

__all__ = ["REQUIRED", "RewardError", "SandboxedReward", "SmokeResult", "SmokeRunner", "check_step", "smoke_test"]

REQUIRED = ("evaluate", "compute_dense_reward")
HARNESS = """
def rosetta_step(state, action):
    info = evaluate(state)
    reward = compute_dense_reward(state, action, info)
    return np.asarray(reward, dtype=float), np.asarray(info["success"], dtype=bool)
"""
DEFAULT_ENV = EnvConfig()
REWARD_LIMITS = SandboxLimits(timeout_s=5.0)
SMOKE_LIMITS = SandboxLimits(timeout_s=10.0)
_LINE = re.compile(r"\(line (\d+)\)\s*$")


@dataclass(frozen=True)
class SmokeResult:
    """Outcome of a smoke test: ``ok``, or the failure's kind, message, function and error line."""

    ok: bool
    kind: str = ""
    message: str = ""
    function: str | None = None
    error_line: str | None = None


def _short(exc: BaseException) -> str:
    """``Type: text`` of an exception, at most 200 characters, never raising (the text may hold model output)."""
    try:
        text = str(exc)
    except Exception:  # e.g. an integer too long for str()
        text = ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def check_step(value, n: int) -> SmokeResult | None:
    """None when ``value`` is a (reward float[n] finite, success bool[n]) pair, else the failure.

    ``value`` comes from generated code (which may have patched ``np.asarray`` in its process): anything
    that does not convert (strings, integers too large for a float, ragged lists) is a BadResult, never an
    exception; success flags must be booleans or numbers."""
    if not (isinstance(value, tuple | list) and len(value) == 2):
        return SmokeResult(False, "BadResult", "harness returned an unexpected value")
    try:
        r, s = np.asarray(value[0], float), np.asarray(value[1])
    except (TypeError, ValueError, OverflowError, MemoryError, RecursionError) as e:
        return SmokeResult(False, "BadResult", f"reward is not numeric: {_short(e)}")
    if s.dtype.kind not in "biuf":
        return SmokeResult(False, "BadResult", f"info['success'] is not boolean or numeric (dtype {s.dtype.str})")
    if r.shape != (n,):
        return SmokeResult(False, "BadShape", f"reward has shape {r.shape}, expected ({n},)")
    if s.shape != (n,):
        return SmokeResult(False, "BadShape", f"info['success'] has shape {s.shape}, expected ({n},)")
    if not np.all(np.isfinite(r)):
        return SmokeResult(False, "NonFinite", "reward has NaN or infinite values")
    return None


def _failure(kind: str, message: str, funcs: dict[str, str], spans: dict[str, tuple[int, int]]) -> SmokeResult:
    """A sandbox failure with the generated function and error line of its ``(line N)``."""
    m = _LINE.search(message or "")
    fn, snippet = None, None
    if m:
        line = int(m.group(1))
        fn = function_at_line(spans, line)
        if fn is not None and fn != "rosetta_step":
            snippet = error_line(funcs, fn, line - spans[fn][0] + 1)
        else:
            fn = None
    return SmokeResult(False, kind, message, fn, snippet)


class RewardError(RuntimeError):
    """A generated reward failed while training (the run records it as a failed reward)."""


class SandboxedReward:
    """``reward(state, action) -> (reward float[N], success bool[N])`` through one sandbox child."""

    def __init__(
        self, funcs: dict[str, str], limits: SandboxLimits = REWARD_LIMITS, isolation: str | None = None
    ) -> None:
        missing = [f for f in REQUIRED if f not in funcs]
        if missing:
            raise ValueError(f"reward functions missing: {', '.join(missing)}")
        user = {k: v for k, v in funcs.items() if k != "rosetta_step"}
        self.source, self.spans = assemble({**user, "rosetta_step": HARNESS.strip()})
        self.funcs = user
        # python-only only when the user allowed it (IsolationRefused otherwise): the code is model-written.
        # One child per draft (fresh="draft"): PPO calls it every step, and a fork plus the replay of the
        # definitions per call made small's PPO several times slower; drafts never share a child.
        self.server = SandboxServer(
            self.source, limits=limits, isolation=model_code_isolation(isolation), fresh="draft"
        )

    def close(self) -> None:
        self.server.close()

    def __enter__(self) -> SandboxedReward:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def step(self, state: dict, action: np.ndarray) -> tuple[np.ndarray, np.ndarray] | SmokeResult:
        """The reward and success flags, or a :class:`SmokeResult` describing the failure."""
        n = state["tcp_pos"].shape[0]
        res = self.server.call("rosetta_step", state, np.asarray(action, float))
        if not res.ok:
            return self._failure(res.error or "Crashed", res.message)
        bad = check_step(res.value, n)
        if bad is not None:
            return bad
        return np.asarray(res.value[0], float), np.asarray(res.value[1]).astype(bool)

    def _failure(self, kind: str, message: str) -> SmokeResult:
        return _failure(kind, message, self.funcs, self.spans)

    def __call__(self, state: dict, action: np.ndarray) -> np.ndarray:
        out = self.step(state, action)
        if isinstance(out, SmokeResult):
            raise RewardError(f"{out.kind}: {out.message}")
        return out[0]


SMOKE_DRIVER = """
smoke_out = []
for smoke_state, smoke_action in zip(smoke_states, smoke_actions):
    smoke_out.append(rosetta_step(smoke_state, smoke_action))
result = smoke_out
"""


def smoke_inputs(
    seed: int = 0, num_envs: int = 4, steps: int = 10, env_cfg: EnvConfig = DEFAULT_ENV
) -> tuple[list[dict], list[np.ndarray]]:
    """States and random actions of the smoke test (reset, then ``steps`` uniform random actions)."""
    env = TabletopLite(num_envs, env_cfg, seed)
    rng = np.random.default_rng(seed)
    states, actions = [], []
    for _ in range(steps):
        a = rng.uniform(-1, 1, (num_envs, 4))
        env.step(a)
        states.append(env.state())
        actions.append(a)
    return states, actions


class SmokeRunner:
    """Smoke tests of successive versions of one preference's reward code in ONE sandbox child.

    Each test runs the assembled functions plus a driver in a fresh namespace of the child
    (``SandboxServer.run``); the child is replaced after any violation. One runner per preference and
    arm: module state could leak between the versions it tests, never between preferences.
    """

    def __init__(
        self,
        seed: int = 0,
        num_envs: int = 4,
        steps: int = 10,
        env_cfg: EnvConfig = DEFAULT_ENV,
        isolation: str | None = None,
        limits: SandboxLimits = SMOKE_LIMITS,
    ) -> None:
        self.states, self.actions = smoke_inputs(seed, num_envs, steps, env_cfg)
        self.server = SandboxServer("", limits=limits, isolation=model_code_isolation(isolation))
        self.calls = 0

    def close(self) -> None:
        self.server.close()

    def __enter__(self) -> SmokeRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def test(self, funcs: dict[str, str]) -> SmokeResult:
        """Run ``funcs`` on the smoke states; ok, or the first failure with its error line."""
        out = self.rewards(funcs, self.states, self.actions)
        return out if isinstance(out, SmokeResult) else SmokeResult(True)

    def rewards(
        self, funcs: dict[str, str], states: list[dict], actions: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray] | SmokeResult:
        """(reward [T, N], success [T, N]) of ``funcs`` on given states/actions, or the first failure."""
        missing = [f for f in REQUIRED if f not in funcs]
        if missing:
            return SmokeResult(False, "Incomplete", f"missing functions: {', '.join(missing)}")
        user = {k: v for k, v in funcs.items() if k != "rosetta_step"}
        source, spans = assemble({**user, "rosetta_step": HARNESS.strip()})
        self.calls += 1
        res = self.server.run(source + SMOKE_DRIVER, {"smoke_states": states, "smoke_actions": list(actions)})
        if not res.ok:
            return _failure(res.error or "Crashed", res.message, user, spans)
        value = res.value
        if not isinstance(value, list) or len(value) != len(states):
            return SmokeResult(False, "BadResult", "the smoke driver returned an unexpected value")
        n = states[0]["tcp_pos"].shape[0]
        for item in value:
            bad = check_step(item, n)
            if bad is not None:
                return bad
        return np.stack([np.asarray(v[0], float) for v in value]), np.stack([np.asarray(v[1], bool) for v in value])


def smoke_test(
    funcs: dict[str, str],
    seed: int = 0,
    num_envs: int = 4,
    steps: int = 10,
    env_cfg: EnvConfig = DEFAULT_ENV,
    isolation: str | None = None,
) -> SmokeResult:
    """One-off smoke test (its own sandbox child); see :class:`SmokeRunner`."""
    with SmokeRunner(seed, num_envs, steps, env_cfg, isolation) as runner:
        return runner.test(funcs)
