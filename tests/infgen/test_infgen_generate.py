"""Generation: reductions, forcing, insertion modes, reject sampling, eviction."""

import numpy as np
import pytest
import torch

from iclr26.infgen.generate import Generator, RolloutConfig, log_replay, top_p_sample
from iclr26.infgen.metrics import box_corners, boxes_overlap
from iclr26.infgen.model import InfGenConfig, InfGenModel
from iclr26.infgen.tokenizer import SOS, MotionTokenizer, SceneTokenizer
from iclr26.infgen.world import TinyTown, align_to_even_steps, cut_windows

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def setup():
    town = TinyTown()
    windows = cut_windows(town.simulate(80, seed=7))
    tok = SceneTokenizer(motion=MotionTokenizer(n_bins=13))
    torch.manual_seed(0)
    model = InfGenModel(InfGenConfig(d_model=32, n_dec_layers=1, n_actions=169, max_segments=128))
    return windows, tok, Generator(model, tok)


def test_forcing_everything_reproduces_the_log(setup):
    windows, tok, gen = setup
    seed = windows[4]
    out = gen.rollout(seed, seed.T, force_all=True)
    al = align_to_even_steps(seed)
    _, info = tok(al)
    assert np.array_equal(out.valid, al.valid[:, np.argsort(al.uid)]) or out.valid.sum() == al.valid.sum()
    col = {u: j for j, u in enumerate(al.uid)}
    for a, u in enumerate(out.uid):
        j = col[int(u)]
        assert np.array_equal(out.valid[:, a], al.valid[:, j])
        assert np.allclose(out.states[out.valid[:, a], a], info["recon"][al.valid[:, j], j], atol=1e-9)
        # ... and the reconstruction is the log up to the tokenizer's corner error
        assert np.abs(out.states[out.valid[:, a], a, :2] - al.states[al.valid[:, j], j, :2]).max() < 0.35
    assert np.array_equal(out.tl, seed.tl)


def test_insertion_off_no_new_ids_and_count_non_increasing(setup):
    windows, tok, gen = setup
    seed = windows[2]
    out = gen.rollout(seed, 30, RolloutConfig(insertion="off"), rng=np.random.default_rng(1))
    seed_ids = set(seed.uid.tolist())
    assert set(out.uid.tolist()) <= seed_ids
    c = out.counts()
    assert np.all(np.diff(c[3:]) <= 0)  # after the forced second, agents can only leave


def test_as_blocks_only_at_even_steps(setup):
    windows, tok, _ = setup
    seq, _ = tok(windows[1])
    assert set(np.unique(seq.t[seq.kind == SOS]).tolist()) == set(range(0, windows[1].T, 2))


def test_released_mode_respects_density_target(setup):
    windows, tok, gen = setup
    seed = windows[3]
    target = 9
    out = gen.rollout(
        seed,
        24,
        RolloutConfig(insertion="released", max_insert_per_block=2),
        density_target=target,
        rng=np.random.default_rng(2),
    )
    c = out.counts()
    new = set(out.uid.tolist()) - set(seed.uid.tolist())
    assert new, "released mode inserted nothing below the target"
    # insertion only at even steps, at most 2 per block, never above the target by insertion
    first = out.valid.argmax(0)
    new_cols = [i for i, u in enumerate(out.uid) if int(u) in new]
    assert all(first[i] % 2 == 0 for i in new_cols)
    for t in range(out.T):
        n_new = sum(first[i] == t for i in new_cols)
        assert n_new <= 2
        if n_new:
            assert c[t] <= max(target, c[t - 1] if t else 0)


def test_learned_mode_runs_and_rejects_overlaps(setup):
    windows, tok, gen = setup
    out = gen.rollout(
        windows[0], 12, RolloutConfig(insertion="learned", reject_sampling=True), rng=np.random.default_rng(3)
    )
    first = out.valid.argmax(0)
    for t in range(out.T):
        born = np.flatnonzero((first == t) & out.valid[t])
        if t < 3 or born.size == 0:
            continue
        # a new box never overlaps a box that existed when it was inserted (or inserted before it)
        s = out.states[t]
        for a in born:
            others = [b for b in np.flatnonzero(out.valid[t]) if b != a and (first[b] < t or b < a)]
            if not others:
                continue
            ca = box_corners(*s[a, :3], *out.size[a, :2])
            cb = box_corners(s[others, 0], s[others, 1], s[others, 2], out.size[others, 0], out.size[others, 1])
            assert not boxes_overlap(ca[None], cb).any()


