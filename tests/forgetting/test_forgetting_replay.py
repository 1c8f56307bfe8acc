"""Replay buffers and the ER protocol: reservoir uniformity, class balance, batch split, step cap,
M = 0 == fine-tuning, and data invariants."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import chisquare

from iclr26.forgetting import (
    BalancedReplayBuffer,
    ContinualData,
    ContinualNet,
    ERConfig,
    MLPFeatures,
    ReservoirBuffer,
    batch_split,
    orthogonal_subspace_tasks,
    plan_task,
    run_continual,
    split_digits,
)
from iclr26.forgetting.probe import LinearProbe
from iclr26.forgetting.replay import SessionFeatures, deep_accuracies, er_loss, shallow_accuracy, stream_batches

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_data(seed=0, n_per_class=12, n_tasks=3, dim=6) -> ContinualData:
    rng = np.random.default_rng(seed)
    k = 2
    y_tr = np.repeat(np.arange(n_tasks * k), n_per_class)
    y_te = np.repeat(np.arange(n_tasks * k), 4)
    means = 3 * rng.standard_normal((n_tasks * k, dim))
    x_tr = means[y_tr] + rng.standard_normal((len(y_tr), dim))
    x_te = means[y_te] + rng.standard_normal((len(y_te), dim))
    return ContinualData(
        torch.tensor(x_tr, dtype=torch.float32),
        torch.tensor(y_tr),
        torch.tensor(y_tr // k),
        torch.tensor(x_te, dtype=torch.float32),
        torch.tensor(y_te),
        torch.tensor(y_te // k),
        [list(range(t * k, (t + 1) * k)) for t in range(n_tasks)],
        "tiny",
    )


# ---------------------------------------------------------------- buffers


def test_reservoir_sampling_is_uniform():
    n_stream, M, reps = 50, 10, 3000
    counts = np.zeros(n_stream)
    rng = np.random.default_rng(0)
    for _ in range(reps):
        buf = ReservoirBuffer(M)
        for k in range(0, n_stream, 7):  # stream arrives in batches
            idx = np.arange(k, min(k + 7, n_stream))
            buf.observe(idx, idx % 3, rng)
        assert len(buf) == M and len(set(buf.indices.tolist())) == M
        counts[buf.indices] += 1
    # every stream item is kept with probability M / n_stream
    assert chisquare(counts).pvalue > 0.001
    assert counts.sum() == reps * M


def test_reservoir_chi_square_detects_a_biased_buffer():
    """The uniformity test above can fail: a 'keep the last M' buffer is rejected."""
    counts = np.zeros(50)
    counts[-10:] = 3000
    assert chisquare(counts).pvalue < 1e-6


def test_balanced_buffer_keeps_equal_counts_and_earliest_items():
    buf = BalancedReplayBuffer(capacity=23)
    order = {c: np.arange(100 * c, 100 * c + 40) for c in range(6)}
    buf.end_task(0, {0: order[0], 1: order[1]})
    assert buf.counts() == {0: 12, 1: 11} and len(buf) == 23
    first = {c: buf.per_class[c].copy() for c in (0, 1)}
    assert np.array_equal(first[0], order[0][:12])  # new classes: first items in loader order
    buf.end_task(1, {2: order[2], 3: order[3]})
    counts = buf.counts()
    assert sum(counts.values()) <= 23 and max(counts.values()) - min(counts.values()) <= 1
    assert counts == {0: 6, 1: 6, 2: 6, 3: 5}
    for c in (0, 1):  # old classes keep their earliest stored items
        assert np.array_equal(buf.per_class[c], first[c][: counts[c]])
    buf.end_task(2, {4: order[4], 5: order[5]})
    counts = buf.counts()
    assert len(counts) == 6 and sum(counts.values()) == 23 and max(counts.values()) - min(counts.values()) <= 1
    with pytest.raises(ValueError):
        buf.end_task(3, {0: order[0]})


def test_balanced_buffer_special_case_one_per_class():
    """M == #classes (official ``models/er_balanced.py``, ``end_task``): the first task stores one
    item per class with no remainder; later tasks recompute M // n_seen and M % n_seen, old classes
    cannot grow past what they hold and take the remainder first. Hand-derived from that code for
    M = 10, 5 tasks x 2 classes: 2, 6, 8, 8 items after tasks 0-3."""
    buf = BalancedReplayBuffer(capacity=10, total_classes=10)
    sizes, counts = [], []
    for t in range(4):
        buf.end_task(t, {c: np.arange(100 * c, 100 * c + 50) for c in (2 * t, 2 * t + 1)})
        sizes.append(len(buf))
        counts.append(buf.counts())
    assert sizes == [2, 6, 8, 8]
    assert counts[0] == {0: 1, 1: 1}
    assert counts[1] == {0: 1, 1: 1, 2: 2, 3: 2}  # per = 10 // 4 = 2, remainder 2 spent on classes 0, 1
    assert counts[2] == {0: 1, 1: 1, 2: 2, 3: 2, 4: 1, 5: 1}  # per 1, remainder 4 spent on classes 0-3
    assert counts[3] == dict.fromkeys(range(8), 1)
    assert np.array_equal(buf.per_class[3], [300])  # earliest item kept
    buf = BalancedReplayBuffer(capacity=10, total_classes=20)  # not the special case
    buf.end_task(0, {0: np.arange(5), 1: np.arange(5, 10)})
    assert buf.counts() == {0: 5, 1: 5}


def test_balanced_buffer_small_classes_store_everything():
    buf = BalancedReplayBuffer(capacity=1000)
    buf.end_task(0, {0: np.arange(7), 1: np.arange(7, 10)})
    assert buf.counts() == {0: 7, 1: 3}


# ---------------------------------------------------------------- ER protocol


def test_batch_split_gives_every_seen_task_an_equal_share():
    cfg = ERConfig(buffer_size=100, batch_size=32, minibatch_size=32)
    assert batch_split(cfg, 0, 0) == (32, 0)  # empty buffer: plain SGD
    for t in range(1, 6):
        stream, replay = batch_split(cfg, t, 1000)
        assert stream == 64 // (t + 1) and stream + replay == 64
    assert batch_split(cfg, 3, 5) == (16, 5)  # replay limited by the buffer's length
    res = ERConfig(buffer_size=100, buffer_policy="reservoir")
    assert batch_split(res, 3, 1000) == (32, 32)
    assert batch_split(ERConfig(buffer_size=0), 3, 0) == (32, 0)


def test_step_cap_and_plans():
    data = split_digits(0)
    cfg = ERConfig(buffer_size=50, epochs=3)
    buf = BalancedReplayBuffer(50, data.n_classes)
    rng = np.random.default_rng(0)
    plan0 = plan_task(data, 0, buf, cfg, rng, None)
    n0 = len(data.task_indices(0))
    assert len(plan0) == 3 * int(np.ceil(n0 / 32)) and all(len(r) == 0 for _, r in plan0)
    buf.end_task(0, {c: data.class_indices(c) for c in data.task_classes[0]})
    plan1 = plan_task(data, 1, buf, cfg, rng, len(plan0))
    assert len(plan1) <= len(plan0) + 1
    assert all(len(s) <= 32 for s, _ in plan1) and all(len(r) == 32 for _, r in plan1)
    # stream items belong to task 1, replayed items to the buffer
    assert set(np.concatenate([s for s, _ in plan1])) <= set(data.task_indices(1))
    assert set(np.concatenate([r for _, r in plan1])) <= set(buf.indices)
    # every stream item is visited once per epoch
    s_all = np.concatenate(stream_batches(10, 4, 2, rng))
    assert np.array_equal(np.sort(s_all), np.repeat(np.arange(10), 2))


def test_step_cap_binds_from_the_third_task():
    """Task 2 streams 64 // 3 = 21 samples per step, so 3 epochs need more steps than task 0 (batch
    32); the official guard stops it at task 0's count + 1. Without the cap it would run them all."""
    data = split_digits(0)
    cfg = ERConfig(buffer_size=50, epochs=3)
    buf = BalancedReplayBuffer(50, data.n_classes)
    rng = np.random.default_rng(0)
    plans = []
    for t in range(3):
        plans.append(plan_task(data, t, buf, cfg, rng, len(plans[0]) if plans else None))
        buf.end_task(t, {c: data.class_indices(c) for c in data.task_classes[t]})
    n2 = len(data.task_indices(2))
    uncapped = 3 * int(np.ceil(n2 / (64 // 3)))
    assert uncapped > len(plans[0]) + 1  # the cap can bind here
    assert len(plans[2]) == len(plans[0]) + 1
    assert all(len(s) <= 21 for s, _ in plans[2]) and sum(len(s) == 21 for s, _ in plans[2]) >= len(plans[2]) - 3
    free = plan_task(data, 2, buf, ERConfig(buffer_size=50, epochs=3, cap_steps=False), rng, len(plans[0]))
    assert len(free) == uncapped


def test_buffer_size_zero_is_exactly_fine_tuning():
    data = tiny_data()
    cfg = ERConfig(buffer_size=0, epochs=2, batch_size=5, lr=0.05, momentum=0.9, weight_decay=1e-3)

    def make():
        torch.manual_seed(3)
        return ContinualNet(MLPFeatures(6, (16,), 4), data.n_classes, data.task_classes)

    er = make()
    run_continual(er, data, cfg, seed=7, evaluate=False)
    # a hand-written fine-tuning loop: same data order, no replay, new SGD per task
    ft = make()
    rng = np.random.default_rng(7)
    for t in range(data.n_tasks):
        idx = data.task_indices(t)
        opt = torch.optim.SGD(ft.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
        for b in stream_batches(len(idx), 5, 2, rng):
            loss = F.cross_entropy(ft(data.x_train[idx[b]]), data.y_train[idx[b]])
            opt.zero_grad()
            loss.backward()
            opt.step()
    for a, b in zip(er.state_dict().values(), ft.state_dict().values()):
        assert torch.equal(a, b)


def test_replay_changes_training_and_til_uses_task_heads():
    data = tiny_data()
    torch.manual_seed(0)
    net = ContinualNet(MLPFeatures(6, (16,), 4), data.n_classes, data.task_classes, multi_head=True)
    res = run_continual(net, data, ERConfig(setting="til", buffer_size=8, epochs=3, batch_size=8), seed=0)
    T = data.n_tasks
    assert res.acc_shallow.shape == (T, T) and np.isnan(res.acc_shallow[0, 1])
    assert np.all(np.isfinite(res.acc_deep[np.tril_indices(T)]))
    assert res.steps[1] <= res.steps[0] and res.steps[2] <= res.steps[0]
    assert len(res.buffer_last_task[0]) == 8  # the buffer replayed during the last task: 4 old classes x 2
    logits = torch.randn(3, data.n_classes)
    masked = net.task_logits(logits, torch.tensor([0, 1, 2]))
    assert torch.isinf(masked[0, 2:]).all() and torch.equal(masked[1, 2:4], logits[1, 2:4])


def test_same_seed_same_numbers():
    data = tiny_data()

    def once():
        torch.manual_seed(0)
        net = ContinualNet(MLPFeatures(6, (16,), 4), data.n_classes, data.task_classes)
        return run_continual(net, data, ERConfig(buffer_size=4, epochs=2, batch_size=8), seed=1)

    a, b = once(), once()
    assert np.array_equal(a.acc_shallow, b.acc_shallow, equal_nan=True) and a.losses == b.losses


# ---------------------------------------------------------------- data and configs


def test_datasets_are_consistent():
    d = split_digits(1)
    assert d.n_tasks == 5 and d.n_classes == 10 and d.x_train.shape[1] == 64
    assert len(d.y_train) + len(d.y_test) == 1797 and abs(len(d.y_test) - 540) <= 5
    assert torch.equal(d.t_train, d.y_train // 2)
    assert not torch.equal(split_digits(1).x_train, split_digits(2).x_train)  # split permuted by seed
    s = orthogonal_subspace_tasks(0)
    assert s.x_train.shape == (2100, 100) and s.n_classes == 10
    # class means of different tasks are (nearly) orthogonal
    m = torch.stack([s.x_train[s.y_train == c].mean(0) for c in range(10)])
    cos = torch.nn.functional.cosine_similarity(m[0], m[2], dim=0)
    assert abs(float(cos)) < 0.3


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError):
        ERConfig(setting="dil")
    with pytest.raises(ValueError):
        ERConfig(buffer_size=-1)
    with pytest.raises(ValueError):
        ERConfig(buffer_policy="fifo")
    d = tiny_data()
    with pytest.raises(ValueError):  # task ids that disagree with the labels
        ContinualData(d.x_train, d.y_train, torch.zeros_like(d.t_train), d.x_test, d.y_test, d.t_test, d.task_classes)


# ---------------------------------------------------------------- losses and evaluation heads


def test_til_loss_uses_only_the_samples_own_head():
    data = tiny_data()
    torch.manual_seed(0)
    net = ContinualNet(MLPFeatures(6, (16,), 4), data.n_classes, data.task_classes, multi_head=True)
    x, y, t = data.x_train[[0, 30, 60]], data.y_train[[0, 30, 60]], data.t_train[[0, 30, 60]]
    logits = net(x)
    # hand: CE over the 2 units of each sample's task, label shifted into that block (official adjust_outputs)
    hand = torch.stack(
        [F.cross_entropy(logits[i, 2 * t[i] : 2 * t[i] + 2][None], (y[i] - 2 * t[i])[None]) for i in range(3)]
    ).mean()
    assert torch.allclose(er_loss(net, net, (x, y, t), "til"), hand)
    assert torch.allclose(er_loss(net, net, (x, y, t), "cil"), F.cross_entropy(logits, y))
    assert not torch.allclose(hand, F.cross_entropy(logits, y))


def test_shallow_accuracy_masks_unseen_classes_in_cil_and_other_heads_in_til():
    data = tiny_data()
    net = ContinualNet(MLPFeatures(6, (16,), 4), data.n_classes, data.task_classes)
    idx = data.task_indices(0, "test")
    logits = np.zeros((len(data.y_test), data.n_classes))
    logits[idx, data.y_test.numpy()[idx]] = 1.0  # the right class scores 1 ...
    logits[idx, 5] = 2.0  # ... but a class of task 2 scores 2
    logits[idx, 2] = 1.5  # and a class of task 1 scores 1.5
    assert shallow_accuracy(net, data, logits, session=0, task=0, setting="cil") == 1.0  # only task 0 seen
    assert shallow_accuracy(net, data, logits, session=1, task=0, setting="cil") == 0.0  # task 1's unit wins
    assert shallow_accuracy(net, data, logits, session=2, task=0, setting="til") == 1.0  # own head only
    idx1 = data.task_indices(1, "test")
    logits[idx1, data.y_test.numpy()[idx1]] = 1.0
    logits[idx1, 0] = 2.0  # a class of task 0 outscores task 1's own units
    assert shallow_accuracy(net, data, logits, session=2, task=1, setting="til") == 1.0
    assert shallow_accuracy(net, data, logits, session=2, task=1, setting="cil") == 0.0


def test_cil_probe_is_fit_on_every_seen_task_and_til_probes_per_task():
    data = tiny_data()
    rng = np.random.default_rng(0)
    feats = SessionFeatures(rng.standard_normal((len(data.y_train), 3)), None, rng.standard_normal((24, 3)), None)
    fits = []

    class Recorder(LinearProbe):
        def fit(self, z, y):
            fits.append(sorted(set(np.asarray(y).tolist())))
            return super().fit(z, y)

    deep_accuracies(data, feats, 2, "cil", Recorder)
    assert fits == [[0, 1, 2, 3, 4, 5]]  # one probe over all seen classes, full training sets
    fits.clear()
    out = deep_accuracies(data, feats, 1, "til", Recorder)
    assert fits == [[0, 1], [2, 3]] and np.isnan(out[2])
