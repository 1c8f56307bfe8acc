"""The toy task, its reward, and the KV-cached sampler (core ``generate(kv_cache=True)``) on the toy model."""

import math
import random

import pytest
import torch

from iclr26.acereason.config import ModelConfig
from iclr26.acereason.task import EOS, HASH, PAD, Q, ToyTask, response_reward
from iclr26.acereason.toy import build_model, pass_at_k
from iclr26.core.transformer import generate


def test_teacher_responses_are_correct_and_well_formed():
    task, rng = ToyTask(), random.Random(0)
    for _ in range(200):
        items = task.random_items(rng)
        resp = task.teacher(items, rng)
        assert len(resp) == 2 * len(items) + 3 and resp[-3:] == [HASH, sum(items) % 10, EOS]
        assert sorted(resp[0 : 2 * len(items) : 2]) == sorted(items)  # each item used once
        running = [sum(resp[0 : 2 * j + 1 : 2]) % 10 for j in range(len(items))]
        assert resp[1 : 2 * len(items) : 2] == running
        assert response_reward(items, resp) == (1.0, False)


def test_p_leftmost_one_gives_the_prompt_order_and_half_gives_branching():
    rng = random.Random(1)
    items = (3, 1, 4, 1, 5)
    assert ToyTask(p_leftmost=1.0).teacher(items, rng)[0:10:2] == list(items)
    orders = {tuple(ToyTask(p_leftmost=0.5).teacher(items, rng)[0:10:2]) for _ in range(200)}
    assert len(orders) > 5


def test_reward_wrong_truncated_and_malformed():
    items = (2, 3)
    assert response_reward(items, [2, 2, 3, 5, HASH, 4, EOS]) == (0.0, False)
    assert response_reward(items, [2, 2, 3, 5, HASH, 5]) == (0.0, True)  # no EOS: truncated
    assert response_reward(items, [2, 2, 3, 5, 5, EOS]) == (0.0, False)  # no '#'
    assert response_reward(items, [HASH, 5, EOS, PAD, PAD]) == (1.0, False)


def test_encoding_left_pads_prompts_and_masks_responses():
    task = ToyTask()
    p = task.encode_prompts([(1, 2), (1, 2, 3, 4, 5, 6)])
    assert p.shape == (2, 8) and p[0].tolist() == [PAD] * 4 + [Q, 1, 2, 12]
    tokens, mask = task.encode_sft([(1, 2)], [[1, 1, 2, 3, HASH, 3, EOS]])
    assert mask[0].tolist() == [0.0] * 8 + [1.0] * 7 + [0.0] * 8 and tokens.shape == (1, 23)


def test_prompts_are_distinct_and_exclude_held_out():
    task, rng = ToyTask(), random.Random(2)
    held = set(task.prompts(50, rng, (2, 2)))
    train = task.prompts(40, rng, (2, 2), exclude=held)
    assert len(set(train)) == 40 and not set(train) & held


def test_cached_sampler_matches_core_generate():
    model = build_model(ModelConfig(d_model=32), 0).eval()
    prompt = torch.randint(0, 15, (16, 8), generator=torch.Generator().manual_seed(0))
    for t in (0.0, 0.7, 1.3):
        a = generate(
            model, prompt, 10, temperature=t, eos_id=EOS, generator=torch.Generator().manual_seed(1), pad_id=PAD
        )
        b = generate(
            model,
            prompt,
            10,
            temperature=t,
            eos_id=EOS,
            generator=torch.Generator().manual_seed(1),
            pad_id=PAD,
            kv_cache=True,
        )
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_pass_at_k_hand_values():
    assert pass_at_k(8, 0, 4) == 0.0 and pass_at_k(8, 5, 4) == 1.0
    assert math.isclose(pass_at_k(8, 2, 1), 0.25) and math.isclose(pass_at_k(4, 1, 2), 0.5)


