"""Group Relative Policy Optimisation (GRPO): group-normalised advantages and the clipped policy loss.

GRPO (DeepSeekMath, Shao et al. 2024) samples ``G`` completions per prompt, scores each with a scalar
reward and uses the reward standardised *within its group* as the advantage of every token of that
completion; the policy is then updated with the PPO clipped surrogate, optionally plus a KL penalty to
a frozen reference policy. No value network is involved.

Used by three papers of this project:

* **AT-GRPO** (multi-agent, multi-turn): groups are keyed by ``(env_id, agent, turn)`` tuples, so
  :func:`group_advantages` accepts arbitrary hashable keys, not only contiguous blocks.
* **AceReason**: plain GRPO on math / code, token-level loss aggregation (DAPO-style ``token_mean``)
  and asymmetric clipping (``clip_eps_high``, "clip-higher").
* **VTool-R1**: GRPO for a vision-language model; only the per-token log-probabilities of the
  generated text tokens enter here, whatever produced them.

Everything is batched torch; there are no Python loops over tokens (the only Python loop maps
arbitrary hashable group keys to integer ids, once per sample).

Shapes: ``B`` sequences (completions), ``T`` padded completion length, ``V`` vocabulary size.
``mask[b, t]`` is 1 for a generated token that is trained on and 0 for padding / prompt / tool output.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import torch
from torch import Tensor

Normalize = Literal["mean_std", "mean", "none"]
StdKind = Literal["sample", "population"]
Agg = Literal["token_mean", "seq_mean", "seq_mean_token_sum"]

_NORMALIZE = ("mean_std", "mean", "none")
_STD = ("sample", "population")
_AGG = ("token_mean", "seq_mean", "seq_mean_token_sum")

__all__ = [
    "GRPOConfig",
    "contiguous_group_keys",
    "group_advantages",
    "grpo_loss",
    "kl_k3",
    "masked_aggregate",
    "policy_loss",
    "token_logprobs",
]


# --------------------------------------------------------------------------------------------------
# advantages
# --------------------------------------------------------------------------------------------------


def contiguous_group_keys(n: int, group_size: int) -> Tensor:
    """Group ids ``[0]*G + [1]*G + ...`` for ``n`` samples laid out prompt by prompt (``n % G == 0``)."""
    if group_size < 1 or n % group_size != 0:
        raise ValueError(f"n={n} must be a positive multiple of group_size={group_size}")
    return torch.arange(n) // group_size


def _group_ids(group_keys: Sequence[Hashable] | Tensor, n: int, device: torch.device) -> Tensor:
    """Map keys to integer ids ``0..K-1`` (tensor keys: ``torch.unique``; other keys: first-seen order)."""
    if isinstance(group_keys, Tensor):
        if group_keys.ndim == 0 or group_keys.shape[0] != n:
            raise ValueError(f"group_keys has shape {tuple(group_keys.shape)}, expected ({n}, ...)")
        keys = group_keys.to(device)
        # a 2-D key tensor keys each sample by its whole row, e.g. columns (env_id, agent, turn)
        _, inverse = torch.unique(keys, dim=0 if keys.ndim > 1 else None, return_inverse=True)
        return inverse.reshape(n)
    keys_list = list(group_keys)
    if len(keys_list) != n:
        raise ValueError(f"len(group_keys)={len(keys_list)} != len(rewards)={n}")
    ids: dict[Hashable, int] = {}
    return torch.tensor([ids.setdefault(k, len(ids)) for k in keys_list], dtype=torch.long, device=device)


@torch.no_grad()
def group_advantages(
    rewards: Tensor,
    group_keys: Sequence[Hashable] | Tensor,
    normalize: Normalize = "mean_std",
    eps: float = 1e-6,
    std: StdKind = "sample",
) -> Tensor:
    r"""Advantage of each sample relative to the other samples of its group.

    For a sample ``i`` in group ``g`` (all samples sharing ``group_keys[i]``) with ``n_g`` members:

    .. math::

        \mu_g = \frac{1}{n_g}\sum_{j\in g} r_j, \qquad
        \sigma_g = \sqrt{\tfrac{1}{n_g - c}\sum_{j\in g}(r_j-\mu_g)^2}, \qquad
        A_i = \begin{cases}
            (r_i-\mu_g)/(\sigma_g+\varepsilon) & \text{normalize="mean_std"  (GRPO)}\\
            r_i-\mu_g                           & \text{normalize="mean"  (Dr. GRPO, no std)}\\
            r_i                                 & \text{normalize="none"  (keys ignored)}
        \end{cases}

    with ``c = 1`` for ``std="sample"`` (Bessel-corrected, what ``torch.std`` computes by default and
    what most public GRPO code uses) and ``c = 0`` for ``std="population"``.

    Degenerate groups, for ``"mean_std"`` and ``"mean"``: a group of size 1, and any group whose rewards
    are all equal, gets advantage **exactly 0** (no NaN, no rounding residue from ``r - mean``) -- such a
    group carries no learning signal.

    Args:
        rewards: ``[N]`` scalar reward per sample (any real dtype; integer / bool rewards give float32).
        group_keys: ``N`` hashable keys (e.g. prompt ids, or ``(env_id, agent, turn)`` tuples), or an
            ``[N]`` / ``[N, k]`` tensor (rows are keys). Group members need not be contiguous.
        normalize: see the formula above.
        eps: added to ``sigma_g`` (not to the variance).
        std: ``"sample"`` (divide by ``n_g - 1``) or ``"population"`` (divide by ``n_g``).

    Returns:
        ``[N]`` advantages in the rewards' floating dtype, detached (computed internally in float64).
    """
    if normalize not in _NORMALIZE:
        raise ValueError(f"normalize must be one of {_NORMALIZE}, got {normalize!r}")
    if std not in _STD:
        raise ValueError(f"std must be one of {_STD}, got {std!r}")
    if rewards.ndim != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
    n = rewards.shape[0]
    gid = _group_ids(group_keys, n, rewards.device)
    if normalize == "none":
        return rewards.detach().to(out_dtype).clone()
    if n == 0:
        return torch.zeros(0, dtype=out_dtype, device=rewards.device)

    r = rewards.detach().to(torch.float64)
    k = int(gid.max()) + 1
    count = torch.zeros(k, dtype=torch.float64, device=r.device).index_add_(0, gid, torch.ones_like(r))
    mean = torch.zeros(k, dtype=torch.float64, device=r.device).index_add_(0, gid, r) / count
    centered = r - mean[gid]  # r_i - mu_g
    # degenerate groups: size 1 or all rewards equal (max == min) -> advantage exactly 0
    gmax = torch.full((k,), -torch.inf, dtype=torch.float64, device=r.device).scatter_reduce(0, gid, r, reduce="amax")
    gmin = torch.full((k,), torch.inf, dtype=torch.float64, device=r.device).scatter_reduce(0, gid, r, reduce="amin")
    degenerate = (gmax == gmin)[gid]
    if normalize == "mean_std":
        sq = torch.zeros(k, dtype=torch.float64, device=r.device).index_add_(0, gid, centered**2)
        dof = count - 1.0 if std == "sample" else count
        sigma = torch.sqrt(sq / dof.clamp_min(1.0))  # sigma_g; size-1 groups are degenerate anyway
        adv = centered / (sigma[gid] + eps)
    else:
        adv = centered
    adv = torch.where(degenerate, torch.zeros_like(adv), adv)
    return adv.to(out_dtype)


# --------------------------------------------------------------------------------------------------
# aggregation over tokens
# --------------------------------------------------------------------------------------------------


def masked_aggregate(x: Tensor, mask: Tensor, agg: Agg = "token_mean") -> Tensor:
    r"""Reduce per-token values ``x[B, T]`` to a scalar over the tokens where ``mask`` is 1.

    With ``m_{bt}`` the mask, ``L_b = \sum_t m_{bt}`` the length of sequence ``b`` and
    ``B' = \#\{b : L_b > 0\}`` the number of non-empty sequences:

    * ``"token_mean"`` (DAPO; every token weighs the same):
      :math:`\sum_{b,t} m_{bt} x_{bt} / \sum_{b,t} m_{bt}`
    * ``"seq_mean"`` (original GRPO; every sequence weighs the same):
      :math:`\frac{1}{B'}\sum_b \frac{1}{L_b}\sum_t m_{bt} x_{bt}`
    * ``"seq_mean_token_sum"`` (sum over a sequence's tokens, mean over sequences):
      :math:`\frac{1}{B'}\sum_b \sum_t m_{bt} x_{bt}`

    Sequences without any unmasked token are left out of the sequence means; if no token at all is
    unmasked the result is 0 (still attached to the graph of ``x``). Masked entries of ``x`` are
    selected away with ``where``, so NaN/inf there do not leak into the result.
    """
    if agg not in _AGG:
        raise ValueError(f"agg must be one of {_AGG}, got {agg!r}")
    if x.shape != mask.shape or x.ndim != 2:
        raise ValueError(f"x and mask must both be [B, T], got {tuple(x.shape)} and {tuple(mask.shape)}")
    keep = mask.bool()
    m = keep.to(x.dtype)
    xm = torch.where(keep, x, torch.zeros_like(x))
    if agg == "token_mean":
        return xm.sum() / m.sum().clamp_min(1.0)
    lengths = m.sum(dim=-1)  # L_b
    per_seq = xm.sum(dim=-1)  # sum_t m x
    if agg == "seq_mean":
        per_seq = per_seq / lengths.clamp_min(1.0)
    n_seq = (lengths > 0).to(x.dtype).sum().clamp_min(1.0)  # B'
    return per_seq.sum() / n_seq


def _masked_token_mean(x: Tensor, keep: Tensor) -> float:
    return float(torch.where(keep, x, torch.zeros_like(x)).sum() / keep.sum().clamp_min(1))


# --------------------------------------------------------------------------------------------------
# losses
# --------------------------------------------------------------------------------------------------


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    agg: Agg = "token_mean",
    dual_clip: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    r"""PPO/GRPO clipped surrogate loss, optionally with the dual clip.

    Per unmasked token ``(b, t)``, with ``\varepsilon_l`` = ``clip_eps`` and ``\varepsilon_h`` =
    ``clip_eps_high`` (defaults to ``clip_eps``; DAPO's "clip-higher" sets it larger):

    .. math::

        \rho_{bt} = \exp(\log\pi_\theta - \log\pi_{old}), \qquad
        \ell_{bt} = -\min\big(\rho_{bt} A_b,\;
                              \mathrm{clip}(\rho_{bt}, 1-\varepsilon_l, 1+\varepsilon_h)\, A_b\big)

    With ``dual_clip`` = ``c`` > 1 (Ye et al. 2020; verl's ``clip_ratio_c``, VTool-R1 uses 3), tokens
    with a negative advantage are further bounded, :math:`\ell_{bt} \leftarrow \min(\ell_{bt}, -c A_b)`
    for :math:`A_b < 0`, so one very large ratio cannot dominate the update.

    The loss is :func:`masked_aggregate` of ``\ell`` with ``agg``. The gradient w.r.t. ``logp`` is
    zero exactly on the *clipped* tokens: ``A > 0`` and ``\rho > 1+\varepsilon_h``, or ``A < 0`` and
    ``\rho < 1-\varepsilon_l``. ``old_logp`` is treated as a constant (detached).

    Args:
        logp: ``[B, T]`` log-probs of the sampled tokens under the current policy (requires grad).
        old_logp: ``[B, T]`` log-probs under the policy that sampled them.
        advantages: ``[B]`` one advantage per sequence (e.g. from :func:`group_advantages`), or ``[B, T]``.
        mask: ``[B, T]`` 1 for trained tokens.

    Returns:
        ``(loss, stats)``; stats (python floats, token means over unmasked tokens): ``policy_loss``,
        ``clip_frac`` (= ``clip_frac_low + clip_frac_high``), ``clip_frac_low``, ``clip_frac_high``,
        ``ratio_mean``, ``ratio_max``, ``approx_kl`` (k3 estimate of KL(pi_old || pi_theta),
        :math:`\mathbb{E}[(\rho-1)-\log\rho]`, samples come from pi_old), ``n_tokens``.
    """
    if logp.ndim != 2 or logp.shape != old_logp.shape or logp.shape != mask.shape:
        raise ValueError(
            f"logp, old_logp, mask must all be [B, T]; got {tuple(logp.shape)}, "
            f"{tuple(old_logp.shape)}, {tuple(mask.shape)}"
        )
    eps_low = float(clip_eps)
    eps_high = eps_low if clip_eps_high is None else float(clip_eps_high)
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"clip epsilons must be >= 0, got {eps_low}, {eps_high}")
    keep = mask.bool()
    adv = advantages.detach().to(logp.dtype)
    if adv.ndim == 1:
        adv = adv[:, None]
    adv = adv.expand_as(logp)

    # masked positions get log-ratio 0 (ratio 1) so that garbage there can't overflow exp() or NaN the grad
    log_ratio = torch.where(keep, logp - old_logp.detach(), torch.zeros_like(logp))
    ratio = torch.exp(log_ratio)
    surr = ratio * adv
    surr_clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
    per_token = -torch.minimum(surr, surr_clipped)
    dual = torch.zeros_like(keep)
    if dual_clip is not None and dual_clip > 0:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (or None to disable), got {dual_clip}")
        dual_bound = -float(dual_clip) * adv
        dual = keep & (adv < 0) & (per_token > dual_bound)
        per_token = torch.where(adv < 0, torch.minimum(per_token, dual_bound), per_token)
    loss = masked_aggregate(per_token, mask, agg)

    with torch.no_grad():
        r = ratio.detach()
        clipped_high = keep & (adv > 0) & (r > 1.0 + eps_high)
        clipped_low = keep & (adv < 0) & (r < 1.0 - eps_low)
        lr = log_ratio.detach()
        n_tokens = int(keep.sum())
        stats = {
            "policy_loss": float(loss.detach()),
            "clip_frac_low": _masked_token_mean(clipped_low.to(r.dtype), keep),
            "clip_frac_high": _masked_token_mean(clipped_high.to(r.dtype), keep),
            "ratio_mean": _masked_token_mean(r, keep),
            "ratio_max": float(torch.where(keep, r, torch.zeros_like(r)).max()) if n_tokens else 1.0,
            "approx_kl": _masked_token_mean(torch.expm1(lr) - lr, keep),
            "clip_frac_dual": _masked_token_mean(dual.to(r.dtype), keep),
            "n_tokens": float(n_tokens),
        }
        stats["clip_frac"] = stats["clip_frac_low"] + stats["clip_frac_high"]
    return loss, stats


def kl_k3(logp: Tensor, ref_logp: Tensor, mask: Tensor, agg: Agg = "token_mean", clamp: float | None = None) -> Tensor:
    r"""k3 estimator of KL(pi_theta || pi_ref) on tokens sampled from pi_theta, aggregated like the loss.

    With :math:`d_{bt} = \log\pi_{ref} - \log\pi_\theta` (Schulman's "k3"):

    .. math::

        \widehat{KL}_{bt} = e^{d_{bt}} - d_{bt} - 1 \;\ge\; 0, \qquad
        \mathbb{E}_{\pi_\theta}[e^{d} - d - 1] = KL(\pi_\theta\,\|\,\pi_{ref})

    (unbiased because :math:`\mathbb{E}_{\pi_\theta}[e^d] = 1`). Computed as ``expm1(d) - d`` for
    accuracy near ``d = 0`` and clamped at 0 against rounding. ``ref_logp`` is detached; gradients flow
    through ``logp``. Masked positions get ``d = 0``. Returns a scalar (:func:`masked_aggregate`).

    ``clamp``: bound each token's estimate above (verl's ``low_var_kl`` clamps it to [-10, 10], so
    ``clamp=10`` reproduces it; the bound also stops the gradient of the clamped tokens).
    """
    if logp.shape != ref_logp.shape or logp.shape != mask.shape:
        raise ValueError(
            f"logp, ref_logp, mask must have equal shapes; got {tuple(logp.shape)}, "
            f"{tuple(ref_logp.shape)}, {tuple(mask.shape)}"
        )
    keep = mask.bool()
    d = torch.where(keep, ref_logp.detach() - logp, torch.zeros_like(logp))
    per_token = (torch.expm1(d) - d).clamp_min(0.0)
    if clamp is not None:
        per_token = per_token.clamp_max(float(clamp))
    return masked_aggregate(per_token, mask, agg)


def grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    ref_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    kl_coef: float = 0.0,
    agg: Agg = "token_mean",
) -> tuple[Tensor, dict[str, float]]:
    r"""Full GRPO objective, clipped surrogate plus k3 KL penalty to the reference policy:

    .. math::

        \mathcal{L} = \mathcal{L}_{clip} + \beta\,\widehat{KL}_{k3}(\pi_\theta\,\|\,\pi_{ref})

    ``\mathcal{L}_{clip}`` is :func:`policy_loss`, the KL term is :func:`kl_k3`, both aggregated with
    ``agg``, and ``\beta`` = ``kl_coef``. ``ref_logp`` may be ``None`` only when ``kl_coef == 0``; when it
    is given the KL is always reported in ``stats["kl"]`` (and only enters the loss if ``kl_coef != 0``).

    Returns ``(loss, stats)`` with the stats of :func:`policy_loss` plus ``kl`` and ``loss``.
    """
    if ref_logp is None and kl_coef != 0.0:
        raise ValueError(f"kl_coef={kl_coef} needs ref_logp (log-probs under the reference policy)")
    loss, stats = policy_loss(logp, old_logp, advantages, mask, clip_eps, clip_eps_high, agg)
    if ref_logp is not None:
        if kl_coef != 0.0:
            kl = kl_k3(logp, ref_logp, mask, agg)
            loss = loss + kl_coef * kl
            stats["kl"] = float(kl.detach())
        else:
            with torch.no_grad():
                stats["kl"] = float(kl_k3(logp.detach(), ref_logp, mask, agg))
    stats["loss"] = float(loss.detach())
    return loss, stats


def token_logprobs(logits: Tensor, tokens: Tensor) -> Tensor:
    r"""Log-probability of each given token: ``out[b, t] = log_softmax(logits[b, t])[tokens[b, t]]``.

    Computed as :math:`z_{bt,y} - \log\sum_v e^{z_{btv}}` (``torch.logsumexp`` subtracts the max, so
    large logits are safe); half / bfloat16 logits are upcast to float32 first. ``logits[:, t]`` must be
    the prediction *for* ``tokens[:, t]``: for a causal LM pass ``logits[:, :-1]`` with
    ``input_ids[:, 1:]``. All token ids must be valid (mask padding instead of using -100).

    Args:
        logits: ``[..., V]``; tokens: ``[...]`` (same leading shape, usually ``[B, T]``).
    """
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and tokens {tuple(tokens.shape)} don't match")
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    picked = logits.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


# --------------------------------------------------------------------------------------------------
# config
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GRPOConfig:
    """Hyper-parameters of a GRPO run (defaults: DeepSeekMath-style GRPO, token-mean aggregation)."""

    group_size: int = 8
    """G: completions sampled per prompt (per group key); advantages are computed within a group."""
    clip_eps: float = 0.2
    """epsilon_low: the ratio is clipped below at 1 - clip_eps."""
    clip_eps_high: float | None = None
    """epsilon_high: the ratio is clipped above at 1 + clip_eps_high; None = clip_eps (DAPO uses 0.28)."""
    kl_coef: float = 0.0
    """beta: weight of the k3 KL(pi || pi_ref) penalty; 0 disables it (no reference model needed)."""
    normalize: Normalize = "mean_std"
    """Advantage normalisation: "mean_std" (GRPO), "mean" (Dr. GRPO), "none" (raw rewards)."""
    std: StdKind = "sample"
    """Group std for "mean_std": "sample" (n-1, torch.std default) or "population" (n)."""
    adv_eps: float = 1e-6
    """Added to the group std before dividing."""
    agg: Agg = "token_mean"
    """Token aggregation of the losses: "token_mean", "seq_mean" or "seq_mean_token_sum"."""
    lr: float = 1e-6
    """Learning rate of the policy optimiser (AdamW in most GRPO recipes)."""
    weight_decay: float = 0.0
    """Weight decay of the policy optimiser."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip applied before each optimiser step (<= 0 disables it)."""
    updates_per_batch: int = 1
    """mu: gradient steps on each sampled batch (1 = on-policy, the ratio is then 1 at the first step)."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts (log-probs must be computed at the same temperature)."""
    max_new_tokens: int = 512
    """Maximum completion length of a rollout."""

    def __post_init__(self) -> None:
        if self.group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {self.group_size}")
        if self.clip_eps < 0 or (self.clip_eps_high is not None and self.clip_eps_high < 0):
            raise ValueError("clip_eps and clip_eps_high must be >= 0")
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef}")
        if self.normalize not in _NORMALIZE:
            raise ValueError(f"normalize must be one of {_NORMALIZE}, got {self.normalize!r}")
        if self.std not in _STD:
            raise ValueError(f"std must be one of {_STD}, got {self.std!r}")
        if self.agg not in _AGG:
            raise ValueError(f"agg must be one of {_AGG}, got {self.agg!r}")
        if self.updates_per_batch < 1:
            raise ValueError(f"updates_per_batch must be >= 1, got {self.updates_per_batch}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")

    def to_dict(self) -> dict:
        return asdict(self)

    def advantages(self, rewards: Tensor, group_keys: Sequence[Hashable] | Tensor | None = None) -> Tensor:
        """:func:`group_advantages`; ``group_keys=None``: contiguous blocks of ``group_size``."""
        if group_keys is None:
            group_keys = contiguous_group_keys(rewards.shape[0], self.group_size)
        return group_advantages(rewards, group_keys, self.normalize, self.adv_eps, self.std)

    def loss(
        self, logp: Tensor, old_logp: Tensor, ref_logp: Tensor | None, advantages: Tensor, mask: Tensor
    ) -> tuple[Tensor, dict[str, float]]:
        """:func:`grpo_loss` with this config's clipping, KL coefficient and aggregation."""
        return grpo_loss(
            logp,
            old_logp,
            ref_logp,
            advantages,
            mask,
            self.clip_eps,
            self.clip_eps_high,
            self.kl_coef,
            self.agg,
        )
