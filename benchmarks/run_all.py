"""Overhead benchmarks, reported as ratios (lower is better; 1.0 = same speed).

(a) one training step (forward, backward, AdamW) of iclr26's Transformer blocks against
    torch.nn.TransformerEncoder of the same size (pre-LN, GELU, no dropout, bidirectional),
    target <= 1.1;
(b) core.train.fit against a bare hand-written loop doing the same work (AdamW, the same lr
    schedule, grad clipping), target <= 1.05;
(c) core.sandbox: a trivial call through a persistent SandboxServer against a one-shot run_untrusted
    call (see sandbox_overhead.py), target <= 0.25;
(d) an InfGen training step with the sparse self-attention against the dense one (see infgen_train_step.py);
(e) a B0 + APT relation-head step against a B0 step (see apt_step_time.py; the plug-in's own cost).

Run: `python benchmarks/run_all.py [--repeats 5]`. Times are medians over repeats of interleaved
runs, so slow phases of a shared machine hit both sides alike. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from iclr26.core.parallel import torch_threads
from iclr26.core.train import TrainConfig, fit, lr_at, make_optimizer
from iclr26.core.transformer import Transformer, TransformerConfig

D, H, L, FF, T, B, V = 128, 4, 4, 512, 128, 16, 64


def ours() -> nn.Module:
    cfg = TransformerConfig(
        vocab_size=V, d_model=D, n_layers=L, n_heads=H, d_ff=FF, max_len=T, causal=False, pos="none"
    )
    model = Transformer(cfg)

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x):
            return self.m(inputs_embeds=x).last_hidden

    return Wrap()


def reference() -> nn.Module:
    layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
    enc = nn.TransformerEncoder(layer, L, norm=nn.LayerNorm(D), enable_nested_tensor=False)
    head = nn.Linear(D, V, bias=False)

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc, self.head = enc, head

        def forward(self, x):
            h = self.enc(x)
            self.head(h)  # same output-head work as ours (tied head there)
            return h

    return Wrap()


def time_steps(model: nn.Module, n: int, x: torch.Tensor) -> float:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    start = time.perf_counter()
    for _ in range(n):
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - start


def bench_transformer(repeats: int, steps: int) -> float:
    torch.manual_seed(0)
    x = torch.randn(B, T, D)
    a, b = ours(), reference()
    time_steps(a, 2, x)
    time_steps(b, 2, x)
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(time_steps(a, steps, x))
        tb.append(time_steps(b, steps, x))
    return statistics.median(ta) / statistics.median(tb)


def bench_fit(repeats: int, steps: int) -> float:
    torch.manual_seed(0)
    data = [torch.randn(B, T, D) for _ in range(8)]
    cfg = TrainConfig(steps=steps, lr=1e-3, warmup_steps=2, grad_clip=1.0, progress=False)

    def loss_fn(m, x):
        return m(x).pow(2).mean()

    def get_batch(step, rank, world):
        return data[step % len(data)]

    def bare(model):
        opt = make_optimizer(model, cfg)
        model.train()
        for step in range(cfg.steps):
            for g in opt.param_groups:
                g["lr"] = lr_at(step, cfg)
            loss = loss_fn(model, get_batch(step, 0, 1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            float(loss.detach())

    model = ours()
    fit(model, loss_fn, get_batch, TrainConfig(steps=2, progress=False))
    tf, tb = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fit(model, loss_fn, get_batch, cfg)
        tf.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        bare(model)
        tb.append(time.perf_counter() - t0)
    return statistics.median(tf) / statistics.median(tb)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()
    torch.set_num_threads(2)
    r1 = bench_transformer(args.repeats, args.steps)
    print(f"transformer train step / nn.TransformerEncoder: {r1:.3f}  (target <= 1.10)")
    r2 = bench_fit(args.repeats, args.steps)
    print(f"fit() / bare loop:                              {r2:.3f}  (target <= 1.05)")
    spec = importlib.util.spec_from_file_location("sandbox_overhead", Path(__file__).with_name("sandbox_overhead.py"))
    sandbox_overhead = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sandbox_overhead)
    one, srv, r3 = sandbox_overhead.bench_sandbox(args.repeats, 20)
    print(
        f"sandbox server call / one-shot call:            {r3:.3f}  (target <= 0.25; "
        f"{srv * 1e3:.1f} ms vs {one * 1e3:.1f} ms)"
    )
    spec = importlib.util.spec_from_file_location("infgen_train_step", Path(__file__).with_name("infgen_train_step.py"))
    infgen_train_step = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(infgen_train_step)
    with torch_threads(1):
        dense, sparse, r4, _ = infgen_train_step.bench_infgen(args.repeats, args.steps)
    print(f"infgen step, sparse / dense attention:          {r4:.3f}  ({sparse * 1e3:.0f} ms vs {dense * 1e3:.0f} ms)")
    spec = importlib.util.spec_from_file_location("apt_step_time", Path(__file__).with_name("apt_step_time.py"))
    apt_step_time = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(apt_step_time)
    with torch_threads(1):
        for name, shape in apt_step_time.SHAPES.items():
            b0, apt, r5, _ = apt_step_time.bench_apt(shape, args.repeats, args.steps)
            label = f"apt step / b0 step ({name}):"
            print(f"{label:<48}{r5:.3f}  ({apt * 1e3:.1f} ms vs {b0 * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
