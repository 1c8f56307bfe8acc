"""Paper-scale path: RGSD on a vectorised environment with references from a local .npz.

    iclr26 run rgsd --scale paper --set refs_path=/data/refs.npz --set env_id=Humanoid-v5 --set device=cuda

* ``env_id=puppet``: :class:`~iclr26.rgsd.wrapper.PuppetVectorEnv` (RSI supported);
* any other id: ``gymnasium.make_vec(env_id, num_envs=ppo.n_envs)`` (MuJoCo ``Humanoid-v5`` needs the
  ``mujoco`` package; RSI is off unless the environment exposes ``set_reference_state``; the early exit uses
  the RMS feature distance to the time-aligned reference frame).

The references' width must equal the environment's observation width (the encoder reads observations).
For SMPL + AMASS in Isaac Lab or rsl_rl, export the reference clips through the environment's own
observation function into this .npz and wrap the Isaac Lab vector env (same five calls); multi-GPU runs
start one process per GPU under ``torchrun`` and average PPO gradients across ranks (``average_gradients``).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import torch

from iclr26.core.experiment import ExperimentError, RunContext, RunOutput

from .config import RunConfig
from .encoder import RGSDEncoder, contrastive_pretrain, motion_embeddings, reward_auc
from .ppo import ActorCritic, gae, ppo_update
from .reward import RGSDReward
from .wrapper import PuppetVectorEnv, RGSDVecEnvWrapper, load_reference_npz

__all__ = ["average_gradients", "make_vec_env", "run_paper", "train_wrapped"]


def average_gradients(module: torch.nn.Module) -> None:
    """All-reduce and average gradients over torch.distributed ranks (a no-op in one process)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    world = torch.distributed.get_world_size()
    for p in module.parameters():
        if p.grad is not None:
            torch.distributed.all_reduce(p.grad)
            p.grad /= world


def make_vec_env(cfg: RunConfig, n_envs: int):
    """The vector env named by ``cfg.env_id`` and its RSI hook (or None)."""
    if cfg.env_id == "puppet":
        from .puppet import make_references

        env = PuppetVectorEnv(cfg.puppet, n_envs, make_references(cfg.puppet), cfg.ppo.episode_len)
        return env, env.set_reference_state, PuppetVectorEnv.__name__
    try:
        import gymnasium
    except ImportError:
        raise ExperimentError(f"env_id={cfg.env_id} needs gymnasium (pip install 'gymnasium[mujoco]')") from None
    env = gymnasium.make_vec(cfg.env_id, num_envs=n_envs, vectorization_mode="sync")
    return env, getattr(env, "set_reference_state", None), cfg.env_id


