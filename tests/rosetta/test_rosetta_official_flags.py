"""Protocol flags where the official code differs from our first reading (each value tested):

stage machine ``afford`` names and ``cascade`` (official ``extract_from_content.build_actprim_funcs``), a round's
draft merged into ``{}`` or the previous functions (official ``rosetta_sh.py``: ``latest_funcs = {}``), reviews in
the coder's conversation or in fresh chats (``rosetta_sh.py`` vs ``rosetta_sh_nohistory.py``), the no_staging arm
with or without a plan call (``ablations/no_staging.py``), PPO's initial log std and the action the reward sees
(``short_horizon_learning/maniskill_ppo.py``: ``actor_logstd = -0.5``, ``envs.step(clip_action(action))``), and
the paper path's routing of annotation rows by environment (``run_exp/gen_config_dirs.parse_videoname``).
"""

from dataclasses import replace

import numpy as np
import pytest
import torch

from iclr26.core.experiment import ExperimentError, run_experiment
from iclr26.core.sandbox import SandboxServer
from iclr26.rosetta.backends import RoleRouter
from iclr26.rosetta.codegen import render_reward
from iclr26.rosetta.config import config_for
from iclr26.rosetta.env import EnvConfig, TabletopLite
from iclr26.rosetta.experiment import EXPERIMENT
from iclr26.rosetta.extract import assemble
from iclr26.rosetta.intent import Intent, make_preferences
from iclr26.rosetta.paper import FeedbackRow, route
from iclr26.rosetta.pipeline import ARMS, arm_config, demo_to_language, fenced, record_demo, rosetta_round
from iclr26.rosetta.ppo import PPOConfig, train_ppo
from iclr26.rosetta.prompts import REVIEW_QUESTIONS, REVIEW_ROLES
from iclr26.rosetta.smoke import SmokeRunner
from iclr26.rosetta.stage_machine import AFFORD_FORMS, build_stage_machine
from iclr26.rosetta.standin import ScriptedOfflineBackend, StandInConfig, oracle_functions

# ----------------------------------------------------------------------------------------- stage machine
STAGES = {
    f"compute_target_position_stage{k}": f"def compute_target_position_stage{k}(prev_info, cur_info):\n"
    f"    return cur_info['t{k}'], None"
    for k in (0, 1)
}
STAGES |= {
    f"compute_target_pos_reward_stage{k}": f"def compute_target_pos_reward_stage{k}(pos1, pos2, t1, t2):\n"
    "    return -np.minimum(np.linalg.norm(pos1 - t1, axis=1), 1.0)"
    for k in (0, 1)
}
STAGES |= {f"stage{k}_success": f"def stage{k}_success(info):\n    return info['s{k}']" for k in (0, 1)}


def _skill(cascade: bool, afford: str = "scaled"):
    src, _ = assemble(build_stage_machine(STAGES, [0, 1], afford=afford, cascade=cascade))
    n = 3
    info = {"t0": np.zeros((n, 3)), "t1": np.ones((n, 3))}
    info |= {"s0": np.array([True, True, False]), "s1": np.array([True, False, True])}
    act = np.zeros((n, 9))
    act[:, 0] = 1.0  # pick (stage 0's primitive) at stage 0's target: r0 = 0
    with SandboxServer(src) as srv:
        res = srv.call("skill_reward", info, info, act, np.zeros(n, dtype=int))
    assert res.ok, res.message
    return res.value


def test_stage_advance_cascades_only_with_the_flag():
    # env 0 completes stages 0 and 1 in this step; env 1 only stage 0; env 2 only stage 1 (not reached)
    r_on, st_on = _skill(cascade=True)
    r_off, st_off = _skill(cascade=False)
    np.testing.assert_array_equal(st_on, [2, 1, 0])  # official: sequential ifs on cur_stage
    np.testing.assert_array_equal(st_off, [1, 1, 0])
    # the reward is the one of the stage the step started in, in both modes: (1 + 0) * 5 + 10 * s0
    np.testing.assert_allclose(r_on, [15.0, 15.0, 5.0])
    np.testing.assert_allclose(r_off, r_on)


