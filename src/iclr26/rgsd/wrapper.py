"""Paper-scale plumbing: RGSD's reward, streams and early exit around any vectorised environment.

``RGSDVecEnvWrapper`` wraps an object with the gymnasium ``VectorEnv`` interface (``num_envs``,
``reset(seed=) -> (obs, info)``, ``step(actions) -> (obs, reward, terminated, truncated, info)``): gymnasium's
MuJoCo ``Humanoid-v5`` through ``gymnasium.make_vec``, an Isaac Lab / rsl_rl env behind the same five
calls, or :class:`PuppetVectorEnv`. The environment's own reward is replaced by the RGSD reward; the
policy reads ``wrapper.z`` (one skill per env) next to the observation.

References come from a local ``.npz`` with one ``[frames, obs_dim]`` float array per clip (the features
the encoder sees, in the environment's observation space). RSI needs the simulator state of each frame:
pass ``rsi_fn(env_index, ref_id, frame)``; without it episodes start from the environment's own reset.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .encoder import validate_motions
from .puppet import PuppetConfig, PuppetWorld, Reference
from .reward import RGSDLatentSampler, RGSDReward, early_exit

__all__ = ["PuppetVectorEnv", "RGSDVecEnvWrapper", "feature_track_error", "load_reference_npz", "save_reference_npz"]


def load_reference_npz(path: str | Path, obs_dim: int | None = None) -> tuple[list[str], list[torch.Tensor]]:
    """Clip names and [frames, obs_dim] tensors from a local .npz (one array per clip, sorted by name).

    One-line ValueError for: no file, fewer than two clips, a clip under two frames, NaN, a width unlike the
    environment's observation.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"reference file {path} does not exist (nothing is downloaded)")
    with np.load(path, allow_pickle=False) as data:
        names = sorted(data.files)
        arrays = [np.asarray(data[n]) for n in names]
    for n, a in zip(names, arrays):
        if a.dtype.kind not in "fiu":
            raise ValueError(f"{path}: clip '{n}' is not numeric (dtype {a.dtype})")
    try:
        motions = validate_motions([torch.as_tensor(a, dtype=torch.float32) for a in arrays], obs_dim)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return names, motions


def save_reference_npz(path: str | Path, refs: list[Reference]) -> Path:
    """Write PuppetWorld clips in the reference format (one float32 [frames, obs_dim] array per clip)."""
    np.savez(Path(path), **{r.name: r.obs.numpy().astype(np.float32) for r in refs})
    return Path(path)


def feature_track_error(obs: torch.Tensor, ref_frames: torch.Tensor) -> torch.Tensor:
    """Default tracking error when no keypoints are available: RMS feature distance ‖s − m[t]‖ / √D."""
    return (obs - ref_frames).pow(2).mean(-1).sqrt()


