"""A test-only experiment: fits a 1-d linear model with fit() and checks two claims (one fails)."""

import numpy as np
import torch

from iclr26.core.experiment import Claim, Experiment, RunOutput, mean_std, register
from iclr26.core.report import markdown_table, plot_curves
from iclr26.core.train import TrainConfig, fit


def run(ctx):
    slopes, curves = [], {}
    for seed in ctx.progress(ctx.seeds, desc="seeds"):
        torch.manual_seed(seed)
        model = torch.nn.Linear(1, 1)

        def get_batch(step, rank, world, seed=seed):
            g = torch.Generator().manual_seed(seed * 10_000 + step)
            x = torch.randn(32, 1, generator=g)
            return x, 3.0 * x

        steps = 150 if ctx.scale == "smoke" else 300
        res = fit(model, lambda m, b: ((m(b[0]) - b[1]) ** 2).mean(), get_batch,
                  TrainConfig(steps=steps, lr=0.1, warmup_steps=2, progress=False))
        slopes.append(float(model.weight.detach()))
        curves[f"seed {seed}"] = (np.arange(steps), res.losses)
    plot_curves(ctx.figure_path("loss"), curves, "step", "loss")
    s = mean_std(slopes)
    return RunOutput(metrics={"slope_per_seed": slopes, "slope": s},
                     measured={"C1": {"slope": s["mean"]}, "C2": {"slope": s["mean"]}},
                     tables={"Slopes": markdown_table(["seed", "slope"], list(zip(ctx.seeds, slopes)))})


EXPERIMENT = register(Experiment(
    slug="toy",
    title="Toy linear regression (test only)",
    arxiv="0000.00000",
    claims=(
        Claim("C1", "the fitted slope is close to 3", 3.0, "|slope - 3| < 0.5",
              lambda m: abs(m["slope"] - 3) < 0.5),
        Claim("C2", "a claim that must fail", 10.0, "slope > 10", lambda m: m["slope"] > 10),
    ),
    run=run,
))