def test_afford_forms_are_named_by_content_not_by_source():
    assert AFFORD_FORMS == ("scaled", "penalised")
    for old in ("paper", "official"):
        with pytest.raises(ValueError, match="'penalised'"):
            build_stage_machine(STAGES, [0, 1], afford=old)
    default = build_stage_machine(STAGES, [0, 1])["skill_reward"]
    assert default == build_stage_machine(STAGES, [0, 1], afford="scaled", cascade=True)["skill_reward"]
    assert "(1.0 + r0) * 5.0" in default and "-1.0" not in default


# ----------------------------------------------------------------------------------------- pipeline
class Recorder:
    """Scripted stand-in that records (role, messages); ``code_only`` limits the code reply to those functions."""

    name = "recorder"

    def __init__(self, cfg: StandInConfig | None = None, code_only: tuple[str, ...] = ()) -> None:
        self.inner = ScriptedOfflineBackend(cfg or StandInConfig(), seed=3)
        self.code_only, self.calls = code_only, []

    def complete(self, role, messages):
        self.calls.append((role, [dict(m) for m in messages]))
        reply = self.inner.complete(role, messages)
        if role == "code" and self.code_only:
            from iclr26.rosetta.extract import extract_functions

            funcs = extract_functions(reply)
            reply = fenced({k: v for k, v in funcs.items() if k in self.code_only})
        return reply


@pytest.fixture(scope="module")
def runner():
    with SmokeRunner() as r:
        yield r


def _pref(kind: str):
    return next(p for p in make_preferences(16, seed=0, n_chains=0) if p.kind == kind)


def test_round2_draft_from_empty_needs_every_function(runner):
    prev = render_reward(Intent((("red_cube", "bin2"),)))
    pref = _pref("other_bin")
    out = {}
    for mode in ("empty", "previous"):
        rec = Recorder(StandInConfig(0, 0, 0, 0), code_only=("compute_dense_reward",))
        out[mode] = rosetta_round(
            RoleRouter(rec), pref, ARMS["no_follow_up"], task=pref.task, video="", prev_funcs=prev, runner=runner,
            draft_from=mode,
        )  # fmt: skip
    assert out["empty"].funcs == {} and out["empty"].failure == "incomplete draft: missing evaluate"
    assert out["previous"].funcs["evaluate"] == prev["evaluate"] and not out["previous"].failure
    with pytest.raises(ValueError, match="draft_from"):
        rosetta_round(RoleRouter(Recorder()), pref, ARMS["rosetta"], task="", video="", draft_from="prev")


def _review_calls(rec: Recorder):
    return [(role, msgs) for role, msgs in rec.calls if role in REVIEW_ROLES]


def test_reviews_in_the_coders_conversation_or_fresh(runner):
    pref = _pref("ordered")  # multi-stage: the premature-mask review has work to do
    buggy = StandInConfig(runtime_rate=0.0, missing_z_rate=1.0, dense_speed_rate=1.0, premature_mask_rate=1.0)
    res, recs = {}, {}
    for mode in ("fresh", "conversation"):
        recs[mode] = rec = Recorder(buggy)
        router = RoleRouter(rec)
        video = demo_to_language(router, record_demo(pref, 0), TabletopLite(1, EnvConfig(), 0).setup_description())
        res[mode] = rosetta_round(
            router, pref, ARMS["rosetta"], task=pref.task, video=video, runner=runner, review_context=mode
        )
    # the reviews repaired the injected bugs in both modes: the bug-free staged reward of the grounded intent
    assert res["fresh"].funcs == res["conversation"].funcs == oracle_functions(pref.intent)
    assert res["fresh"].draft_ok is True
    fresh, conv = _review_calls(recs["fresh"]), _review_calls(recs["conversation"])
    assert [r for r, _ in fresh] == [r for r, _ in conv] == list(REVIEW_ROLES)
    for _, msgs in fresh:  # a new chat each time, with the code, plan and request in it
        assert len(msgs) == 2 and "<code>" in msgs[1]["content"] and "<preference>" in msgs[1]["content"]
    code_request = next(m for r, m in recs["conversation"].calls if r == "code")
    for i, (role, msgs) in enumerate(conv):  # the coder's chat: request, code, then question/reply pairs
        assert msgs[: len(code_request)] == code_request
        assert msgs[len(code_request)]["role"] == "assistant" and "def evaluate" in msgs[len(code_request)]["content"]
        assert len(msgs) == len(code_request) + 2 + 2 * i
        assert msgs[-1] == {"role": "user", "content": REVIEW_QUESTIONS[role]}
    assert conv[1][1][-3]["content"] == REVIEW_QUESTIONS["review_geometry"]
    assert "tcp[:, :2]" in conv[0][1][len(code_request)]["content"]  # the draft's missing-z bug ...
    assert "tcp[:, :2]" not in conv[2][1][-2]["content"]  # ... fixed by the targets review's reply in the chat


