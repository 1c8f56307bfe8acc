"""The registered experiment (smoke), its claims' rules, bad settings, and the paper-scale wrapper path."""

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from iclr26.core.experiment import ExperimentError, run_experiment
from iclr26.rgsd.config import config_for
from iclr26.rgsd.encoder import RGSDEncoder, motion_embeddings
from iclr26.rgsd.experiment import CLAIMS, EXPERIMENT, validate_config
from iclr26.rgsd.ppo import ActorCritic
from iclr26.rgsd.puppet import PuppetConfig, PuppetWorld, make_references
from iclr26.rgsd.reward import RGSDReward
from iclr26.rgsd.wrapper import PuppetVectorEnv, RGSDVecEnvWrapper, load_reference_npz, save_reference_npz

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_smoke_run_end_to_end(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert {c["name"] for c in res["claims"]} == {"C1", "C2", "C3"}
    m = res["metrics"]
    assert "competence_gate" in m and isinstance(m["competence_gate"]["passed"], bool)
    for arm in ("rgsd", "imitation", "diayn", "metra"):
        assert np.isfinite(m["err"][arm]["mean"])
    c1 = next(c for c in res["claims"] if c["name"] == "C1")["measured"]
    # pretraining separation (sanity at smoke scale): inter-motion cosine well below intra-motion cosine
    assert c1["inter_cos"] < c1["intra_cos"] - 0.3
    assert set(m["discovery"]["rgsd"]) == {"1000", "100", "20", "uniform"}
    assert (rec.out_dir / "root_paths_per_kappa.png").exists()
    assert 0.0 <= m["metra_cycle_ratio"]["mean"] <= 1.0


def test_smoke_is_deterministic(tmp_path):
    cfg = config_for("smoke")
    opts = {"ppo.iterations": "1", "eval.best_of": "2", "pretrain.steps": "20"}
    a = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path / "a", show_progress=False, options=opts)
    b = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path / "b", show_progress=False, options=opts)
    assert a.results["metrics"]["err"] == b.results["metrics"]["err"]
    assert cfg.workers == 1


def _c2(**kw):
    base = {"gate": True, "err_rgsd": 1.0, "err_diayn_best": 2.5, "err_metra_best": 3.0, "err_hold": 3.0}
    return {**base, **kw}


def _c3(**kw):
    base = {
        "gate": True,
        "diversity_rgsd": {"1000": 0.1, "100": 0.2, "20": 0.3},
        "realise_rgsd_k20": 0.6,
        "realise_imitation_k20": 0.5,
        "seeds_rgsd_better_k20": 2,
        "seeds_needed": 2,
    }
    return {**base, **kw}


def test_claim_rules():
    c1, c2, c3 = CLAIMS
    assert c1.check({"intra_cos": 0.95, "inter_cos": 0.1, "auc": 0.99})
    assert not c1.check({"intra_cos": 0.85, "inter_cos": 0.1, "auc": 0.99})
    assert not c1.check({"intra_cos": 0.95, "inter_cos": 0.6, "auc": 0.99})
    assert not c1.check({"intra_cos": 0.95, "inter_cos": 0.1, "auc": 0.9})
    assert c2.check(_c2())
    assert not c2.check(_c2(err_rgsd=1.3))  # 1.3 > 0.5 * 2.5
    assert not c2.check(_c2(gate=False))
    assert c3.check(_c3())
    assert not c3.check(_c3(diversity_rgsd={"1000": 0.1, "100": 0.3, "20": 0.2}))
    assert not c3.check(_c3(realise_rgsd_k20=0.4))
    assert not c3.check(_c3(seeds_rgsd_better_k20=1))
    assert not c3.check(_c3(gate=False))


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("method.kappa", "0", "kappa"),
        ("method.p", "1.5", r"method.p=1.5: must be in \[0"),
        ("method.kappa", "-2", "kappa"),
    ],
)
def test_bad_settings_raise_before_training(tmp_path, key, value, match):
    with pytest.raises(ValueError, match=match):
        run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False, options={key: value})


def test_validate_config_arms_and_refs():
    cfg = config_for("smoke")
    with pytest.raises(ExperimentError, match="unknown arms"):
        validate_config(replace(cfg, arms=("rgsd", "ase")))
    with pytest.raises(ExperimentError, match="two reference"):
        validate_config(replace(cfg, puppet=replace(cfg.puppet, references=("walk_slow",))))


def test_npz_loader_format_and_errors(tmp_path):
    refs = make_references(PuppetConfig(references=("walk_slow", "punch", "turn")))
    path = save_reference_npz(tmp_path / "refs.npz", refs)
    names, motions = load_reference_npz(path, PuppetWorld.obs_dim)
    assert names == ["punch", "turn", "walk_slow"]
    assert all(m.shape == (80, PuppetWorld.obs_dim) and m.dtype == torch.float32 for m in motions)
    bad = {
        "nan": {"a": np.full((5, 27), np.nan, np.float32), "b": np.zeros((5, 27), np.float32)},
        "width": {"a": np.zeros((5, 27), np.float32), "b": np.zeros((5, 30), np.float32)},
        "one": {"a": np.zeros((5, 27), np.float32)},
        "short": {"a": np.zeros((1, 27), np.float32), "b": np.zeros((5, 27), np.float32)},
    }
    match = {"nan": "NaN", "width": "features", "one": "at least two", "short": "two frames"}
    for name, arrays in bad.items():
        p = tmp_path / f"{name}.npz"
        np.savez(p, **arrays)
        with pytest.raises(ValueError, match=match[name]) as info:
            load_reference_npz(p, 27)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="does not exist"):
        load_reference_npz(tmp_path / "missing.npz")


