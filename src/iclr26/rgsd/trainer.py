"""Phase-2 training of one arm on PuppetWorld (RGSD Sec. 3.4 pseudocode) and the evaluation rollouts.

Arms share the environment, PPO, budget and reference state initialisation (RSI):

* ``rgsd``: imitation stream (frozen q_φ reward, early exit) with probability p, discovery stream
  (trainable copy q_φ' with the KL anchor) otherwise;
* ``imitation``: RGSD with p = 1 (latent-feature imitation only; the ASE/CALM stand-in);
* ``diayn``: vMF discriminator from scratch, z uniform on the sphere;
* ``metra``: METRA's φ and dual λ, z uniform on the sphere.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from .config import RunConfig
from .encoder import RGSDEncoder, motion_embeddings
from .ppo import ActorCritic, gae, ppo_update
from .puppet import PuppetWorld, Reference, keypoints_local, keypoints_world
from .reward import METRA, DIAYNDiscriminator, RGSDLatentSampler, RGSDReward, early_exit

ARMS = ("rgsd", "imitation", "diayn", "metra")

__all__ = ["ARMS", "RefBank", "TrainedArm", "build_arm", "rollout_from_first_frame", "train_arm"]


class RefBank:
    """The reference clips stacked for vectorised RSI and tracking: [K, T, ...] tensors."""

    def __init__(self, refs: list[Reference]):
        lengths = {len(r) for r in refs}
        if len(lengths) != 1:
            raise ValueError("PuppetWorld references must share one clip length")
        self.refs = refs
        self.T = lengths.pop()
        self.obs = torch.stack([r.obs for r in refs])
        self.q = torch.stack([r.q for r in refs])
        self.qd = torch.stack([r.qd for r in refs])
        self.root = torch.stack([r.root for r in refs])
        K, T, J = self.q.shape
        self.kp_local = keypoints_local(self.q.reshape(K * T, J)).reshape(K, T, -1, 3)
        self.kp_world = keypoints_world(self.q.reshape(K * T, J), self.root.reshape(K * T, 3)).reshape(K, T, -1, 3)


@dataclass
class TrainedArm:
    """A trained arm: its policy, its skill module (RGSD reward, DIAYN or METRA), and training curves."""

    arm: str
    policy: ActorCritic
    module: nn.Module | None
    z_refs: torch.Tensor | None
    curves: list[dict[str, float]] = field(default_factory=list)
    env_steps: int = 0


def _scale(cfg: RunConfig) -> float:
    m = cfg.method
    return m.reward_scale if m.reward_scale is not None else 1.0 / (2.0 * m.kappa)


def build_arm(arm: str, cfg: RunConfig, obs_dim: int, encoder: RGSDEncoder | None, z_refs: torch.Tensor | None):
    """The arm's skill module and its stream probability p (imitation share)."""
    m = cfg.method
    if arm in ("rgsd", "imitation"):
        if encoder is None or z_refs is None:
            raise ValueError(f"arm '{arm}' needs the pretrained encoder and motion embeddings")
        mod = RGSDReward(encoder, m.kappa, m.beta, m.reward_offset, _scale(cfg))
        return mod, (m.p if arm == "rgsd" else 1.0)
    if arm == "diayn":
        fresh = RGSDEncoder(obs_dim, m.k, m.encoder_hidden)
        return DIAYNDiscriminator(fresh, m.kappa, m.reward_offset, _scale(cfg)), 0.0
    if arm == "metra":
        return METRA(obs_dim, m.k, m.encoder_hidden, cfg.metra.eps, cfg.metra.lam_init), 0.0
    raise ValueError(f"unknown arm '{arm}'; known: {', '.join(ARMS)}")


class _Envs:
    """PuppetWorld plus per-env skill, stream, reference and clock (auto-reset with RSI)."""

    def __init__(self, cfg: RunConfig, bank: RefBank, sampler: RGSDLatentSampler):
        self.env = PuppetWorld(cfg.puppet, cfg.ppo.n_envs)
        self.bank, self.sampler, self.cfg = bank, sampler, cfg
        n, k = cfg.ppo.n_envs, sampler.z_refs.shape[1]
        self.z = torch.zeros(n, k)
        self.imitate = torch.zeros(n, dtype=torch.bool)
        self.ref = torch.zeros(n, dtype=torch.long)
        self.t = torch.zeros(n, dtype=torch.long)
        self.ep_len = torch.zeros(n, dtype=torch.long)
        self.reset(torch.arange(n))

    def reset(self, idx: torch.Tensor) -> None:
        if idx.numel() == 0:
            return
        d = self.sampler.sample(idx.numel())
        self.z[idx], self.imitate[idx], self.ref[idx], self.t[idx] = d.z, d.imitate, d.ref_id, d.t0
        self.ep_len[idx] = 0
        b = self.bank
        self.env.set_state(idx, b.q[d.ref_id, d.t0], b.qd[d.ref_id, d.t0], b.root[d.ref_id, d.t0])

    def track_err(self) -> torch.Tensor:
        """Mean world-frame (Cartesian) keypoint distance to the time-aligned reference frame m[t0 + t].

        RSI put the root at the reference's root of frame t0, so the root's drift counts too.
        """
        ref_kp = self.bank.kp_world[self.ref, self.t]
        return (self.env.keypoints_world() - ref_kp).norm(dim=-1).mean(-1)


