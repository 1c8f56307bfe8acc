"""A test-only experiment: fits a 1-d linear model with fit() and checks two claims (one fails)."""

from dataclasses import dataclass, replace

import numpy as np
import torch

from iclr26.core.experiment import Claim, Experiment, RunOutput, mean_std, register
from iclr26.core.report import markdown_table, plot_curves
from iclr26.core.train import TrainConfig, fit


@dataclass(frozen=True)
class ToyConfig:
    """The toy's settings.

    slope: the true slope of the data.
    noise: std of the label noise.
    train: optimisation.
    """

    slope: float = 3.0
    noise: float = 0.0
    train: TrainConfig = TrainConfig(steps=300, lr=0.1, warmup_steps=2, progress=False, log_every=50)


def config_for(scale: str) -> ToyConfig:
    cfg = ToyConfig()
    return replace(cfg, train=replace(cfg.train, steps=150)) if scale == "smoke" else cfg


def run(ctx):
    cfg = ctx.cfg
    slopes, curves = [], {}
    for seed in ctx.progress(ctx.seeds, desc="seeds"):
        torch.manual_seed(seed)
        model = torch.nn.Linear(1, 1)

        def get_batch(step, rank, world, seed=seed):
            g = torch.Generator().manual_seed(seed * 10_000 + step)
            x = torch.randn(32, 1, generator=g)
            return x, cfg.slope * x + cfg.noise * torch.randn(32, 1, generator=g)

        steps = cfg.train.steps
        res = fit(
            model, lambda m, b: ((m(b[0]) - b[1]) ** 2).mean(), get_batch, cfg.train, log=ctx.logger(f"seed{seed}")
        )
        slopes.append(float(model.weight.detach()))
        curves[f"seed {seed}"] = (np.arange(steps), res.losses)
    plot_curves(ctx.figure_path("loss"), curves, "step", "loss")
    s = mean_std(slopes)
    return RunOutput(
        metrics={"slope_per_seed": slopes, "slope": s},
        measured={"C1": {"slope": s["mean"]}, "C2": {"slope": s["mean"]}},
        tables={"Slopes": markdown_table(["seed", "slope"], list(zip(ctx.seeds, slopes)))},
    )


EXPERIMENT = register(
    Experiment(
        slug="toy",
        title="Toy linear regression (test only)",
        arxiv="0000.00000",
        claims=(
            Claim(
                "C1", "the fitted slope is close to 3", 3.0, "|slope - 3| < 0.5", lambda m: abs(m["slope"] - 3) < 0.5
            ),
            Claim("C2", "a claim that must fail", 10.0, "slope > 10", lambda m: m["slope"] > 10),
        ),
        run=run,
        config=config_for,
    )
)