def _wrapped(refs, n=8, p=0.5, eps=0.05, rsi=True):
    env = PuppetVectorEnv(PuppetConfig(references=tuple(r.name for r in refs)), n, refs, episode_len=30)
    motions = [r.obs for r in refs]
    enc = RGSDEncoder(PuppetWorld.obs_dim, 8, (32,))
    z = motion_embeddings(enc, motions)
    rew = RGSDReward(enc, 10.0, scale=0.05)
    return RGSDVecEnvWrapper(env, rew, motions, z, p, eps, seed=0, rsi_fn=env.set_reference_state if rsi else None)


def test_wrapper_on_puppet_rsi_reward_and_early_exit():
    refs = make_references(PuppetConfig(references=("walk_slow", "punch", "turn")))
    w = _wrapped(refs)
    obs, _ = w.reset(seed=0)
    for i in range(w.n):  # RSI: every reset state is the drawn reference frame
        assert torch.equal(obs[i], refs[int(w.ref[i])].obs[int(w.t[i])])
    g = torch.Generator().manual_seed(0)
    saw_exit = False
    prev_done = torch.zeros(w.n, dtype=torch.bool)
    for _ in range(25):
        imit, z = w.imitate.clone(), w.z.clone()
        a = torch.rand(w.n, PuppetWorld.act_dim, generator=g) * 2 - 1
        obs, r, term, trunc, info = w.step(a.numpy())
        expected = w.reward_fn.reward(obs, z, imit)
        assert torch.allclose(r[~prev_done], expected[~prev_done], atol=1e-6)
        assert bool((r[prev_done] == 0).all())  # next-step autoreset transition: no reward
        prev_done = term | trunc
        assert not bool((info["early_exit"] & ~imit).any())  # early exit only in imitation episodes
        saw_exit |= bool(info["early_exit"].any())
    assert saw_exit  # random actions leave the reference within a few steps at ε = 0.05


def test_wrapper_train_loop_runs():
    from iclr26.rgsd.paper import train_wrapped

    refs = make_references(PuppetConfig(references=("walk_slow", "punch")))
    w = _wrapped(refs, n=4)
    cfg = config_for("smoke")
    cfg = replace(cfg, ppo=replace(cfg.ppo, n_steps=6, epochs=1, minibatches=1))
    ac = ActorCritic(PuppetWorld.obs_dim, 8, PuppetWorld.act_dim, (16,))
    hist = train_wrapped(w, ac, cfg, seed=0, iterations=2)
    assert len(hist) == 2 and all(np.isfinite(h["reward"]) for h in hist)


def test_paper_scale_on_npz_fixture(tmp_path):
    refs = make_references(PuppetConfig())
    path = save_reference_npz(tmp_path / "refs.npz", refs)
    opts = {
        "refs_path": str(path),
        "env_id": "puppet",
        "ppo.n_envs": "4",
        "ppo.iterations": "1",
        "ppo.n_steps": "4",
        "ppo.hidden": "16",
        "method.encoder_hidden": "16",
        "pretrain.steps": "20",
    }
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path, show_progress=False, options=opts)
    assert (rec.out_dir / "rgsd_checkpoint.pt").exists()
    assert np.isfinite(rec.results["claims"][0]["measured"]["auc"])
    with pytest.raises(ExperimentError, match="refs_path"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path, show_progress=False, options={"env_id": "puppet"})


def test_wrapper_on_mujoco_if_installed():
    gym = pytest.importorskip("gymnasium")
    pytest.importorskip("mujoco")
    pytest.importorskip("imageio")  # gymnasium's MuJoCo envs import it
    env = gym.make_vec("Hopper-v5", num_envs=2, vectorization_mode="sync")
    obs_dim = env.single_observation_space.shape[0]
    g = torch.Generator().manual_seed(0)
    motions = [torch.randn(10, obs_dim, generator=g) for _ in range(3)]
    enc = RGSDEncoder(obs_dim, 4, (16,))
    w = RGSDVecEnvWrapper(env, RGSDReward(enc, 5.0), motions, motion_embeddings(enc, motions), 0.5, 1e9, seed=0)
    obs, _ = w.reset(seed=0)
    assert obs.shape == (2, obs_dim)
    for _ in range(5):
        obs, r, term, trunc, _ = w.step(np.zeros((2, env.single_action_space.shape[0]), np.float32))
        assert r.shape == (2,) and torch.isfinite(r).all()
    env.close()


@pytest.mark.slow
def test_small_claim_run(tmp_path):
    """The `small` claim run (minutes): every claim measured, the gate recorded, env steps/s reported."""
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    assert all(c.measured is not None for c in rec.claims)
    m = rec.results["metrics"]
    assert isinstance(m["competence_gate"]["passed"], bool)
    assert m["env_steps_per_arm"] == 128 * 40 * 100
    assert m["env_steps_per_second"]["mean"] > 0