def test_no_staging_without_a_plan_call(runner):
    pref = _pref("return_home")
    assert arm_config("no_staging") == ARMS["no_staging"] and ARMS["no_staging"].plan
    direct = arm_config("no_staging", no_staging_plan=False)
    assert direct == replace(ARMS["no_staging"], plan=False) and arm_config("rosetta", False) == ARMS["rosetta"]
    roles = {}
    for flag in (True, False):
        rec = Recorder(StandInConfig(0, 0, 0, 0))
        router = RoleRouter(rec)
        video = demo_to_language(router, record_demo(pref, 0), TabletopLite(1, EnvConfig(), 0).setup_description())
        res = rosetta_round(router, pref, arm_config("no_staging", flag), task=pref.task, video=video, runner=runner)
        roles[flag] = [r for r, _ in rec.calls]
        assert res.funcs and "prereq" not in res.funcs["compute_dense_reward"]  # unstaged either way
        code_msg = next(m for r, m in rec.calls if r == "code")[-1]["content"]
        assert ("<plan></plan>" in code_msg) is (not flag)
    assert "plan" in roles[True] and "plan" not in roles[False] and "ground" in roles[False]
    with pytest.raises(ValueError, match="unknown arm"):
        arm_config("no_plan")


def test_experiment_passes_the_pipeline_flags_to_every_arm():
    from iclr26.rosetta.experiment import _pref_rows
    from iclr26.rosetta.scoring import stacked_rollouts

    cfg = config_for("smoke")
    cfg = replace(cfg, pipeline=replace(cfg.pipeline, no_staging_plan=False, review_context="conversation"))
    router = RoleRouter(ScriptedOfflineBackend(StandInConfig(0, 0, 0, 0)))
    _pref_rows(router, _pref("other_bin"), cfg, 0, stacked_rollouts(2, 1, 101))
    calls = [r for r in router.records if "role" in r]
    assert {r["role"] for r in calls if r.get("arm") == "no_staging"} >= {"ground", "code"}
    assert not [r for r in calls if r.get("arm") == "no_staging" and r["role"] == "plan"]
    assert [r for r in calls if r.get("arm") == "no_grounding" and r["role"] == "plan"]
    reviews = [r for r in calls if r["role"] in REVIEW_ROLES]
    assert reviews and all(r["prompt"][-1]["content"] in REVIEW_QUESTIONS.values() for r in reviews)


def test_config_values_of_the_flags():
    small, paper = config_for("small").pipeline, config_for("paper").pipeline
    assert (small.draft_from, small.review_context, small.no_staging_plan) == ("empty", "fresh", True)
    assert paper.review_context == "conversation"


# ----------------------------------------------------------------------------------------- PPO
def _ppo(cfg: PPOConfig, seen: list):
    def reward_fn(state, action):
        seen.append(np.array(action))
        return np.zeros(action.shape[0])

    env_cfg = replace(EnvConfig(), episode_len=3)
    return train_ppo(lambda n: TabletopLite(n, env_cfg, 0), reward_fn, cfg, seed=0, episode_len=3)


