"""Paper-scale path: annotator feedback CSV -> one ROSETTA round per row with real backends per role.

The CSV is the official annotation form's export (``demo/preference.csv`` in the official repository):
six columns, in order: Timestamp, Score, annotator name, video id, video description, feedback (the
header cells are the form's long questions; we match them by their first words). The video id names
the environment (e.g. ``-SphereAndBins-4ebb1fc87b6b0ebf``; official ``gen_config_dirs.parse_videoname``:
the uid follows the last hyphen, the environment is the first hyphen-separated part with a capital letter).

Each row is routed by its environment (:data:`ROUTES`): only environments with a stand-in here run, i.e.
``SphereAndBins`` (short horizon: one object into one of two bins) on :class:`TabletopLite`. A row naming
any other environment (``ThreeCubes``, ``ObjectsAndBins``, ``ObjectsAndDrawer``: long horizon with action
primitives and the stage machine; ``BallAndTarget``, ``CubeAndPoint``, ...: other scenes) is refused with
its reason in ``rewards.jsonl`` and no model call, instead of being rewritten into a TabletopLite task; a
file whose rows are all refused stops the run with a one-line error.

For each routed row the pipeline runs with the configured backends; the demo description is, in order of
preference, ``demo_dir/<video id>.txt`` (numeric state strings, one per kept frame, captioned by the
``caption`` role) or the row's description. Outputs: ``rewards.jsonl`` (one line per row: functions or
``{}`` with the reason) and the transcript.

The functions are written against TabletopLite's contract (``evaluate(state)``,
``compute_dense_reward(state, action, info)`` on the plain state dict of :meth:`TabletopLite.state`): they
load into this package's sandbox (:class:`~iclr26.rosetta.smoke.SmokeRunner`, the PPO of :mod:`.ppo`), not
into a ManiSkill environment, whose methods (``evaluate(self)``, ``compute_dense_reward(self, obs, action,
info)``) read the simulator's actors; ManiSkill training with the official settings is not part of this
package.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path

from iclr26.core.experiment import ExperimentError, RunContext, RunOutput

from .backends import HFBackend, OpenAICompatBackend, RoleRouter
from .config import BackendConfig, RunConfig

__all__ = ["CSV_COLUMNS", "ROUTES", "FeedbackRow", "make_router", "read_feedback_csv", "route", "run_paper"]

CSV_COLUMNS = ("Timestamp", "Score", "What's your name", "Which video", "Describe the video", "Give feedback")
CODE_ROLES = ("code", "review_geometry", "review_targets", "review_density", "review_masking", "fix_error")

ROUTES = {"SphereAndBins": "TabletopLite"}
"""Official environment -> the environment its rows run in here (short horizon only)."""
_LONG_HORIZON = ("ThreeCubes", "ObjectsAndBins", "ObjectsAndDrawer")


@dataclass(frozen=True)
class FeedbackRow:
    """One annotation: timestamp, score ('' when not given), annotator, video id, description, feedback."""

    timestamp: str
    score: str
    name: str
    video: str
    description: str
    feedback: str

    @property
    def env_name(self) -> str:
        """The environment in the video id (official ``parse_videoname``: uid after the last hyphen, then
        the first hyphen-separated part with a capital letter; "" when there is none)."""
        head = self.video.rsplit("-", 1)[0] if "-" in self.video else ""
        return next((p for p in head.split("-") if any(c.isupper() for c in p)), "")


def route(row: FeedbackRow) -> tuple[str | None, str]:
    """(environment to run the row in, "") or (None, why the row is refused)."""
    env = row.env_name
    if env in ROUTES:
        return ROUTES[env], ""
    if not env:
        return None, f"refused: no environment name in video id {row.video!r}"
    kind = (
        "a long-horizon task (action primitives, stage machine)"
        if env in _LONG_HORIZON
        else "a scene with no stand-in here"
    )
    return None, (
        f"refused: environment {env!r} is {kind}; this path runs rows of {', '.join(sorted(ROUTES))} only "
        "(on TabletopLite), so the row is not rewritten into another task"
    )


def read_feedback_csv(path: str | Path) -> list[FeedbackRow]:
    """Rows of an annotator CSV; a malformed header or row raises ValueError naming it (one line)."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or len(header) < len(CSV_COLUMNS):
            raise ValueError(f"{path}: header has {0 if header is None else len(header)} columns, expected 6")
        for i, (cell, want) in enumerate(zip(header, CSV_COLUMNS)):
            if not cell.strip().startswith(want):
                raise ValueError(f"{path}: column {i + 1} is {cell[:40]!r}, expected one starting {want!r}")
        rows = []
        for n, row in enumerate(reader, start=2):
            if not any(c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise ValueError(f"{path}: row {n} has {len(row)} cells, expected {len(header)}")
            r = FeedbackRow(*[c.strip() for c in row[:6]])
            if not r.video or not r.feedback:
                raise ValueError(f"{path}: row {n} has an empty video id or feedback")
            if r.score and not r.score.lstrip("-").replace(".", "", 1).isdigit():
                raise ValueError(f"{path}: row {n} has a non-numeric score {r.score!r}")
            rows.append(r)
    return rows


def make_router(cfg: BackendConfig, transcript: str | Path | None = None) -> RoleRouter:
    """Backends per role: grounding/planning on ``model``, code/reviews/fixes on ``code_model``."""
    if cfg.kind == "openai":
        if not cfg.base_url:
            raise ExperimentError("backend.kind=openai needs --set backend.base_url=http://HOST:PORT/v1")
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
        main = OpenAICompatBackend(cfg.base_url, cfg.model, key, cfg.deadline_s)
        coder = OpenAICompatBackend(cfg.base_url, cfg.code_model or cfg.model, key, cfg.deadline_s)
        return RoleRouter(main, {r: coder for r in CODE_ROLES}, transcript)
    if cfg.kind == "hf":
        from iclr26.core.checkpoints import CheckpointError, resolve_model_dir

        try:  # a registered name (``iclr26 models``, e.g. smollm2-135m-instruct) -> its local folder
            path = resolve_model_dir(cfg.hf_path) if cfg.hf_path else ""
        except CheckpointError as e:
            raise ExperimentError(f"backend.hf_path={cfg.hf_path}: {e}") from e
        if not path or not Path(path).is_dir():
            raise ExperimentError(
                "backend.kind=hf needs --set backend.hf_path=LOCAL_DIR or a name from `iclr26 models` "
                f"(got {cfg.hf_path!r})"
            )
        return RoleRouter(HFBackend(path, max_new_tokens=cfg.max_new_tokens), transcript=transcript)
    from .standin import ScriptedOfflineBackend

    return RoleRouter(ScriptedOfflineBackend(), transcript=transcript)


def _video_text(router: RoleRouter, row: FeedbackRow, demo_dir: str, scene: str) -> str:
    from .prompts import build

    path = Path(demo_dir) / f"{row.video}.txt" if demo_dir else None
    if path is None or not path.exists():
        return row.description
    frames = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    caps = [router.complete("caption", build("caption", scene=scene, state=f)) for f in frames]
    return "\n".join(f"state_{i}: {c}" for i, c in enumerate(caps))


def run_paper(ctx: RunContext, cfg: RunConfig) -> RunOutput:
    """One rosetta round per CSV row; rewards and verdicts to the run folder."""
    from .backends import BackendError
    from .env import TabletopLite
    from .intent import Intent, Preference
    from .pipeline import ARMS, rosetta_round

    path = ctx.require_path("feedback_csv")
    try:
        rows = read_feedback_csv(path)
    except ValueError as e:
        raise ExperimentError(str(e)) from e
    routes = [route(r) for r in rows]
    if rows and all(env is None for env, _ in routes):
        raise ExperimentError(f"{path}: no row can run here; first row: {routes[0][1]}")
    router = make_router(cfg.backend, Path(ctx.out_dir) / "transcript.jsonl")
    scene = TabletopLite(1, cfg.env, 0).setup_description()
    out_rows, usable = [], 0
    for i, row in enumerate(ctx.progress(rows, total=len(rows), desc="preferences")):
        env, why = routes[i]
        if env is None:
            refused = {"row": i, "video": row.video, "env": row.env_name, "feedback": row.feedback}
            out_rows.append({**refused, "functions": {}, "failure": why, "fix_calls": 0})
            continue
        router.context = {"row": i, "video": row.video}
        pref = Preference(f"row{i}", row.env_name, row.feedback, row.description, Intent(()), Intent(()))
        try:
            video = _video_text(router, row, cfg.demo_dir, scene)
        except BackendError as e:
            video = row.description
            router.log({"event": "caption_failed", "error": str(e)})
        res = rosetta_round(
            router,
            pref,
            ARMS["rosetta"],
            task=row.description,
            video=video,
            tries=cfg.pipeline.error_tries,
            isolation=cfg.pipeline.isolation or None,
            draft_from=cfg.pipeline.draft_from,
            review_context=cfg.pipeline.review_context,
        )
        usable += bool(res.funcs)
        out_rows.append(
            {
                "row": i,
                "video": row.video,
                "env": row.env_name,
                "ran_in": env,
                "feedback": row.feedback,
                "grounded": res.grounded,
                "next_description": res.next_description,
                "functions": res.funcs,
                "failure": res.failure,
                "fix_calls": res.fix_calls,
            }
        )
    with (Path(ctx.out_dir) / "rewards.jsonl").open("w", encoding="utf-8") as f:
        for r in out_rows:
            f.write(json.dumps(r) + "\n")
    metrics = {
        "rows": len(rows),
        "refused_rows": sum(env is None for env, _ in routes),
        "usable_rewards": usable,
        "failures": [r["failure"] for r in out_rows if r["failure"]],
    }
    return RunOutput(metrics=metrics, measured={}, notes=["paper scale: claims are measured at small scale only"])
