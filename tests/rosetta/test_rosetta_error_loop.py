"""Error loop (official iterative_error_correction.o1mini_error_loop): fix on try k gives k fix calls,
never fixed gives {} after exactly 10, a passing draft makes none; bad input becomes structured errors."""

import pytest

from iclr26.rosetta.backends import BackendError, RoleRouter
from iclr26.rosetta.codegen import render_reward
from iclr26.rosetta.intent import Intent
from iclr26.rosetta.pipeline import ARMS, error_loop, fenced, rosetta_round
from iclr26.rosetta.smoke import SmokeRunner, smoke_test

INTENT = Intent((("red_cube", "bin2"),))
GOOD = render_reward(INTENT)
BROKEN = render_reward(INTENT, True, ("clone",))


class FixOnTry:
    """Replies with broken code until the k-th fix request, then with working code."""

    name = "fake"

    def __init__(self, k: int | None) -> None:
        self.k, self.calls, self.seen = k, 0, []

    def complete(self, role, messages):
        assert role == "fix_error"
        self.calls += 1
        self.seen.append(messages[-1]["content"])
        return fenced(GOOD if self.k is not None and self.calls >= self.k else BROKEN)


@pytest.fixture(scope="module")
def runner():
    with SmokeRunner() as r:
        yield r


@pytest.mark.parametrize("k", [1, 3])
def test_fix_on_try_k_gives_k_calls(runner, k):
    fake = FixOnTry(k)
    funcs, calls, res = error_loop(RoleRouter(fake), dict(BROKEN), runner.test, tries=10)
    assert res.ok and calls == k == fake.calls and funcs["compute_dense_reward"] == GOOD["compute_dense_reward"]
    assert ".clone()" in fake.seen[0] and "<error_line>    tcp = state" in fake.seen[0]


def test_never_fixed_gives_empty_after_exactly_10(runner):
    fake = FixOnTry(None)
    funcs, calls, res = error_loop(RoleRouter(fake), dict(BROKEN), runner.test, tries=10)
    assert funcs == {} and calls == 10 == fake.calls and res.kind == "RuntimeError"


def test_fix_on_the_last_try_is_never_tested(runner):
    # official for ... else: the reply to the 10th fix request is not smoke-tested
    funcs, calls, _ = error_loop(RoleRouter(FixOnTry(10)), dict(BROKEN), runner.test, tries=10)
    assert funcs == {} and calls == 10


def test_passing_draft_makes_no_fix_call(runner):
    fake = FixOnTry(1)
    funcs, calls, res = error_loop(RoleRouter(fake), dict(GOOD), runner.test, tries=10)
    assert res.ok and calls == 0 and fake.calls == 0 and funcs == GOOD


@pytest.mark.parametrize(
    "body, kind",
    [
        ("    while True:\n        pass", "Timeout"),
        ("    import os\n    return os.getcwd()", "ImportBlocked"),
        ("    return np.zeros(3)", "BadShape"),
        ("    return np.full(state['tcp_pos'].shape[0], np.nan)", "NonFinite"),
        ("    return (", "SyntaxError"),
    ],
)
def test_bad_code_becomes_structured_errors(body, kind):
    funcs = {
        "evaluate": GOOD["evaluate"],
        "compute_dense_reward": "def compute_dense_reward(state, action, info):\n" + body,
    }
    from iclr26.core.sandbox import SandboxLimits

    with SmokeRunner(limits=SandboxLimits(timeout_s=2.0)) as r:
        res = r.test(funcs)
    assert not res.ok and res.kind == kind


def test_missing_function_is_incomplete():
    res = smoke_test({"evaluate": GOOD["evaluate"]})
    assert not res.ok and res.kind == "Incomplete"


class Unreachable:
    name = "down"

    def complete(self, role, messages):
        raise BackendError("connect", "connection refused")


def test_unreachable_backend_gives_empty_reward_with_reason(tmp_path):
    from iclr26.rosetta.intent import make_preferences

    pref = make_preferences(8, seed=0)[1]
    router = RoleRouter(Unreachable(), transcript=tmp_path / "t.jsonl")
    res = rosetta_round(router, pref, ARMS["rosetta"], task=pref.task, video="")
    assert res.funcs == {} and "connect" in res.failure
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert len(lines) >= 2 and '"kind": "connect"' in lines[0]