def _reward(
    arm: str, mod: nn.Module, s: torch.Tensor, s_next: torch.Tensor, z: torch.Tensor, imitate: torch.Tensor
) -> torch.Tensor:
    if arm in ("rgsd", "imitation"):
        return mod.reward(s_next, z, imitate)
    if arm == "diayn":
        return mod.reward(s_next, z)
    return mod.reward(s, s_next, z)


@torch.no_grad()
def _collect(arm: str, mod: nn.Module, ac: ActorCritic, envs: _Envs, gen: torch.Generator) -> dict[str, Any]:
    """One rollout of n_steps × n_envs transitions with auto-reset."""
    cfg = envs.cfg
    buf: dict[str, list[torch.Tensor]] = {k: [] for k in ("x", "a", "logp", "v", "r", "done", "s", "s2", "z", "imit")}
    n_ee = 0
    for _ in range(cfg.ppo.n_steps):
        s = envs.env.obs()
        x = torch.cat([s, envs.z], -1)
        a, logp, v = ac.act(x, generator=gen)
        s2 = envs.env.step(a)
        envs.t = (envs.t + 1).clamp(max=envs.bank.T - 1)
        envs.ep_len += 1
        r = _reward(arm, mod, s, s2, envs.z, envs.imitate)
        ee = early_exit(envs.track_err(), cfg.method.early_exit_eps, envs.imitate)
        # an imitation episode is truncated at the clip's last frame, every episode at episode_len
        trunc = ~ee & ((envs.imitate & (envs.t >= envs.bank.T - 1)) | (envs.ep_len >= cfg.ppo.episode_len))
        if bool(trunc.any()):  # time-limit truncation is not termination: bootstrap r + γ V(s')
            r = r + cfg.ppo.gamma * trunc.float() * ac.value(torch.cat([s2, envs.z], -1))
        done = ee | trunc
        n_ee += int(ee.sum())
        for key, val in zip(
            ("x", "a", "logp", "v", "r", "done", "s", "s2", "z", "imit"),
            (x, a, logp, v, r, done, s, s2, envs.z.clone(), envs.imitate.clone()),
        ):
            buf[key].append(val)
        envs.reset(done.nonzero().squeeze(-1))
    out = {k: torch.stack(v) for k, v in buf.items()}
    out["last_v"] = ac.value(torch.cat([envs.env.obs(), envs.z], -1)).detach()
    out["early_exits"] = n_ee
    return out