def test_eviction_far_from_map(setup):
    windows, tok, gen = setup
    seed = windows[0]
    far = type(seed)(seed.states.copy(), seed.valid.copy(), seed.size, seed.types, seed.uid, seed.tl, seed.map)
    a = int(np.flatnonzero(far.valid[0])[0])
    far.states[:, a, :2] = [far.map.bound + 30.0, 0.0]  # outside the map for the whole seed
    out = gen.rollout(far, 6, RolloutConfig(insertion="off", force_steps=1), rng=np.random.default_rng(0))
    col = list(out.uid).index(int(far.uid[a]))
    assert out.valid[0, col] and not out.valid[1:, col].any()


def test_log_replay_then_nothing(setup):
    windows, _, _ = setup
    out = log_replay(windows[0], 40)
    assert out.counts()[: windows[0].T].sum() == windows[0].valid.sum()
    assert out.counts()[windows[0].T :].sum() == 0


def test_overlap_test_hand_cases():
    a = box_corners(0.0, 0.0, 0.0, 4.0, 2.0)
    assert boxes_overlap(a, box_corners(3.9, 0.0, 0.0, 4.0, 2.0))
    assert not boxes_overlap(a, box_corners(4.1, 0.0, 0.0, 4.0, 2.0))
    assert boxes_overlap(a, box_corners(0.0, 1.5, np.pi / 2, 4.0, 2.0))
    assert not boxes_overlap(a, box_corners(2.0, 2.5, np.pi / 4, 2.0, 1.0))


def test_overlap_rotated_boxes_whose_bounding_boxes_overlap():
    """A 1 x 1 box turned 45 deg near the corner (2, 1) of a 4 x 2 box at the origin: its edge facing the corner
    is the line x + y = cx + cy - 0.7071; the boxes overlap iff that is below 3 (the corner's x + y)."""
    a = box_corners(0.0, 0.0, 0.0, 4.0, 2.0)
    far = box_corners(2.6, 1.6, np.pi / 4, 1.0, 1.0)  # 3.493 > 3: apart, although the bounding boxes overlap
    near = box_corners(2.3, 1.3, np.pi / 4, 1.0, 1.0)  # 2.893 < 3: the corner (2, 1) is inside
    assert not boxes_overlap(a, far) and boxes_overlap(a, near)
    out = boxes_overlap(a[None], np.stack([far, near, a]))  # broadcasting: [1] against [3]
    assert out.shape == (3,) and out.tolist() == [False, True, True]
    assert boxes_overlap(a, box_corners(4.0, 0.0, 0.0, 4.0, 2.0))  # touching edges count as overlap


def test_top_p_keeps_the_token_that_crosses_p():
    from iclr26.infgen.generate import top_p_keep

    probs = torch.tensor([0.125, 0.5, 0.125, 0.25])
    kept = {
        p: torch.nonzero(top_p_keep(probs, p)).flatten().tolist() for p in (1e-9, 0.01, 0.5, 0.51, 0.7, 0.75, 0.9, 1.0)
    }
    assert kept[1e-9] == kept[0.01] == [1]  # at least one token (1 - 1e-9 rounds to 1 in float32)
    assert kept[0.5] == [1]  # 0.5 reaches p exactly: nothing more is needed
    assert kept[0.51] == [1, 3]  # 0.5 < 0.51: the next token (0.25) crosses p and is kept
    assert kept[0.7] == [1, 3] and kept[0.75] == [1, 3]
    assert kept[0.9] == [0, 1, 2, 3] and kept[1.0] == [0, 1, 2, 3]
    gen = torch.Generator().manual_seed(0)
    draws = top_p_sample(torch.log(probs).expand(4000, 4), 0.7, 1.0, gen)
    counts = torch.bincount(draws, minlength=4).tolist()
    assert counts[0] == counts[2] == 0 and abs(counts[1] / 4000 - 2 / 3) < 0.03  # renormalised over {1, 3}


def test_top_p_matches_transformers_warper():
    transformers = pytest.importorskip("transformers")
    from iclr26.infgen.generate import top_p_keep

    g = torch.Generator().manual_seed(1)
    logits = torch.randn(64, 50, generator=g) * 3
    for p in (0.1, 0.5, 0.9, 0.95):
        warped = transformers.TopPLogitsWarper(top_p=p)(None, logits.clone())
        assert torch.equal(top_p_keep(torch.softmax(logits, -1), p), warped > float("-inf"))
