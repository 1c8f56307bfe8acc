"""One typed config per InfGen run (printed by ``iclr26 run infgen --show-config``).

TinyTown scales (smoke, small) and the paper scale (ScenarioNet files, official model sizes) share one
tree: the world / data fields are read only at the TinyTown scales, ``paper`` only at the paper scale.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from iclr26.core.experiment import ExperimentError
from iclr26.core.train import TrainConfig
from iclr26.infgen.generate import RolloutConfig
from iclr26.infgen.model import InfGenConfig
from iclr26.infgen.tokenizer import MotionTokenizer
from iclr26.infgen.training import paper_train_config
from iclr26.infgen.world import TinyTownConfig


@dataclass(frozen=True)
class DataConfig:
    """TinyTown data: training runs cut into windows, and one held-out long ground-truth run (``as_targets``
    applies at every scale).

    train_runs: simulated training runs per seed.
    run_seconds: length of each training run (s).
    long_seconds: length of the held-out ground-truth run (s).
    train_len: training window length (2 Hz steps; 11 = 5 s).
    stride: steps between training window starts.
    as_targets: <AS> training targets: "entries" (only agents entering the run at that block, the only ones
        generation samples; the existing ones are state-forced) or "all" (every agent, the official loss; the
        paper scale's setting).
    """

    train_runs: int = 1
    run_seconds: float = 720.0
    long_seconds: float = 600.0
    train_len: int = 11
    stride: int = 2
    as_targets: str = "entries"


@dataclass(frozen=True)
class EvalConfig:
    """Long rollouts and the window their statistics are taken over.

    horizon: rollout length (2 Hz steps; 240 = 120 s).
    eval_from: first step of the statistics window (120 = 60 s); statistics over [eval_from, horizon).
    n_scenes: TinyTown: seed windows per seed taken from the held-out run (insertion, no insertion, log-replay).
    n_learned: TinyTown: of those, seed windows also rolled out with learned EOS (our extension).
    """

    horizon: int = 240
    eval_from: int = 120
    n_scenes: int = 2
    n_learned: int = 1


@dataclass(frozen=True)
class PaperConfig:
    """Paper scale: a local ScenarioNet database (nothing downloads).

    data_dir: ScenarioNet dataset folder holding dataset_summary.pkl (required at paper scale).
    trust_pickles: opt in to unpickling the dataset's index-listed scenario files (a pickle can run code).
    limit: read at most this many scenarios (0 = all).
    n_eval: held-out scenarios rolled out (at most a tenth of the scenarios, at least one).
    count_sample: training scenes whose per-step agent counts give the released mode's density targets.
    cache: scenes each rank keeps in memory (scenes are read lazily, when a batch draws them).
    """

    data_dir: str = ""
    trust_pickles: bool = False
    limit: int = 0
    n_eval: int = 8
    count_sample: int = 256
    cache: int = 64


@dataclass(frozen=True)
class RunConfig:
    """Everything that changes a result of one InfGen run.

    world: TinyTown, the simulated intersection that stands in for WOMD (TinyTown scales).
    data: TinyTown training and ground-truth runs.
    motion: the motion-token grid (model.n_actions must be motion.n_bins squared).
    model: model sizes and switches (model.n_slots is also the tokenizer's agent-slot count).
    train: optimisation (core.train; progress and desc are set by the run).
    batch: sequences per optimiser step (per rank under torchrun).
    rollout: generation settings shared by all methods (insertion is set per method: released / off / learned).
    eval: rollout horizon and statistics window.
    threads: TinyTown scales: torch threads per seed (restored after the run).
    workers: TinyTown scales: seeds run in this many worker processes (the numbers do not depend on it); 3 at
        small scale, one per default seed, so on 2 cores the third seed shares them instead of running alone
        after the first two.
    paper: paper scale: the ScenarioNet data.
    """

    world: TinyTownConfig = TinyTownConfig()
    data: DataConfig = DataConfig()
    motion: MotionTokenizer = MotionTokenizer()
    model: InfGenConfig = InfGenConfig(d_model=64, n_dec_layers=2, n_slots=32, max_segments=128)
    train: TrainConfig = TrainConfig(steps=1000, lr=1e-3, weight_decay=0.0, warmup_steps=100, grad_clip=1.0)
    batch: int = 4
    rollout: RolloutConfig = RolloutConfig()
    eval: EvalConfig = EvalConfig()
    threads: int = 1
    workers: int = 3
    paper: PaperConfig = PaperConfig()


def config_for(scale: str) -> RunConfig:
    """small: the defaults; smoke: 80 s of data, a 13 x 13 motion grid, d 32, 6 steps, 20 s rollouts;
    paper: the official full-large model, optimisation and 128 agent slots, 120 s rollouts."""
    base = RunConfig()
    if scale == "smoke":
        return replace(
            base,
            data=replace(base.data, run_seconds=80.0, long_seconds=120.0),
            motion=replace(base.motion, n_bins=13),
            model=replace(base.model, d_model=32, n_dec_layers=1, n_actions=13 * 13),
            train=replace(base.train, steps=6, warmup_steps=1),
            eval=replace(base.eval, horizon=40, eval_from=20, n_scenes=1),
            workers=1,
        )
    if scale == "paper":
        return replace(
            base,
            data=replace(base.data, as_targets="all"),
            model=InfGenConfig.paper("large"),
            train=paper_train_config(100_000),
            rollout=replace(base.rollout, max_agents=120),
        )
    return base


def check_config(cfg: RunConfig) -> None:
    """Settings that must agree across the tree (a clear error instead of a shape mismatch later)."""
    if cfg.model.n_actions != cfg.motion.n_actions:
        raise ExperimentError(
            f"model.n_actions={cfg.model.n_actions} must be motion.n_bins**2 = {cfg.motion.n_actions}"
        )
    if cfg.train.warmup_steps > cfg.train.steps:
        raise ExperimentError(f"train.warmup_steps={cfg.train.warmup_steps} > train.steps={cfg.train.steps}")
    if not 0 <= cfg.eval.eval_from < cfg.eval.horizon:
        raise ExperimentError(f"need 0 <= eval.eval_from < eval.horizon, got {cfg.eval.eval_from}, {cfg.eval.horizon}")