def test_initial_log_std_and_the_action_the_reward_sees():
    base = PPOConfig(total_steps=12, num_envs=4, lr=0.0, update_epochs=1, num_minibatches=1)
    raw, clipped = [], []
    ac = _ppo(replace(base, init_log_std=1.0, reward_action="raw"), raw)
    _ppo(replace(base, init_log_std=1.0), clipped)
    assert torch.allclose(ac.log_std, torch.full((4,), 1.0))  # lr 0: still the initial value
    off = _ppo(replace(base, init_log_std=-0.5, reward_action="raw"), [])
    assert torch.allclose(off.log_std, torch.full((4,), -0.5))  # the official initial value
    raw, clipped = np.stack(raw), np.stack(clipped)
    assert np.abs(raw).max() > 1.0  # std e^1: raw Gaussian samples leave the box
    np.testing.assert_array_equal(clipped, np.clip(raw, -1.0, 1.0))  # same seed, same samples, clipped
    assert PPOConfig().reward_action == "clipped" and PPOConfig().init_log_std == 0.0
    with pytest.raises(ValueError, match="reward_action"):
        _ppo(replace(base, reward_action="box"), [])


# ----------------------------------------------------------------------------------------- paper path
def _row(video: str) -> FeedbackRow:
    return FeedbackRow("t", "", "demo", video, "", "Reverse the order.")


def test_rows_route_by_environment_name():
    assert _row("-SphereAndBins-4ebb1fc87b6b0ebf").env_name == "SphereAndBins"
    assert _row("alice-ThreeCubes--6fb30b0782aa5155-6fb30b0782aa5155").env_name == "ThreeCubes"
    assert _row("demo-SphereAndBins-aa").env_name == "SphereAndBins"  # annotator prefix, official parse
    assert route(_row("-SphereAndBins-aa")) == ("TabletopLite", "")
    env, why = route(_row("-ThreeCubes--6fb30b0782aa5155-6fb30b0782aa5155"))
    assert env is None and "'ThreeCubes' is a long-horizon task" in why
    env, why = route(_row("-BallAndTarget-aa"))
    assert env is None and "no stand-in" in why
    assert route(_row("nothing"))[0] is None


HEADER = (
    '"Timestamp","Score","What\'s your name?","Which video are you giving feedback for?","Describe the video",'
    '"Give feedback."\n'
)


def test_paper_run_refuses_rows_of_unavailable_environments(tmp_path):
    import json

    body = (
        "1/15/2025 21:04:54,,demo,-ThreeCubes--6fb30b0782aa5155-6fb30b0782aa5155,,Reverse the order.\n"
        '1/15/2025 21:05:10,4,demo,-SphereAndBins-aa,"Put the red cube into bin1.",Not that one.\n'
    )
    csv = tmp_path / "preference.csv"
    csv.write_text(HEADER + body, encoding="utf-8")
    opts = {"feedback_csv": str(csv), "backend.kind": "scripted"}
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", show_progress=False, options=opts)
    out = [json.loads(x) for x in (rec.out_dir / "rewards.jsonl").read_text().splitlines()]
    assert out[0]["functions"] == {} and out[0]["failure"].startswith("refused: environment 'ThreeCubes'")
    assert out[1]["functions"] and out[1]["ran_in"] == "TabletopLite" and out[1]["env"] == "SphereAndBins"
    calls = [json.loads(x) for x in (rec.out_dir / "transcript.jsonl").read_text().splitlines()]
    assert calls and all(c.get("row") == 1 for c in calls if "role" in c)  # no model call for the refused row
    assert rec.results["metrics"]["refused_rows"] == 1
    reviews = [c for c in calls if c.get("role") == "review_masking"]  # paper scale: the official conversation
    assert reviews and reviews[0]["prompt"][-1]["content"] == REVIEW_QUESTIONS["review_masking"]
    csv.write_text(HEADER + body.splitlines(keepends=True)[0], encoding="utf-8")
    with pytest.raises(ExperimentError, match="no row can run here"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs2", show_progress=False, options=opts)
