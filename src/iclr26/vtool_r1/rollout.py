"""The two-round multimodal rollout of VTool-R1 (paper section 3.1) for TinyToolVLM, with trainable masks.

Round 1: ``y' ~ π_θ(· | I, x)``. Its text goes through :func:`parse_action`; a tool call is executed by
:class:`ToolExecutor` (real PIL tools, sandbox for anything off the whitelist), giving ``I' = 𝒯(y', I)``.
Round 2 (only after a tool call): ``y ~ π_θ(· | I ⊕ I', x, y')``. The reward is the outcome reward of the
final response (exact match on ``FINAL ANSWER``).

Every sample becomes ONE training sequence (fixed layout; ``tail`` are the token positions after the images):

=================  ==================================  ============================  ==========================
path               sequence                             trainable tokens (mask = 1)   reward from
=================  ==================================  ============================  ==========================
direct (notool)    [BOS TOOLS][I][x, y']                y' (round-1 tokens)           y'
tool, v2           [BOS TOOLS][I][I'][x, y', OBS, y]    y only (y' and OBS are 0)     y
tool ok, v1        same as v2 (sample replaced)         y only                        y
tool failed, v1    [BOS TOOLS][I][x, y']                y' (gets the reward-0 push)   y' (no FINAL ANSWER)
tool failed, v2    [BOS TOOLS][I][x, y', OBS_FAIL, y]   y only                        y
pure (text GRPO)   [BOS PURE][I][x, y]                  y                             y
=================  ==================================  ============================  ==========================

A failed v2 call gets the failure observation as text only and no second image (the official agent loop
appends an image only on success). ``train_tool_tokens=True`` (NOT the paper) additionally makes y' trainable
on the tool path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .charts import ChartSample
from .executor import ToolExecutor
from .model import ANS_LEN, ID, Q_LEN, R1_LEN, TinyToolVLM, answer_text, detokenize_round1, question_tokens, sample_tail
from .parser import parse_action
from .reward import exact_match_reward, extract_final_answer

__all__ = ["Rollout", "evaluate", "read_second_image", "rollout_pure", "rollout_tools", "sequence_logprobs"]

TAIL_LEN = Q_LEN + R1_LEN + 1 + ANS_LEN


@dataclass
class Rollout:
    """A batch of finished samples, ready for the GRPO loss (index i = one sample)."""

    mode: Tensor  # [B] PURE or TOOLS id
    n_images: Tensor  # [B] 1 or 2
    img1: np.ndarray  # [B, H, W, 3] uint8
    img2: np.ndarray  # [B, H, W, 3] uint8 (unused where n_images == 1)
    tail: Tensor  # [B, TAIL_LEN] token ids (PAD-filled)
    mask: Tensor  # [B, TAIL_LEN - 1] 1 = trainable target token tail[:, 1:]
    rewards: Tensor  # [B] outcome reward
    group: Tensor  # [B] prompt id (uid): GRPO groups
    qtype: list = field(default_factory=list)  # question type per sample
    called: Tensor | None = None  # [B] bool: round 1 asked for a tool (tool or failed)
    tool_ok: Tensor | None = None  # [B] bool: the tool step displayed an image
    texts: list = field(default_factory=list)  # (y' text, y text) per sample, for inspection

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    def select(self, idx: Tensor) -> Rollout:
        i = idx.tolist()
        return Rollout(
            self.mode[idx],
            self.n_images[idx],
            self.img1[i],
            self.img2[i],
            self.tail[idx],
            self.mask[idx],
            self.rewards[idx],
            self.group[idx],
            [self.qtype[k] for k in i] if self.qtype else [],
            None if self.called is None else self.called[idx],
            None if self.tool_ok is None else self.tool_ok[idx],
            [self.texts[k] for k in i] if self.texts else [],
        )


def sequence_logprobs(model: TinyToolVLM, ro: Rollout) -> Tensor:
    """``log π(tail[:, t+1] | ...)`` for every tail position: [B, TAIL_LEN - 1] (one forward per image count)."""
    B = len(ro)
    out = torch.zeros(B, TAIL_LEN - 1, device=model.patch_pos.device)
    for k in (1, 2):
        rows = (ro.n_images == k).nonzero().flatten()
        if rows.numel() == 0:
            continue
        r = rows.tolist()
        imgs = [ro.img1[r]] + ([ro.img2[r]] if k == 2 else [])
        tail = ro.tail[rows]
        logits = model(ro.mode[rows], imgs, tail)[:, :-1].float()
        lp = logits.log_softmax(-1).gather(-1, tail[:, 1:, None].to(logits.device)).squeeze(-1)
        out = out.index_put((rows.to(out.device),), lp)
    return out


def _answer_reward(text: str, gt: str, version: str) -> float:
    return exact_match_reward(extract_final_answer(text, version), gt)


def _first_stop(tokens: Tensor, stops: tuple[int, ...]) -> int:
    """Number of valid tokens (up to and including the first stop, or all non-PAD)."""
    n = 0
    for t in tokens.tolist():
        if t == ID["PAD"]:
            break
        n += 1
        if t in stops:
            break
    return n


@torch.no_grad()
def rollout_pure(
    model: TinyToolVLM,
    samples: list[ChartSample],
    group: Tensor,
    temperature: float,
    generator: torch.Generator | None = None,
    version: str = "v2",
) -> Rollout:
    """Text-only rollouts: ``[BOS PURE][I][x] -> y`` (the pure run / text-only GRPO arm)."""
    B = len(samples)
    img = np.stack([s.image for s in samples])
    q = torch.tensor([question_tokens(s.qtype, s.args) for s in samples])
    mode = torch.full((B,), ID["PURE"])
    ans = sample_tail(model, mode, [img], q, ANS_LEN, (ID["EOS"],), temperature, generator)
    tail = torch.full((B, TAIL_LEN), ID["PAD"])
    tail[:, :Q_LEN], tail[:, Q_LEN : Q_LEN + ANS_LEN] = q, ans
    mask = torch.zeros(B, TAIL_LEN - 1)
    rewards, texts = torch.zeros(B), []
    for i, s in enumerate(samples):
        n = _first_stop(ans[i], (ID["EOS"],))
        mask[i, Q_LEN - 1 : Q_LEN - 1 + n] = 1
        y = answer_text(ans[i])
        rewards[i] = _answer_reward(y, s.answer, version)
        texts.append(("", y))
    return Rollout(
        mode,
        torch.ones(B, dtype=torch.long),
        img,
        np.zeros_like(img),
        tail,
        mask,
        rewards,
        group,
        [s.qtype for s in samples],
        torch.zeros(B, dtype=torch.bool),
        torch.zeros(B, dtype=torch.bool),
        texts,
    )


@torch.no_grad()
def rollout_tools(
    model: TinyToolVLM,
    samples: list[ChartSample],
    group: Tensor,
    executor: ToolExecutor,
    temperature: float,
    round2_temperature: float,
    version: str = "v2",
    generator: torch.Generator | None = None,
    allow_tools: bool = True,
    train_tool_tokens: bool = False,
) -> Rollout:
    """Two-round VTool-R1 rollouts with ``version`` ("v1" / "v2") masking and failure semantics.

    ``allow_tools=False`` forces every round-1 response to be treated as NOTOOL (the reduction test).
    """
    if version not in ("v1", "v2"):
        raise ValueError(f"version must be 'v1' or 'v2', got {version!r}")
    B = len(samples)
    img1 = np.stack([s.image for s in samples])
    q = torch.tensor([question_tokens(s.qtype, s.args) for s in samples])
    mode = torch.full((B,), ID["TOOLS"])
    r1_stops = (ID["EOS"], ID["ENDCALL"])
    y1 = sample_tail(model, mode, [img1], q, R1_LEN, r1_stops, temperature, generator)
    texts1 = [detokenize_round1(y1[i]) for i in range(B)]
    parsed = [parse_action(t, version) if allow_tools else parse_action("", version) for t in texts1]

    # ---- execute the tool calls (batched; whitelisted ones in-process, the rest in the sandbox)
    img2 = np.full_like(img1, 255)
    tool_ok = torch.zeros(B, dtype=torch.bool)
    called = torch.tensor([p.kind != "notool" for p in parsed])
    run = [i for i, p in enumerate(parsed) if p.kind == "tool"]
    if run:
        results = executor.execute_many(
            [parsed[i].code for i in run], [img1[i] for i in run], [samples[i].bboxes for i in run]
        )
        for i, res in zip(run, results, strict=True):
            if res.ok and res.image is not None and res.image.shape == img1[i].shape:
                img2[i], tool_ok[i] = res.image, True

    # ---- round 2 for every tool call (v1: successful ones only); I' joins the input only on success
    second = [i for i in range(B) if called[i] and (tool_ok[i] or version == "v2")]
    tail = torch.full((B, TAIL_LEN), ID["PAD"])
    tail[:, :Q_LEN] = q
    tail[:, Q_LEN : Q_LEN + R1_LEN] = y1
    n_images = torch.ones(B, dtype=torch.long)
    y2_texts = [""] * B
    for ok in (True, False):
        rows = [i for i in second if bool(tool_ok[i]) == ok]
        if not rows:
            continue
        idx = torch.tensor(rows)
        obs = torch.full((len(rows), 1), ID["OBS"] if ok else ID["OBS_FAIL"])
        images = [img1[rows], img2[rows]] if ok else [img1[rows]]
        prefix = torch.cat([q[idx], y1[idx], obs], 1)
        y2 = sample_tail(model, mode[idx], images, prefix, ANS_LEN, (ID["EOS"],), round2_temperature, generator)
        tail[idx, Q_LEN + R1_LEN] = obs[:, 0]
        tail[idx, Q_LEN + R1_LEN + 1 :] = y2
        n_images[idx] = len(images)
        for j, i in enumerate(rows):
            y2_texts[i] = answer_text(y2[j])

    mask = torch.zeros(B, TAIL_LEN - 1)
    rewards = torch.zeros(B)
    texts = []
    in_second = set(second)
    for i, s in enumerate(samples):
        n1 = _first_stop(y1[i], r1_stops)
        if i in in_second:  # trainable: y only (positions predicting tail[Q+R1+1 : ...])
            n2 = _first_stop(tail[i, Q_LEN + R1_LEN + 1 :], (ID["EOS"],))
            start = Q_LEN + R1_LEN  # mask index j trains tail[j + 1]
            mask[i, start : start + n2] = 1
            if train_tool_tokens:
                mask[i, Q_LEN - 1 : Q_LEN - 1 + n1] = 1
            rewards[i] = _answer_reward(y2_texts[i], s.answer, version)
        else:  # direct answer, or a v1 failed call: round-1 tokens are trained on their own reward
            mask[i, Q_LEN - 1 : Q_LEN - 1 + n1] = 1
            tail[i, Q_LEN + R1_LEN :] = ID["PAD"]
            rewards[i] = 0.0 if parsed[i].kind != "notool" else _answer_reward(texts1[i], s.answer, version)
        texts.append((texts1[i], y2_texts[i]))
    return Rollout(
        mode, n_images, img1, img2, tail, mask, rewards, group, [s.qtype for s in samples], called, tool_ok, texts
    )


@torch.no_grad()
def read_second_image(model: TinyToolVLM, samples: list[ChartSample], batch_size: int = 256) -> float:
    """Greedy PURE-mode accuracy with each chart as image 2 after another chart of ``samples`` as image 1
    (``samples[i + 1]``): can the model read a chart placed where I' sits in round 2?"""
    was = model.training
    model.eval()
    n, hits = len(samples), []
    for b in range(0, n, batch_size):
        chunk = samples[b : b + batch_size]
        other = np.stack([samples[(b + i + 1) % n].image for i in range(len(chunk))])
        q = torch.tensor([question_tokens(s.qtype, s.args) for s in chunk])
        mode = torch.full((len(chunk),), ID["PURE"])
        ans = sample_tail(model, mode, [other, np.stack([s.image for s in chunk])], q, ANS_LEN, (ID["EOS"],), 0.0, None)
        hits += [_answer_reward(answer_text(ans[i]), s.answer, "v2") for i, s in enumerate(chunk)]
    model.train(was)
    return float(np.mean(hits)) if hits else float("nan")


