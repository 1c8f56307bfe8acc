"""Round 2 conditions on the edited image I' = T(y', I) (paper Sec. 3.1: y ~ pi(. | I + I', x, y')) in the two
paths that once fed the original image I in its place: the log-probabilities of the GRPO update (old, reference
and every minibatch's current log-probs, through ``Rollout.select``) and the paper-scale batched rollout."""

import json

import numpy as np
import torch
from PIL import Image

from iclr26.vtool_r1.charts import make_chart
from iclr26.vtool_r1.hf_policy import VToolEnv, load_refocus, two_round_rollout_batch
from iclr26.vtool_r1.model import ID, VOCAB, TinyToolVLM, TinyVLMConfig
from iclr26.vtool_r1.rollout import TAIL_LEN, Rollout
from iclr26.vtool_r1.vtool import VToolConfig, grpo_step

TINY = TinyVLMConfig(d_model=32, n_layers=1, n_heads=2)


class Spy(TinyToolVLM):
    """TinyToolVLM that records the image batches of every forward pass."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.seen: list[list[np.ndarray]] = []

    def forward(self, mode_ids, images, tail):
        self.seen.append([np.array(im) for im in images])
        return super().forward(mode_ids, images, tail)


def _rollout() -> Rollout:
    rng = np.random.default_rng(0)
    img1 = np.stack([make_chart(rng, "VAL").image for _ in range(4)])
    img2 = 255 - img1  # stands for the tool's output: differs from I everywhere it matters
    tail = torch.tensor(rng.integers(0, len(VOCAB), (4, TAIL_LEN)))
    mask = torch.zeros(4, TAIL_LEN - 1)
    mask[:, -4:] = 1
    return Rollout(
        torch.full((4,), ID["TOOLS"]),
        torch.tensor([2, 2, 1, 2]),  # row 2: a direct answer (one image)
        img1,
        img2,
        tail,
        mask,
        torch.tensor([1.0, 0.0, 1.0, 0.0]),
        torch.tensor([0, 0, 1, 1]),
        ["VAL"] * 4,
        torch.tensor([True, True, False, True]),
        torch.tensor([True, True, False, True]),
        [("", "")] * 4,
    )


def test_every_log_prob_of_the_update_step_sees_the_edited_image():
    torch.manual_seed(0)
    policy, ref = Spy(TINY), Spy(TINY)
    ro = _rollout()
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    cfg = VToolConfig(minibatches=2, kl_coef=0.01)
    grpo_step(policy, ref, opt, ro, cfg, torch.Generator().manual_seed(0))
    two = [np.flatnonzero(ro.n_images.numpy() == 2)]
    for model, least in ((policy, 1 + 2), (ref, 1)):  # old + one per minibatch; reference once
        calls = [imgs for imgs in model.seen if len(imgs) == 2]
        assert len(calls) >= least
        for first, second in calls:
            for a, b in zip(first, second, strict=True):  # each row: (I, I') of the same two-image sample
                k = [j for j in two[0] if (ro.img1[j] == a).all()]
                assert len(k) == 1 and (ro.img2[k[0]] == b).all() and not (b == a).all()
    # the full-batch forwards carry every two-image row's I' once
    full = [imgs[1] for imgs in policy.seen if len(imgs) == 2 and len(imgs[1]) == len(two[0])]
    assert full and all((f == ro.img2[two[0]]).all() for f in full)


def test_select_keeps_each_rows_edited_image():
    ro = _rollout()
    sub = ro.select(torch.tensor([3, 0]))
    assert (sub.img2 == ro.img2[[3, 0]]).all() and (sub.img1 == ro.img1[[3, 0]]).all()
    assert sub.n_images.tolist() == [2, 2]


def test_batched_paper_rollout_sends_the_tool_output_as_the_second_image(tmp_path):
    rng = np.random.default_rng(1)
    charts = [make_chart(rng, "VAL") for _ in range(2)]
    lines = []
    for i, s in enumerate(charts):
        Image.fromarray(s.image).save(tmp_path / f"c{i}.png")
        meta = json.dumps({"type": "v_bar", "x_values_bbox": s.bboxes})
        lines.append(
            json.dumps({"figure_path": f"c{i}.png", "question": s.question, "answer": s.answer, "metadata": meta})
        )
    (tmp_path / "d.jsonl").write_text("\n".join(lines) + "\n")
    rows = load_refocus(tmp_path / "d.jsonl")
    calls = [
        f"```python\nimg = focus_on_columns_with_mask(image_1, ['{s.args[0]}'], columns_bbox)\ndisplay(img)\n```"
        for s in charts
    ]
    seen: list[list[list[dict]]] = []

    def generate_batch(chats):
        seen.append(chats)
        return calls if len(seen) == 1 else [f"FINAL ANSWER: {s.answer}. TERMINATE" for s in charts]

    for version in ("v2", "v1"):
        seen.clear()
        env = VToolEnv(version=version)
        out = two_round_rollout_batch(generate_batch, rows, env)
        assert [o["tool_ok"] for o in out] == [True, True] and len(seen) == 2
        for r, y1, chat in zip(rows, calls, seen[1], strict=True):
            want = env.execute(y1, r["image"], r["metadata"])[1].image  # I' = T(y', I), pixel for pixel
            images = [c["image"] for m in chat for c in m["content"] if c["type"] == "image"]
            assert len(images) == 2 and np.array_equal(np.asarray(images[0]), np.asarray(r["image"]))
            assert np.array_equal(np.asarray(images[1]), want)
            assert not np.array_equal(want, np.asarray(r["image"]))
