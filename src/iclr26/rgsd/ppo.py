"""PPO with GAE for the skill-conditioned policies π_θ(a | s, z), V(s, z): :mod:`iclr26.core.ppo` (the paper
trains with PPO; its hyper-parameters are not given, so the defaults are common ones for small locomotion tasks)."""

from iclr26.core.ppo import ActorCritic, PPOConfig, gae, ppo_update

__all__ = ["ActorCritic", "PPOConfig", "gae", "ppo_update"]
