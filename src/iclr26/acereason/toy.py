"""The CPU toy pipeline: SFT of a tiny causal LM on teacher traces, rollouts, evaluation, and strict
on-policy GRPO at a sampling temperature T (the pieces E1-E4 of the experiment are made of).

Every function is deterministic given its seed (python ``random.Random`` for data, a
``torch.Generator`` for sampling).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from iclr26.core.train import TrainConfig, fit
from iclr26.core.transformer import Transformer, TransformerConfig, generate

from .config import ModelConfig, RLConfig, SFTConfig
from .entropy import temperature_adjusted_entropy
from .rl import OnPolicyGRPOConfig, apply_overlong_filter, onpolicy_grpo_loss
from .task import EOS, PAD, VOCAB_SIZE, ToyTask, response_reward

__all__ = [
    "Rollouts",
    "build_model",
    "evaluate",
    "pass_at_k",
    "rollout_entropy",
    "rl_train",
    "sample_rollouts",
    "sft_dataset",
    "train_sft",
]


def build_model(cfg: ModelConfig, seed: int) -> Transformer:
    """A GPT-style causal model over the toy vocabulary (RoPE, tied embeddings)."""
    torch.manual_seed(seed)
    return Transformer(
        TransformerConfig(
            vocab_size=VOCAB_SIZE, d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads, max_len=cfg.max_len
        )
    )


def sft_dataset(
    task: ToyTask, n_prompts: int, n_responses: int, seed: int, exclude: set
) -> tuple[list[tuple[int, ...]], list[list[int]]]:
    """N unique prompts (none in ``exclude``) with R teacher responses each, flattened to N*R pairs."""
    rng = random.Random(f"sft-{seed}-{n_prompts}-{n_responses}")
    prompts = task.prompts(n_prompts, rng, exclude=exclude)
    pairs_p, pairs_r = [], []
    for items in prompts:
        for resp in task.teacher_responses(items, n_responses, rng):
            pairs_p.append(items)
            pairs_r.append(resp)
    return pairs_p, pairs_r


def _sft_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Next-token cross-entropy on response tokens only: Σ m_t (-log p(y_t | y_<t)) / Σ m_t."""
    tokens, mask = batch
    logits = model(tokens[:, :-1]).logits
    nll = nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1), reduction="none"
    ).reshape(tokens.shape[0], -1)
    m = mask[:, 1:]
    return (nll * m).sum() / m.sum().clamp_min(1.0)


def train_sft(
    model: Transformer,
    task: ToyTask,
    prompts: Sequence,
    responses: Sequence,
    cfg: SFTConfig,
    seed: int,
    log: Callable[..., None] | None = None,
) -> list[float]:
    """``cfg.epochs`` shuffled epochs over the pairs with core.train.fit; returns the per-step losses."""
    tokens, mask = task.encode_sft(prompts, responses)
    n = tokens.shape[0]
    per_epoch = max(1, math.ceil(n / cfg.batch_size))
    steps = per_epoch * cfg.epochs
    gen = torch.Generator().manual_seed(seed)
    perms = [torch.randperm(n, generator=gen) for _ in range(cfg.epochs)]

    def get_batch(step: int, rank: int, world: int) -> tuple[Tensor, Tensor]:
        epoch, j = divmod(step, per_epoch)
        idx = perms[epoch][j * cfg.batch_size : (j + 1) * cfg.batch_size]
        return tokens[idx], mask[idx]

    tcfg = TrainConfig(
        steps=steps,
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        warmup_steps=max(1, int(cfg.warmup_frac * steps)),
        progress=False,
        log_every=0,
    )
    return fit(model, _sft_loss, get_batch, tcfg, log=log).losses


def _pretrain_row(task: ToyTask, rng: random.Random) -> tuple[list[int], list[int]]:
    """One "base model" sequence and its loss positions: half are running-sum chains ``a1 s1 .. ak sk``
    (loss on the sums), half copy a prompt ``Q a1 .. ak = a1 .. ak EOS`` in order (loss on the copy)."""
    items = task.random_items(rng)
    if rng.random() < 0.5:
        row, s = [], 0
        for a in items:
            s = (s + a) % 10
            row += [a, s]
        return row, list(range(1, len(row), 2))
    prompt = task.encode_prompts([items])[0].tolist()
    return prompt + list(items) + [EOS], list(range(len(prompt), len(prompt) + len(items) + 1))