@torch.no_grad()
def evaluate(
    model: TinyToolVLM,
    samples: list[ChartSample],
    mode: str,
    executor: ToolExecutor | None = None,
    version: str = "v2",
    batch_size: int = 256,
) -> dict:
    """Greedy accuracy overall and per question type; for ``mode="tools"`` also the tool-call rate and
    success rate per type. Returns plain floats (fractions in [0, 1])."""
    was = model.training
    model.eval()
    rewards, called, ok, qtypes, arg_ok = [], [], [], [], []
    for b in range(0, len(samples), batch_size):
        chunk = samples[b : b + batch_size]
        g = torch.arange(len(chunk))
        if mode == "pure":
            ro = rollout_pure(model, chunk, g, 0.0, version=version)
        elif mode == "tools":
            ro = rollout_tools(model, chunk, g, executor or ToolExecutor(version=version), 0.0, 0.0, version)
        else:
            raise ValueError(f"mode must be 'pure' or 'tools', got {mode!r}")
        rewards.append(ro.rewards)
        called.append(ro.called.float())
        ok.append(ro.tool_ok.float())
        qtypes += ro.qtype
        for s, (y1, _), c in zip(chunk, ro.texts, ro.called.tolist(), strict=True):
            if c and s.qtype in ("VAL", "CMP"):  # did the call name exactly the question's labels?
                named = set(re.findall(r'"([a-z]+)"', y1))
                arg_ok.append(float(named == set(s.args)))
    model.train(was)
    r, c, k = torch.cat(rewards), torch.cat(called), torch.cat(ok)
    out = {
        "acc": float(r.mean()),
        "tool_rate": float(c.mean()),
        "tool_success": float(k.sum() / c.sum()) if c.sum() > 0 else float("nan"),
        "call_arg_acc": float(np.mean(arg_ok)) if arg_ok else float("nan"),
    }
    for t in sorted(set(qtypes)):
        sel = torch.tensor([q == t for q in qtypes])
        out[f"acc_{t}"] = float(r[sel].mean())
        out[f"tool_rate_{t}"] = float(c[sel].mean())
    return out
