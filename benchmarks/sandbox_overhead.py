"""Sandbox overhead per trivial call: persistent server (one locked-down child serving all calls) against
one-shot ``run_untrusted`` (a fresh child per call), same limits and isolation mode, reported as a ratio
(lower is better). The call is a reward function ``float(y == gt)``: the time is all sandbox overhead.

Two call patterns for the server: back-to-back calls, and calls after a short pause (``--gap-ms``, default
20: an RL loop steps its environments between reward calls). Every server call runs in a fresh fork; the
fork for the next call is made while the current one serves, so a pause hides its cost, while
back-to-back calls wait for it.

Run alone: ``python benchmarks/sandbox_overhead.py [--repeats 5 --calls 20 --gap-ms 20]`` (also part of
run_all.py). Times are medians over repeats of interleaved runs; only the calls are timed, not the pauses.
Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import time

from iclr26.core.sandbox import SandboxLimits, SandboxServer, kernel_isolation_available, run_untrusted

SOURCE = "def reward(y, gt):\n    return float(y == gt)\n"
LIMITS = SandboxLimits(timeout_s=20.0)


def bench_sandbox(
    repeats: int = 5, calls: int = 20, isolation: str | None = None, gap_s: float = 0.0
) -> tuple[float, float, float]:
    """(seconds per one-shot call, seconds per server call, server / one-shot); ``gap_s``: pause before each
    server call (not timed)."""
    if isolation is None:
        isolation = "kernel" if kernel_isolation_available() is None else "python-only"
    one, srv_t = [], []
    with SandboxServer(SOURCE, limits=LIMITS, isolation=isolation) as srv:
        assert srv.call("reward", "a", "a").value == 1.0  # start-up is not part of the per-call cost
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                res = run_untrusted(SOURCE, call=("reward", ("a", "a")), limits=LIMITS, isolation=isolation)
                assert res.ok, res
            one.append((time.perf_counter() - t0) / calls)
            spent = 0.0
            for _ in range(calls):
                if gap_s:
                    time.sleep(gap_s)
                t0 = time.perf_counter()
                res = srv.call("reward", "a", "a")
                spent += time.perf_counter() - t0
                assert res.ok, res
            srv_t.append(spent / calls)
    a, b = statistics.median(one), statistics.median(srv_t)
    return a, b, b / a


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--gap-ms", type=float, default=20.0, help="pause before each server call, second pattern")
    args = p.parse_args()
    for mode in ("kernel", "python-only"):
        if mode == "kernel" and kernel_isolation_available() is not None:
            print("kernel isolation unavailable here; skipped")
            continue
        for gap in (0.0, args.gap_ms / 1e3):
            one, srv, ratio = bench_sandbox(args.repeats, args.calls, mode, gap)
            how = "back-to-back" if not gap else f"after {gap * 1e3:.0f} ms pauses"
            print(
                f"sandbox ({mode}, {how}) server call / one-shot call: {ratio:.3f}  "
                f"({srv * 1e3:.1f} ms vs {one * 1e3:.1f} ms per trivial call)"
            )


if __name__ == "__main__":
    main()