def pretrain_base(
    model: Transformer,
    task: ToyTask,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    log: Callable[..., None] | None = None,
) -> list[float]:
    """The "base model" stage (the paper's SFT starts from a math-pretrained base, Qwen2.5-Math-7B): generic
    skills the CoT uses, addition mod 10 and reading a prompt's items, without the task itself (no item
    choice, no interleaving of items and sums, no answer format)."""
    width = task.prompt_len + task.max_response_len

    def get_batch(step: int, rank: int, world: int) -> tuple[Tensor, Tensor]:
        rng = random.Random(f"pretrain-{seed}-{step}")
        tokens = torch.full((batch_size, width), PAD, dtype=torch.long)
        mask = torch.zeros(batch_size, width)
        for b in range(batch_size):
            row, pos = _pretrain_row(task, rng)
            tokens[b, : len(row)] = torch.tensor(row)
            mask[b, pos] = 1.0
        return tokens, mask

    tcfg = TrainConfig(
        steps=steps, lr=lr, weight_decay=0.01, warmup_steps=max(1, steps // 20), progress=False, log_every=0
    )
    return fit(model, _sft_loss, get_batch, tcfg, log=log).losses


@dataclass
class Rollouts:
    """A batch of sampled responses.

    tokens: ``[B, P + L]`` prompt and response. response_mask: ``[B, L]`` 1 on generated tokens (EOS
    included). truncated: ``[B]`` no EOS within the budget. rewards: ``[B]``.
    """

    tokens: Tensor
    response_mask: Tensor
    truncated: Tensor
    rewards: Tensor

    @property
    def lengths(self) -> Tensor:
        return self.response_mask.sum(1)


@torch.no_grad()
def sample_rollouts(
    model: Transformer,
    task: ToyTask,
    prompts: Sequence[Sequence[int]],
    temperature: float,
    budget: int,
    gen: torch.Generator,
) -> Rollouts:
    """Sample one response per prompt at temperature T (``softmax(z / T)``) with at most ``budget`` tokens."""
    was_training = model.training
    model.eval()
    seq, valid = generate(
        model,
        task.encode_prompts(prompts),
        budget,
        temperature=temperature,
        eos_id=EOS,
        generator=gen,
        pad_id=PAD,
        kv_cache=True,
    )
    model.train(was_training)
    resp = seq[:, task.prompt_len :]
    rewards, truncated = [], []
    for items, row, ok in zip(prompts, resp.tolist(), valid.tolist(), strict=True):
        r, t = response_reward(items, [tok for tok, v in zip(row, ok, strict=True) if v])
        rewards.append(r)
        truncated.append(t)
    return Rollouts(seq, valid.float(), torch.tensor(truncated), torch.tensor(rewards))


def _response_logits(model: Transformer, ro: Rollouts, prompt_len: int) -> Tensor:
    """Logits predicting each response token: positions P-1 .. P+L-2 of a forward over the sequence."""
    return model(ro.tokens[:, :-1]).logits[:, prompt_len - 1 :]


@torch.no_grad()
def rollout_entropy(
    model: Transformer, task: ToyTask, prompts: Sequence, temperature: float, budget: int, seed: int
) -> float:
    """H_T on rollouts sampled at T from ``prompts`` (common random numbers: the generator seed is fixed)."""
    ro = sample_rollouts(model, task, prompts, temperature, budget, torch.Generator().manual_seed(seed))
    model.eval()
    logits = _response_logits(model, ro, task.prompt_len)
    return float(temperature_adjusted_entropy(logits, temperature, ro.response_mask))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"k={k} > n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@torch.no_grad()
def evaluate(
    model: Transformer, task: ToyTask, prompts: Sequence, n_samples: int, temperature: float, budget: int, seed: int
) -> dict[str, float]:
    """avg@n (percent), pass@k for k = 1, 2, 4, ... n (percent), mean response length, truncated share."""
    rep = [p for p in prompts for _ in range(n_samples)]
    ro = sample_rollouts(model, task, rep, temperature, budget, torch.Generator().manual_seed(seed))
    correct = ro.rewards.reshape(len(prompts), n_samples)
    out = {
        "acc": 100.0 * float(correct.mean()),
        "length": float(ro.lengths.mean()),
        "truncated": float(ro.truncated.float().mean()),
    }
    k = 1
    while k <= n_samples:
        out[f"pass@{k}"] = 100.0 * sum(pass_at_k(n_samples, int(c), k) for c in correct.sum(1)) / len(prompts)
        k *= 2
    return out


def rl_prompts(task: ToyTask, cfg: RLConfig, seed: int, step: int, exclude: set) -> list:
    """The prompts of RL step ``step``: hard (k >= cfg.k_min), none held out, the same for every T."""
    rng = random.Random(f"rl-{seed}-{step}")
    return task.prompts(cfg.prompts_per_step, rng, (cfg.k_min, task.k_max), exclude=exclude)


def rl_train(
    model: Transformer,
    task: ToyTask,
    cfg: RLConfig,
    temperature: float,
    seed: int,
    exclude: set,
    budget: int | None = None,
    overlong_filter: bool | None = None,
) -> list[dict]:
    """Strict on-policy GRPO for ``cfg.steps`` steps at sampling temperature T; returns per-step stats.

    Each step: ``prompts_per_step`` hard prompts (the same sequence for every T: seeded by ``seed``
    and the step), ``G`` rollouts each at T, binary rewards, overlong filter, one AdamW step on
    :func:`iclr26.acereason.rl.onpolicy_grpo_loss` (log-probs from logits / T, token mean, no KL).
    """
    budget = budget or cfg.budget or task.max_response_len
    flt = cfg.overlong_filter if overlong_filter is None else overlong_filter
    gcfg = OnPolicyGRPOConfig(group_size=cfg.group_size, adv_eps=cfg.adv_eps, overlong_filter=flt)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed * 1009 + 17)
    history = []
    for step in range(cfg.steps):
        prompts = rl_prompts(task, cfg, seed, step, exclude)
        rep = [p for p in prompts for _ in range(cfg.group_size)]
        ro = sample_rollouts(model, task, rep, temperature, budget, gen)
        rewards, loss_mask = apply_overlong_filter(ro.rewards, ro.response_mask, ro.truncated, flt)
        model.train()
        logits = _response_logits(model, ro, task.prompt_len)
        resp_tokens = ro.tokens[:, task.prompt_len :]
        loss, stats = onpolicy_grpo_loss(logits, resp_tokens, rewards, loss_mask, temperature, gcfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip))
        opt.step()
        history.append(
            {
                "step": step,
                "loss": float(loss.detach()),
                "entropy": stats["entropy"],
                "reward": float(ro.rewards.mean()),
                "zero_adv_frac": stats["zero_adv_frac"],
                "clip_frac": stats["clip_frac"],
                "length": float(ro.lengths.mean()),
                "truncated": float(ro.truncated.float().mean()),
                "grad_norm": grad_norm,
            }
        )
    return history
