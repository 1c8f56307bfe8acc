"""Phase 2 of RGSD (Sec. 3.3): rewards, the two skill streams, early exit; and the DIAYN / METRA baselines.

Imitation stream (probability p): z = z_m of a reference m, RSI at a random frame of m, reward the DIAYN
reward under the *frozen* grounded encoder q_φ:

    r(s, z_m) = −log p(z) + log q_φ(z_m | s) = C + κ μ_φ(s)ᵀ z_m           ("feature-level imitation")

and the episode ends early when the tracking error to the time-aligned reference frame exceeds ε.

Discovery stream (1 − p): z uniform on S^{k−1}, RSI from a random reference, reward C + κ μ_φ'(s)ᵀz under
a trainable copy q_φ' of q_φ, trained with the DIAYN loss plus a KL anchor to the grounded encoder:

    L(φ') = −E_disc[κ μ_φ'(s)ᵀz] + β E_anchor[KL(q_φ'(·|s) ‖ q_φ(·|s))],  KL = κ A_k(κ)(1 − μ_φ'(s)ᵀμ_φ(s)).

The offset C is not given in the paper's text we could read; C = κ keeps every reward ≥ 0 so that
surviving is rewarded under early termination. The PPO reward is ``scale · (C + κ μᵀz)``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn as nn

from .encoder import RGSDEncoder, mlp
from .vmf import check_kappa, mean_resultant_length, uniform_sphere

__all__ = [
    "DIAYNDiscriminator",
    "METRA",
    "RGSDLatentSampler",
    "RGSDReward",
    "SkillDraw",
    "check_p",
    "early_exit",
]


def check_p(p: float) -> float:
    """The imitation probability p must lie in [0, 1]."""
    if not (0.0 <= float(p) <= 1.0):
        raise ValueError(f"imitation probability p must be in [0, 1], got {p!r}")
    return float(p)


class RGSDReward(nn.Module):
    """Frozen grounded encoder q_φ (imitation reward) and its trainable copy q_φ' (discovery reward).

    kappa (κ): vMF concentration; beta (β): weight of the KL anchor; offset (C): reward offset; scale:
    multiplies every reward handed to PPO (a positive affine change of reward).
    """

    def __init__(
        self,
        frozen_enc: RGSDEncoder,
        kappa: float,
        beta: float = 1.0,
        offset: float | None = None,
        scale: float = 1.0,
        disc_enc: RGSDEncoder | None = None,
    ):
        super().__init__()
        self.kappa = check_kappa(kappa)
        self.beta = float(beta)
        self.offset = self.kappa if offset is None else float(offset)
        self.scale = float(scale)
        self.frozen = frozen_enc
        for prm in self.frozen.parameters():
            prm.requires_grad_(False)
        self.frozen.eval()
        self.disc = copy.deepcopy(frozen_enc) if disc_enc is None else disc_enc  # φ' ← copy(φ)
        for prm in self.disc.parameters():
            prm.requires_grad_(True)
        self.a_k = mean_resultant_length(frozen_enc.k, self.kappa)

    @torch.no_grad()
    def imitation_reward(self, s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """scale · (C + κ μ_φ(s)ᵀ z) with the frozen encoder."""
        return self.scale * (self.offset + self.kappa * (self.frozen(s) * z).sum(-1))

    @torch.no_grad()
    def discovery_reward(self, s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """scale · (C + κ μ_φ'(s)ᵀ z) with the trainable copy."""
        return self.scale * (self.offset + self.kappa * (self.disc(s) * z).sum(-1))

    def reward(self, s: torch.Tensor, z: torch.Tensor, imitate: torch.Tensor) -> torch.Tensor:
        """Per-env reward: the imitation reward where ``imitate`` else the discovery reward."""
        return torch.where(imitate, self.imitation_reward(s, z), self.discovery_reward(s, z))

    def kl_to_grounded(self, s: torch.Tensor) -> torch.Tensor:
        """KL(q_φ'(·|s) ‖ q_φ(·|s)) = κ A_k(κ) (1 − μ_φ'(s)ᵀ μ_φ(s)), per state."""
        with torch.no_grad():
            mu = self.frozen(s)
        return self.kappa * self.a_k * (1.0 - (self.disc(s) * mu).sum(-1))

    def disc_loss(
        self, s: torch.Tensor, z: torch.Tensor, s_anchor: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """−mean κ μ_φ'(s)ᵀz (= −log q_φ'(z|s) up to a constant) + β mean KL over the anchor states."""
        nll = -self.kappa * (self.disc(s) * z).sum(-1).mean()
        kl = self.kl_to_grounded(s if s_anchor is None else s_anchor).mean()
        loss = nll + self.beta * kl if self.beta != 0.0 else nll
        return loss, {"disc_nll": float(nll.detach()), "disc_kl": float(kl.detach())}


class DIAYNDiscriminator(nn.Module):
    """DIAYN with a vMF skill posterior, trained from scratch (the paper's DIAYN baseline, continuous z).

    reward = scale · (C + κ μ(s)ᵀz); loss = −mean κ μ(s)ᵀz.
    """

    def __init__(self, encoder: RGSDEncoder, kappa: float, offset: float | None = None, scale: float = 1.0):
        super().__init__()
        self.enc = encoder
        self.kappa = check_kappa(kappa)
        self.offset = self.kappa if offset is None else float(offset)
        self.scale = float(scale)

    @torch.no_grad()
    def reward(self, s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.scale * (self.offset + self.kappa * (self.enc(s) * z).sum(-1))

    def loss(self, s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return -self.kappa * (self.enc(s) * z).sum(-1).mean()


class METRA(nn.Module):
    """METRA (Park et al., 2024): φ: S → R^k with ‖φ(s') − φ(s)‖ ≤ 1 enforced by a dual variable λ.

    reward r = (φ(s') − φ(s))ᵀ z;
    L_φ = −E[(φ(s') − φ(s))ᵀz + λ · min(ε, 1 − ‖φ(s) − φ(s')‖²)],  L_λ = λ · E[min(ε, 1 − ‖φ(s) − φ(s')‖²)].
    """

    def __init__(
        self, obs_dim: int, k: int, hidden: tuple[int, ...] = (256, 256), eps: float = 1e-3, lam_init: float = 30.0
    ):
        super().__init__()
        self.phi = mlp([obs_dim, *hidden, k])
        self.eps = float(eps)
        self.log_lam = nn.Parameter(torch.tensor(float(lam_init)).log())

    @property
    def lam(self) -> torch.Tensor:
        return self.log_lam.exp()

    @torch.no_grad()
    def reward(self, s: torch.Tensor, s_next: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return ((self.phi(s_next) - self.phi(s)) * z).sum(-1)

    def loss(self, s: torch.Tensor, s_next: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        d = self.phi(s_next) - self.phi(s)
        gain = (d * z).sum(-1).mean()
        cst = torch.clamp(1.0 - (d**2).sum(-1), max=self.eps).mean()
        loss_phi = -(gain + self.lam.detach() * cst)
        loss_lam = self.lam * cst.detach()
        stats = {
            "metra_gain": float(gain.detach()),
            "metra_cst": float(cst.detach()),
            "metra_lam": float(self.lam.detach()),
        }
        return loss_phi + loss_lam, stats


@dataclass
class SkillDraw:
    """One reset's draw: z [n, k], imitate [n] (bool), ref_id [n], t0 [n] (the RSI frame)."""

    z: torch.Tensor
    imitate: torch.Tensor
    ref_id: torch.Tensor
    t0: torch.Tensor


class RGSDLatentSampler:
    """Per-reset stream choice: with probability p imitation (z = z_m), else discovery (z uniform).

    Both streams start by reference state initialisation at a uniformly drawn frame of a uniformly drawn
    reference, so that they overlap in state distribution (Sec. 3.3).
    """

    def __init__(self, z_refs: torch.Tensor, ref_lengths: list[int], p: float, seed: int = 0):
        self.z_refs = torch.as_tensor(z_refs, dtype=torch.float32)
        self.lengths = torch.as_tensor(ref_lengths)
        if len(self.lengths) != len(self.z_refs):
            raise ValueError(f"{len(self.z_refs)} motion embeddings but {len(self.lengths)} reference lengths")
        self.p = check_p(p)
        self.gen = torch.Generator().manual_seed(seed)

    def sample(self, n: int) -> SkillDraw:
        imitate = torch.rand(n, generator=self.gen) < self.p
        ref_id = torch.randint(len(self.lengths), (n,), generator=self.gen)
        t0 = (torch.rand(n, generator=self.gen) * self.lengths[ref_id]).long()
        z_disc = uniform_sphere(n, self.z_refs.shape[1], self.gen)
        z = torch.where(imitate[:, None], self.z_refs[ref_id], z_disc)
        return SkillDraw(z, imitate, ref_id, t0)


def early_exit(track_err: torch.Tensor, eps: float, imitate: torch.Tensor) -> torch.Tensor:
    """Terminate imitation episodes whose tracking error to the time-aligned reference frame exceeds ε."""
    return imitate & (track_err > eps)