def train_wrapped(
    wrapped: RGSDVecEnvWrapper,
    ac: ActorCritic,
    cfg: RunConfig,
    seed: int,
    iterations: int,
    act_low: float = -1.0,
    act_high: float = 1.0,
    log=None,
) -> list[dict[str, float]]:
    """PPO on the wrapper's RGSD reward (discovery encoder updated on discovery transitions each iteration)."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(ac.parameters(), lr=cfg.ppo.lr)
    dopt = torch.optim.Adam(wrapped.reward_fn.disc.parameters(), lr=cfg.method.disc_lr)
    obs, _ = wrapped.reset(seed=seed)
    hist = []
    for it in range(iterations):
        xs, acts, logps, vals, rews, dones, s2s, zs, imits = [], [], [], [], [], [], [], [], []
        for _ in range(cfg.ppo.n_steps):
            x = torch.cat([obs, wrapped.z], -1)
            a, logp, v = ac.act(x, generator=gen)
            z, imit = wrapped.z.clone(), wrapped.imitate.clone()
            obs, r, term, trunc, _ = wrapped.step(a.clamp(act_low, act_high).numpy())
            for lst, val in zip(
                (xs, acts, logps, vals, rews, dones, s2s, zs, imits), (x, a, logp, v, r, term | trunc, obs, z, imit)
            ):
                lst.append(val)
        with torch.no_grad():
            last_v = ac.value(torch.cat([obs, wrapped.z], -1))
        adv, ret = gae(torch.stack(rews), torch.stack(vals), torch.stack(dones), last_v, cfg.ppo.gamma, cfg.ppo.lam)
        flat = lambda t: t.reshape(-1, *t.shape[2:])  # noqa: E731
        st = ppo_update(
            ac,
            opt,
            flat(torch.stack(xs)),
            flat(torch.stack(acts)),
            flat(torch.stack(logps)),
            flat(adv),
            flat(ret),
            cfg.ppo,
            gen,
            grad_hook=average_gradients,
        )
        disc = ~flat(torch.stack(imits))
        if bool(disc.any()):
            s2 = flat(torch.stack(s2s))
            loss, dst = wrapped.reward_fn.disc_loss(s2[disc], flat(torch.stack(zs))[disc], s2)
            dopt.zero_grad()
            loss.backward()
            average_gradients(wrapped.reward_fn.disc)
            dopt.step()
            st.update(dst)
        st["reward"] = float(torch.stack(rews).mean())
        hist.append(st)
        if log is not None:
            log(it, **{k: v for k, v in st.items() if math.isfinite(v)})
    return hist


def run_paper(ctx: RunContext, cfg: RunConfig) -> RunOutput:
    """Pretrain on the local references, wrap the env, train PPO; save the encoder and policy."""
    path = ctx.require_path("refs_path")
    env, rsi, name = make_vec_env(cfg, cfg.ppo.n_envs)
    obs_dim = int(
        np.prod(getattr(env, "single_observation_space", None).shape)
        if hasattr(env, "single_observation_space")
        else env.single_observation_dim
    )
    act_dim = int(
        np.prod(env.single_action_space.shape) if hasattr(env, "single_action_space") else env.single_action_dim
    )
    try:
        clip_names, motions = load_reference_npz(path, obs_dim)
    except ValueError as exc:
        raise ExperimentError(str(exc)) from None
    seed = ctx.seeds[0]
    torch.manual_seed(seed)
    enc = RGSDEncoder(obs_dim, cfg.method.k, cfg.method.encoder_hidden)
    p = cfg.pretrain
    stats = contrastive_pretrain(
        enc,
        motions,
        cfg.method.kappa,
        steps=p.steps,
        motions_per_batch=p.motions_per_batch,
        pairs_per_motion=p.pairs_per_motion,
        lr=p.lr,
        seed=seed,
        target_intra_cos=p.target_intra_cos,
        mask_same_motion=p.mask_same_motion,
        log=ctx.logger("pretrain"),
    )
    z_refs = motion_embeddings(enc, motions)
    m = cfg.method
    scale = m.reward_scale if m.reward_scale is not None else 1.0 / (2.0 * m.kappa)
    reward = RGSDReward(enc, m.kappa, m.beta, m.reward_offset, scale)
    wrapped = RGSDVecEnvWrapper(env, reward, motions, z_refs, m.p, m.early_exit_eps, seed=seed, rsi_fn=rsi)
    ac = ActorCritic(obs_dim, m.k, act_dim, cfg.ppo.hidden, cfg.ppo.init_log_std)
    hist = train_wrapped(wrapped, ac, cfg, seed, cfg.ppo.iterations, log=ctx.logger("ppo"))
    if int(os.environ.get("RANK", "0")) == 0:
        torch.save(
            {
                "encoder": enc.state_dict(),
                "disc": reward.disc.state_dict(),
                "policy": ac.state_dict(),
                "z_refs": z_refs,
                "clips": clip_names,
            },
            ctx.out_dir / "rgsd_checkpoint.pt",
        )
    auc = reward_auc(reward.imitation_reward, motions, z_refs)
    measured: dict[str, Any] = {"C1": {"intra_cos": stats["intra_cos"], "inter_cos": stats["inter_cos"], "auc": auc}}
    return RunOutput(
        metrics={"env": name, "pretrain": stats, "final": hist[-1] if hist else {}},
        measured=measured,
        notes=[f"paper-scale run on {name} with {len(motions)} reference clips from {path.name}"],
    )
