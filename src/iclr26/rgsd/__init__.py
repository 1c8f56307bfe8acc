"""RGSD: *Reference Grounded Skill Discovery* (Rho, Trinh, Xu, Ha; ICLR 2026; arXiv 2510.06203).

Unsupervised skill discovery fails on high-DoF bodies: the space of behaviours is huge and the
meaningful part small. RGSD first grounds a vMF skill space in reference motions by contrastive
pretraining (every state of a motion maps to one direction z_m), freezes it, and then trains one policy on
two streams: imitation (z = z_m, DIAYN reward under the frozen encoder, early exit) and discovery (z
uniform on the sphere, DIAYN reward under a trainable copy anchored to the grounded space by a KL term).

Implemented:

* vMF utilities (:mod:`iclr26.rgsd.vmf`): normaliser via ``scipy.special.ive``, Wood sampler, closed-form KL;
* :class:`RGSDEncoder`, :func:`contrastive_pretrain` (InfoNCE, T = 1/κ, same-motion mask),
  :class:`RGSDReward`, :class:`RGSDLatentSampler` (streams by p, RSI), :func:`early_exit`;
* baselines: :class:`DIAYNDiscriminator` (vMF, from scratch), :class:`METRA` (dual λ), imitation-only (p = 1);
* a small PPO with GAE (:mod:`iclr26.rgsd.ppo`);
* :class:`PuppetWorld`, a vectorised 12-joint toy body with 8 CPG reference clips (SMPL/AMASS are not
  available offline), and the CPU reproduction (:mod:`iclr26.rgsd.experiment`);
* the paper-scale path: :class:`RGSDVecEnvWrapper` around any gymnasium-style vector env, references from
  a local .npz (:func:`load_reference_npz`), :mod:`iclr26.rgsd.paper`.

Not implemented: the SMPL humanoid in Isaac Gym, ASE / CALM / Meta-Motivo baselines, motion FID with a
learned feature extractor, the downstream goal-reaching task.
"""

from .encoder import RGSDEncoder, alignment_stats, contrastive_pretrain, info_nce, motion_embeddings, reward_auc
from .ppo import ActorCritic, PPOConfig, gae, ppo_update
from .puppet import PuppetConfig, PuppetWorld, Reference, make_references
from .reward import METRA, DIAYNDiscriminator, RGSDLatentSampler, RGSDReward, early_exit
from .vmf import mean_resultant_length, uniform_sphere, vmf_kl, vmf_log_normalizer, vmf_log_prob, vmf_sample
from .wrapper import PuppetVectorEnv, RGSDVecEnvWrapper, load_reference_npz, save_reference_npz

__all__ = [
    "METRA",
    "ActorCritic",
    "DIAYNDiscriminator",
    "PPOConfig",
    "PuppetConfig",
    "PuppetVectorEnv",
    "PuppetWorld",
    "RGSDEncoder",
    "RGSDLatentSampler",
    "RGSDReward",
    "RGSDVecEnvWrapper",
    "Reference",
    "alignment_stats",
    "contrastive_pretrain",
    "early_exit",
    "gae",
    "info_nce",
    "load_reference_npz",
    "make_references",
    "mean_resultant_length",
    "motion_embeddings",
    "ppo_update",
    "reward_auc",
    "save_reference_npz",
    "uniform_sphere",
    "vmf_kl",
    "vmf_log_normalizer",
    "vmf_log_prob",
    "vmf_sample",
]