def _update_module(
    arm: str,
    mod: nn.Module,
    opt: torch.optim.Optimizer | None,
    roll: dict[str, Any],
    bank: RefBank,
    cfg: RunConfig,
    gen: torch.Generator,
) -> dict[str, float]:
    """q' (RGSD discovery stream), the DIAYN discriminator or METRA's φ, λ: one pass over the rollout."""
    if opt is None:
        return {}
    s, s2, z = (roll[k].reshape(-1, roll[k].shape[-1]) for k in ("s", "s2", "z"))
    if arm == "rgsd":
        disc = ~roll["imit"].reshape(-1)
        if not bool(disc.any()):
            return {}  # no discovery transitions: q' gets no gradient (p = 1 reduces to imitation)
        s2, z, visited = s2[disc], z[disc], s2
        s = s[disc]
    n = s2.shape[0]
    mb = max(1, n // cfg.method.disc_minibatches)
    perm = torch.randperm(n, generator=gen)
    stats: dict[str, float] = {}
    for i in range(0, n, mb):
        idx = perm[i : i + mb]
        if arm == "rgsd":
            loss, st = mod.disc_loss(s2[idx], z[idx], _anchor_states(visited, bank, len(idx), cfg, gen))
        elif arm == "diayn":
            loss = mod.loss(s2[idx], z[idx])
            st = {"disc_nll": float(loss.detach())}
        else:
            loss, st = mod.loss(s[idx], s2[idx], z[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        stats = st
    return stats


def _anchor_states(visited: torch.Tensor, bank: RefBank, n: int, cfg: RunConfig, gen: torch.Generator):
    """States the KL anchor KL(q' ‖ q) is applied to: visited, reference, or both (half each)."""
    mode = cfg.method.kl_states
    flat_ref = bank.obs.reshape(-1, bank.obs.shape[-1])
    parts = []
    if mode in ("visited", "visited+reference"):
        parts.append(visited[torch.randint(len(visited), (n,), generator=gen)])
    if mode in ("reference", "visited+reference"):
        parts.append(flat_ref[torch.randint(len(flat_ref), (n,), generator=gen)])
    return torch.cat(parts)


def train_arm(
    arm: str,
    cfg: RunConfig,
    bank: RefBank,
    encoder: RGSDEncoder | None,
    seed: int,
    log: Callable[..., None] | None = None,
) -> TrainedArm:
    """Phase 2 for one arm: PPO on the arm's reward, then its skill-module update, every iteration."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1000)
    obs_dim, m = bank.obs.shape[-1], cfg.method
    z_refs = motion_embeddings(encoder, list(bank.obs)) if encoder is not None else None
    mod, p = build_arm(arm, cfg, obs_dim, encoder, z_refs)
    zr = z_refs if z_refs is not None else torch.nn.functional.normalize(torch.ones(len(bank.refs), m.k), dim=-1)
    sampler = RGSDLatentSampler(zr, [bank.T] * len(bank.refs), p, seed=seed + 2000)
    envs = _Envs(cfg, bank, sampler)
    ac = ActorCritic(obs_dim, m.k, PuppetWorld.act_dim, cfg.ppo.hidden, cfg.ppo.init_log_std)
    opt = torch.optim.Adam(ac.parameters(), lr=cfg.ppo.lr)
    params = list(mod.disc.parameters()) if arm in ("rgsd", "imitation") else list(mod.parameters())
    mopt = torch.optim.Adam(params, lr=m.disc_lr) if arm != "imitation" else None
    curves = []
    for it in range(cfg.ppo.iterations):
        roll = _collect(arm, mod, ac, envs, gen)
        adv, ret = gae(roll["r"], roll["v"], roll["done"], roll["last_v"], cfg.ppo.gamma, cfg.ppo.lam)
        flat = lambda t: t.reshape(-1, *t.shape[2:])  # noqa: E731
        st = ppo_update(
            ac, opt, flat(roll["x"]), flat(roll["a"]), flat(roll["logp"]), flat(adv), flat(ret), cfg.ppo, gen
        )
        st.update(_update_module(arm, mod, mopt, roll, bank, cfg, gen))
        imit = roll["imit"]
        st["reward"] = float(roll["r"].mean())
        st["reward_imitation"] = float(roll["r"][imit].mean()) if bool(imit.any()) else math.nan
        st["early_exit_rate"] = roll["early_exits"] / max(1, int(imit.sum()))
        curves.append({"step": it, **st})
        if log is not None:
            log(it, **{k: v for k, v in st.items() if isinstance(v, float) and math.isfinite(v)})
    steps = cfg.ppo.iterations * cfg.ppo.n_steps * cfg.ppo.n_envs
    return TrainedArm(arm, ac, mod, z_refs, curves, steps)


@torch.no_grad()
def rollout_from_first_frame(
    ac: ActorCritic | None,
    cfg: RunConfig,
    bank: RefBank,
    ref_ids: torch.Tensor,
    z: torch.Tensor | None,
    horizon: int,
    hold_pose: bool = False,
) -> dict[str, torch.Tensor]:
    """Deterministic (mean-action) rollouts from frame 0 of each reference in ``ref_ids``.

    ``hold_pose``: instead of a policy, keep the PD target at the first frame's pose (the "holding
    the start pose" reference point of the competence gate). Returns world keypoints [B, H+1, 10, 3],
    observations [B, H+1, D] and roots [B, H+1, 3].
    """
    env = PuppetWorld(cfg.puppet, len(ref_ids))
    t0 = torch.zeros_like(ref_ids)
    env.set_state(torch.arange(len(ref_ids)), bank.q[ref_ids, t0], bank.qd[ref_ids, t0], bank.root[ref_ids, t0])
    hold = env.action_of_target(bank.q[ref_ids, t0])
    kps, obs, roots = [env.keypoints_world()], [env.obs()], [env.root.clone()]
    for _ in range(horizon):
        if hold_pose:
            a = hold
        else:
            a = ac.actor(torch.cat([env.obs(), z], -1))
        env.step(a)
        kps.append(env.keypoints_world())
        obs.append(env.obs())
        roots.append(env.root.clone())
    return {"kp": torch.stack(kps, 1), "obs": torch.stack(obs, 1), "root": torch.stack(roots, 1)}
