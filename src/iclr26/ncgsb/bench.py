"""Training-cost benchmark (ratios, not absolute times): CWG vs a small IMF (DSBM-style) solver.

The paper reports CWG training in 280 s vs 1340-1570 s for DSBM/GSBM (LiDAR) and similar ratios elsewhere
(Sec. 5 tables). Here, on the Gaussian-to-Gaussian bridge of Task B without a waypoint:

1. CPU seconds of one CWG fit, and its terminal W2;
2. CPU seconds of IMF until its terminal W2 reaches CWG's (evaluated after every outer iteration; evaluation
   time excluded), or the budget ends;
3. CWG step time against N (particles), as a log-log slope (tensorized Sinkhorn: ≤ 2; the paper's
   near-linear claim needs an online / multiscale Sinkhorn backend).

``python -m iclr26.ncgsb.bench [--out FILE.json] [--seed 0]``
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import numpy as np
import torch

from iclr26.ncgsb.baselines import IMFBridge
from iclr26.ncgsb.bridge import CWGBridge
from iclr26.ncgsb.config import CWGConfig, FitConfig, TaskBConfig
from iclr26.ncgsb.ot import exact_w2
from iclr26.ncgsb.tasks import task_b_samplers


def time_to_w2(
    seed: int = 0, fit: FitConfig | None = None, imf_budget_outer: int = 30, imf_inner: int = 100, n_eval: int = 500
) -> dict:
    """CWG fit time and terminal W2, then IMF time to reach that W2 (CPU seconds)."""
    fit = fit or FitConfig()
    src, tgt = task_b_samplers(TaskBConfig())
    gen = torch.Generator().manual_seed(seed + 10_000)
    x0, xb = src(n_eval, gen), tgt(n_eval, gen)
    torch.manual_seed(seed)
    cwg = CWGBridge(2, CWGConfig())
    t0 = time.process_time()
    cwg.fit(src, tgt, fit=fit, seed=seed)
    cwg_s = time.process_time() - t0
    cwg_w2 = exact_w2(cwg.path(x0)[-1], xb)
    torch.manual_seed(seed)
    imf = IMFBridge(2, sigma=0.1)
    state = {"train_s": 0.0, "mark": time.process_time(), "w2": []}

    def callback(total_steps: int) -> bool:
        state["train_s"] += time.process_time() - state["mark"]
        w2 = exact_w2(imf.sample(x0, torch.Generator().manual_seed(seed)), xb)
        state["w2"].append((total_steps, w2))
        state["mark"] = time.process_time()
        return w2 <= cwg_w2

    imf.fit(
        src,
        tgt,
        n_outer=imf_budget_outer,
        inner_steps=imf_inner,
        n_particles=fit.n_particles,
        seed=seed,
        callback=callback,
    )
    reached = bool(state["w2"] and state["w2"][-1][1] <= cwg_w2)
    return {
        "cwg_cpu_s": cwg_s,
        "cwg_terminal_w2": cwg_w2,
        "imf_cpu_s": state["train_s"],
        "imf_reached": reached,
        "imf_w2_curve": state["w2"],
        "ratio_imf_over_cwg": state["train_s"] / cwg_s,
    }


def step_time_slope(ns=(64, 128, 256, 512), steps: int = 15, seed: int = 0) -> dict:
    """CPU seconds per CWG step (one target) for each N and the log-log slope of time vs N."""
    src, tgt = task_b_samplers(TaskBConfig())
    times = []
    for n in ns:
        torch.manual_seed(seed)
        bridge = CWGBridge(2, CWGConfig())
        t0 = time.process_time()
        bridge.fit(src, tgt, fit=replace(FitConfig(), steps=steps, n_particles=n), seed=seed)
        times.append((time.process_time() - t0) / steps)
    slope = float(np.polyfit(np.log(ns), np.log(times), 1)[0])
    return {"n": list(ns), "seconds_per_step": times, "loglog_slope": slope}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    res = {"time_to_w2": time_to_w2(args.seed), "step_time": step_time_slope(seed=args.seed)}
    text = json.dumps(res, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