def test_cached_step_logits_equal_a_full_forward():
    model = build_model(ModelConfig(d_model=32), 0).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0)  # sharp attention: a position error changes the logits visibly
    prompt = torch.randint(0, 15, (4, 8), generator=torch.Generator().manual_seed(0))
    steps: list = []
    seq, _ = generate(
        model, prompt, 6, temperature=1.0, generator=torch.Generator().manual_seed(2), kv_cache=True, step_logits=steps
    )
    with torch.no_grad():
        full = model(seq).logits
    for j, lg in enumerate(steps):
        assert torch.allclose(lg, full[:, 8 + j - 1], atol=1e-4, rtol=1e-4)


def test_sft_loss_counts_response_tokens_only():
    from iclr26.acereason.toy import _sft_loss

    task = ToyTask()
    model = build_model(ModelConfig(d_model=32), 0)
    tokens, mask = task.encode_sft([(1, 2), (3, 4, 5)], [[1, 1, 2, 3, HASH, 3, EOS], [3, 3, 4, 7, 5, 2, HASH, 2, EOS]])
    with torch.no_grad():
        logp = torch.log_softmax(model(tokens[:, :-1]).logits, -1).gather(-1, tokens[:, 1:, None]).squeeze(-1)
    m = mask[:, 1:]
    assert float(_sft_loss(model, (tokens, mask))) == pytest.approx(float(-(logp * m).sum() / m.sum()), rel=1e-5)
    assert int(m.sum()) == 7 + 9


def test_rl_step_logs_the_entropy_of_logits_over_t():
    """With lr 0 the logged H_T of step 0 is that of the rollouts at the sampling temperature."""
    from dataclasses import replace

    from iclr26.acereason.config import RLConfig
    from iclr26.acereason.toy import rl_train, rollout_entropy

    task = ToyTask()
    model = build_model(ModelConfig(d_model=32), 0)
    cfg = replace(RLConfig(), steps=1, prompts_per_step=2, group_size=2, lr=0.0, overlong_filter=False)
    for t in (0.5, 2.0):
        hist = rl_train(model, task, cfg, t, seed=4, exclude=set())
        rng = random.Random("rl-4-0")
        prompts = task.prompts(2, rng, (cfg.k_min, task.k_max))
        rep = [p for p in prompts for _ in range(2)]
        gen_seed = 4 * 1009 + 17
        h = rollout_entropy(model, task, rep, t, task.max_response_len, gen_seed)
        assert hist[0]["entropy"] == pytest.approx(h, rel=1e-5)


def test_held_out_splits_and_training_prompts_are_disjoint():
    from iclr26.acereason.config import config_for
    from iclr26.acereason.pipeline import make_task, splits
    from iclr26.acereason.toy import rl_prompts, sft_dataset

    cfg = config_for("small")
    task, sp = make_task(cfg), splits(cfg, 0)
    assert len(sp.hard) == 300 and all(5 <= len(p) <= 6 for p in sp.hard)
    assert all(2 <= len(p) <= 4 for p in sp.easy)
    train, _ = sft_dataset(task, 400, 1, 0, sp.exclude)
    rl = [p for step in range(20) for p in rl_prompts(task, cfg.rl, 0, step, sp.exclude)]
    assert not (set(train) | set(rl)) & sp.exclude and all(len(p) >= 5 for p in rl)


def test_base_stage_rows_train_on_sums_and_copies_only():
    from iclr26.acereason.toy import _pretrain_row

    rng, task = random.Random(0), ToyTask()
    seen = set()
    for _ in range(50):
        row, pos = _pretrain_row(task, rng)
        if row[0] == PAD or row[0] == Q:  # a prompt copy: loss on the copied items and EOS
            k = row.index(12) - row.index(Q) - 1
            assert pos == list(range(task.prompt_len, task.prompt_len + k + 1)) and row[-1] == EOS
            seen.add("copy")
        else:  # a chain a1 s1 a2 s2 ..: loss on the sums only
            assert pos == list(range(1, len(row), 2))
            assert all(row[i] == (row[i - 2] + row[i - 1]) % 10 for i in range(3, len(row), 2))
            seen.add("chain")
    assert seen == {"copy", "chain"}
