"""Budget rule of the acereason real scale (src/iclr26/acereason/README.md, "Budget rule"): from a timing pilot's
results.json (one dev seed, committed batch shapes, ``real.n_eval=4 real.steps=1``), project the wall time of a
3-seed run and choose the sizes that keep it <= the budget. Prints the projection and the ``--set`` arguments.

usage: python benchmarks/acereason_real_budget.py PILOT_RESULTS_JSON [--budget 1620]
"""

from __future__ import annotations

import argparse
import json
import math

from iclr26.acereason.config import RealConfig

# the sizes committed before the rule (RealConfig's defaults are now the sizes the rule chose)
COMMITTED = {"max_iter": 6, "steps": 4, "n_eval": 16, "eval_chunk": 4, "calib_prompts": 4}


def per_seed(t: dict, rc: dict, arms: int) -> float:
    """Worst-case seconds of one seed at sizes ``rc`` from the pilot's per-piece timings ``t``."""
    scale = rc["calib_prompts"] / t["calib_prompts"]  # calibration and fresh batches scale with the prompts
    c_cal = t["calibration"] / t["calibration_evals"] * scale
    chunks = math.ceil(rc["n_eval"] / rc["eval_chunk"])
    return (
        t["load"]
        + (t["grid"] + rc["max_iter"]) * c_cal
        + t["fresh"] * scale
        + (1 + arms) * chunks * t["c_eval"]
        + arms * rc["steps"] * t["c_step"]
    )


def choose(res: dict, budget: float) -> tuple[dict, float, list[str]]:
    o = res["metrics"]["per_seed"][0]
    tm = o["timings"]
    d = RealConfig()
    arm_names = list(o["arms"])
    pilot_steps = len(o["arms"][arm_names[0]]["history"])
    t = {
        "load": tm["load"],
        "calibration": tm["calibration"],
        "calibration_evals": tm["calibration_evals"],
        "calib_prompts": COMMITTED["calib_prompts"],
        "fresh": tm["fresh"],
        "grid": len(d.temperatures),
        "c_eval": max(tm["eval_init"], *(tm[f"eval {a}"] for a in arm_names)),
        "c_step": max(tm[f"rl {a}"] for a in arm_names) / pilot_steps,
    }
    startup = res["wall_seconds"] - o["seconds"]
    arms = len(arm_names)
    rc = dict(COMMITTED)

    def total(r: dict) -> float:
        return 3 * per_seed(t, r, arms) + startup

    log = [f"pilot pieces: {json.dumps({k: round(v, 2) for k, v in t.items()})}, start-up {startup:.1f} s"]
    log.append(f"committed sizes {rc}: projected {total(rc):.0f} s")
    if total(rc) <= budget:  # the rest goes to GRPO steps
        while total({**rc, "steps": rc["steps"] + 1}) <= budget:
            rc["steps"] += 1
    else:
        cuts = [("max_iter", 5), ("steps", 3), ("steps", 2), ("n_eval", 12), ("n_eval", 8), ("calib_prompts", 2)]
        for key, value in cuts:
            if total(rc) <= budget:
                break
            rc[key] = value
    log.append(f"chosen sizes {rc}: projected {total(rc):.0f} s (budget {budget:.0f} s)")
    return rc, total(rc), log


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--budget", type=float, default=1620.0)
    a = ap.parse_args()
    rc, _, log = choose(json.load(open(a.results)), a.budget)
    print("\n".join(log))
    print(" ".join(f"--set real.{k}={v}" for k, v in rc.items() if COMMITTED[k] != v))


if __name__ == "__main__":
    main()