class RGSDVecEnvWrapper:
    """Adds RGSD's skill streams, reward and early exit to a vectorised environment.

    Per env at reset: imitation (prob. p) with z = z_m, or discovery with z uniform (RGSDLatentSampler);
    reward = imitation reward (frozen q_φ) or discovery reward (q_φ'); terminated |= early exit of an imitation
    episode whose tracking error to m[t0 + t] exceeds ε. Autoreset follows gymnasium's next-step mode: the
    step after a done is the reset transition, which gets reward 0 and keeps the new skill.
    """

    def __init__(
        self,
        venv: Any,
        reward: RGSDReward,
        motions: list[torch.Tensor],
        z_refs: torch.Tensor,
        p: float,
        eps: float,
        seed: int = 0,
        track_fn: Callable[..., torch.Tensor] | None = None,
        rsi_fn: Callable[[int, int, int], None] | None = None,
    ):
        self.venv, self.reward_fn, self.eps = venv, reward, float(eps)
        self.n = int(venv.num_envs)
        self.motions = motions
        self.sampler = RGSDLatentSampler(z_refs, [len(m) for m in motions], p, seed)
        self.track_fn = track_fn or (lambda obs, ref, t: feature_track_error(obs, self._frames(ref, t)))
        self.rsi_fn = rsi_fn
        self.z = torch.zeros(self.n, z_refs.shape[1])
        self.imitate = torch.zeros(self.n, dtype=torch.bool)
        self.ref = torch.zeros(self.n, dtype=torch.long)
        self.t = torch.zeros(self.n, dtype=torch.long)
        self._pending_reset = torch.zeros(self.n, dtype=torch.bool)

    def _frames(self, ref: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.motions[int(r)][int(i)] for r, i in zip(ref, t)])

    def _draw(self, idx: torch.Tensor) -> None:
        d = self.sampler.sample(idx.numel())
        self.z[idx], self.imitate[idx], self.ref[idx], self.t[idx] = d.z, d.imitate, d.ref_id, d.t0
        if self.rsi_fn is not None:
            for i, r, t0 in zip(idx.tolist(), d.ref_id.tolist(), d.t0.tolist()):
                self.rsi_fn(i, r, t0)

    def reset(self, seed: int | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        obs, info = self.venv.reset(seed=seed)
        self._draw(torch.arange(self.n))
        self._pending_reset[:] = False
        if self.rsi_fn is not None:
            obs = self._observe(obs)
        return torch.as_tensor(np.asarray(obs), dtype=torch.float32), info

    def _observe(self, obs: Any) -> Any:
        get = getattr(self.venv, "observe", None)
        return get() if get is not None else obs

    def step(self, actions: torch.Tensor):
        obs, _, term, trunc, info = self.venv.step(np.asarray(actions, dtype=np.float32))
        obs = torch.as_tensor(np.asarray(obs), dtype=torch.float32)
        term = torch.as_tensor(np.asarray(term), dtype=torch.bool)
        trunc = torch.as_tensor(np.asarray(trunc), dtype=torch.bool)
        lengths = torch.tensor([len(self.motions[int(r)]) for r in self.ref])
        self.t = torch.minimum(self.t + 1, lengths - 1)
        r = self.reward_fn.reward(obs, self.z, self.imitate)
        ee = early_exit(self.track_fn(obs, self.ref, self.t), self.eps, self.imitate)
        r = torch.where(self._pending_reset, torch.zeros_like(r), r)
        ee &= ~self._pending_reset
        term = term | ee
        done = term | trunc
        info = dict(info) if isinstance(info, dict) else {}
        info.update(early_exit=ee, imitate=self.imitate.clone(), z=self.z.clone())
        self._pending_reset = done.clone()
        if bool(done.any()):
            self._draw(done.nonzero().squeeze(-1))
        return obs, r, term, trunc, info


class PuppetVectorEnv:
    """PuppetWorld behind the gymnasium VectorEnv calls (the wrapper's test bed and ``env_id=puppet``).

    Done environments reset at their next step (gymnasium's next-step autoreset); ``set_reference_state``
    is the RSI hook for :class:`RGSDVecEnvWrapper`.
    """

    def __init__(self, cfg: PuppetConfig, num_envs: int, refs: list[Reference], episode_len: int = 80):
        self.world = PuppetWorld(cfg, num_envs)
        self.num_envs, self.refs, self.episode_len = int(num_envs), refs, int(episode_len)
        self.single_observation_dim, self.single_action_dim = PuppetWorld.obs_dim, PuppetWorld.act_dim
        self._len = torch.zeros(self.num_envs, dtype=torch.long)
        self._reset_next = torch.zeros(self.num_envs, dtype=torch.bool)
        self._gen = torch.Generator().manual_seed(0)

    def set_reference_state(self, i: int, ref_id: int, frame: int) -> None:
        r = self.refs[ref_id]
        self.world.set_state(
            torch.tensor([i]), r.q[frame : frame + 1], r.qd[frame : frame + 1], r.root[frame : frame + 1]
        )
        self._len[i] = 0

    def observe(self) -> np.ndarray:
        return self.world.obs().numpy()

    def _default_reset(self, idx: torch.Tensor) -> None:
        r = self.refs[0]
        for i in idx.tolist():
            self.world.set_state(torch.tensor([i]), r.q[:1], r.qd[:1], torch.zeros(1, 3))
        self._len[idx] = 0

    def reset(self, seed: int | None = None):
        if seed is not None:
            self._gen.manual_seed(seed)
        self._default_reset(torch.arange(self.num_envs))
        self._reset_next[:] = False
        return self.observe(), {}

    def step(self, actions: np.ndarray):
        a = torch.as_tensor(np.asarray(actions), dtype=torch.float32)
        self.world.step(a)
        self._len += 1
        rs = self._reset_next.clone()
        if bool(rs.any()):  # next-step autoreset: these envs restart instead of stepping on
            self._default_reset(rs.nonzero().squeeze(-1))
        trunc = (self._len >= self.episode_len) & ~rs
        self._reset_next = trunc.clone()
        zeros = np.zeros(self.num_envs, dtype=bool)
        return self.observe(), np.zeros(self.num_envs, dtype=np.float32), zeros, trunc.numpy(), {}
