"""Paper-scale training: Pythia-shaped recursive models on a pre-tokenized corpus, with core.train.fit.

The paper trains every arm from scratch on 250B tokens of deduplicated Pile (global batch 512 x 4096,
AdamW(0.9, 0.95), wd 0.01, 1% warmup, cosine to 10% of peak, bf16). Here the data is a local file of
GPT-NeoX token ids (``.npy``, or a raw ``.bin`` of uint16 as in Pythia's memmaps); the last
``val_tokens`` tokens are the validation split. One process or many under torchrun::

    torchrun --nproc_per_node 8 -m iclr26.mesh.train --pythia /models/pythia-410m/config.json \\
        --tokens /data/pile_deduped.bin --layout 4+8R2+4 --scheme mesh --steps 120818 \\
        --batch 64 --seq-len 2048 --out runs/mesh_410m_mesh

``--batch`` is the global batch per optimiser step, split into ``--grad-accum`` micro-batches and over the
ranks (the paper's 512 x 4096 on 8 GPUs: ``--batch 512 --grad-accum 16`` gives 4 sequences per GPU per
micro-batch). ``--init-from DIR`` starts from a local Hugging Face checkpoint instead of scratch (see
``pythia.load_pythia``). Rank 0 writes ``result.json`` and the trained model ``model.pt``
(:func:`load_trained`), which :class:`iclr26.mesh.evaluate.MeshLM` scores with lm-evaluation-harness.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from iclr26.core.experiment import ExperimentError, RunContext, RunOutput
from iclr26.core.train import TrainConfig, fit, rank_device, setup_distributed
from iclr26.mesh.config import PaperConfig, PaperTrainConfig
from iclr26.mesh.model import MeshConfig, RecursiveNeoX, lm_loss


def load_tokens(path: str | Path) -> np.ndarray:
    """Token ids from ``.npy`` (any integer dtype) or a raw ``.bin`` of uint16 (memory-mapped)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"token file {p} not found (nothing is downloaded)")
    arr = np.load(p, mmap_mode="r") if p.suffix == ".npy" else np.memmap(p, dtype=np.uint16, mode="r")
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{p}: expected a 1-d array of integer token ids, got {arr.dtype} {arr.shape}")
    return arr


def train_model(
    model: RecursiveNeoX, tc: PaperTrainConfig, device: str = "cpu", ckpt_dir: str | None = None, progress: bool = True
) -> dict[str, Any]:
    """Train ``model`` with core.train.fit (DDP under torchrun) and return val-loss curve and losses."""
    data = load_tokens(tc.tokens)
    if len(data) < tc.val_tokens + 2 * (tc.seq_len + 1):
        raise ValueError(f"{tc.tokens}: {len(data)} tokens is too few for val_tokens={tc.val_tokens}")
    if int(data.max()) >= model.cfg.vocab_size:
        raise ValueError(f"token id {int(data.max())} >= vocab_size {model.cfg.vocab_size}")
    train, val = data[: len(data) - tc.val_tokens], data[len(data) - tc.val_tokens :]
    model.to(device)
    use_amp = tc.bf16 and device.startswith("cuda")

    if tc.grad_accum < 1 or tc.batch % tc.grad_accum:
        raise ValueError(f"global batch {tc.batch} not divisible into grad_accum={tc.grad_accum} micro-batches")
    micro = tc.batch // tc.grad_accum  # fit calls get_batch(step * grad_accum + i) for i < grad_accum

    def get_batch(step: int, rank: int, world: int) -> torch.Tensor:
        if micro % world:
            raise ValueError(f"micro-batch {micro} (batch / grad_accum) not divisible by {world} ranks")
        rng = np.random.default_rng([tc.seed, step])
        starts = rng.integers(0, len(train) - tc.seq_len - 1, size=micro)
        per = micro // world
        rows = [
            np.asarray(train[s : s + tc.seq_len + 1], dtype=np.int64) for s in starts[rank * per : (rank + 1) * per]
        ]
        return torch.from_numpy(np.stack(rows)).to(device)

    n_win = (len(val) - 1) // tc.seq_len
    per_eval = max(1, min(n_win, tc.eval_batches * max(1, tc.batch // 8)))

    def eval_fn(m: torch.nn.Module, step: int) -> dict[str, float]:
        losses = []
        for i in range(0, per_eval, 8):
            rows = [
                np.asarray(val[j * tc.seq_len : (j + 1) * tc.seq_len + 1], dtype=np.int64)
                for j in range(i, min(i + 8, per_eval))
            ]
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
                losses.append(float(lm_loss(m, torch.from_numpy(np.stack(rows)).to(device))) * len(rows))
        return {"val_loss": sum(losses) / per_eval}

    def loss_fn(m: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
            return lm_loss(m, batch)

    cfg = TrainConfig(
        steps=tc.steps,
        lr=tc.lr,
        weight_decay=tc.weight_decay,
        betas=(0.9, 0.95),
        warmup_steps=max(1, int(round(tc.warmup_frac * tc.steps))),
        min_lr_ratio=tc.min_lr_ratio,
        grad_clip=1.0,
        eval_every=tc.eval_every,
        progress=progress,
        grad_accum=tc.grad_accum,
        ckpt_every=tc.eval_every if ckpt_dir else 0,
        desc=f"{model.cfg.layout} {model.cfg.scheme}",
    )
    res = fit(model, loss_fn, get_batch, cfg, eval_fn=eval_fn, ckpt_dir=ckpt_dir)
    return {
        "val_loss": res.evals[-1][1]["val_loss"],
        "val_curve": [(s, e["val_loss"]) for s, e in res.evals],
        "train_losses": res.losses,
    }


def save_trained(model: RecursiveNeoX, out_dir: str | Path) -> Path:
    """Write ``model.pt``: the model's config (a dict) and its state dict."""
    path = Path(out_dir) / "model.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"config": asdict(model.cfg), "state_dict": model.state_dict()}, path)
    return path


def load_trained(path: str | Path, device: str = "cpu") -> RecursiveNeoX:
    """The model :func:`save_trained` wrote (``path``: the file or its folder), in eval mode."""
    p = Path(path)
    p = p / "model.pt" if p.is_dir() else p
    blob = torch.load(p, map_location=device, weights_only=True)
    model = RecursiveNeoX(MeshConfig(**blob["config"]))
    model.load_state_dict(blob["state_dict"])
    return model.to(device).eval()


def check_seq_len(seq_len: int, model_cfg: MeshConfig) -> None:
    """A training length longer than the model's positions stops here, before any step (paper: 4096;
    Pythia checkpoints: 2048)."""
    if seq_len > model_cfg.max_seq_len:
        raise ValueError(
            f"seq_len={seq_len} exceeds the model's {model_cfg.max_seq_len} positions "
            f"(the paper trains at 4096; Pythia checkpoints stop at 2048): use a seq_len <= {model_cfg.max_seq_len}"
        )


def paper_max_seq_len(requested: int, config_limit: int, seq_len: int, from_checkpoint: bool) -> int:
    """The position limit of a paper-scale model: ``requested`` when > 0; else, from scratch, at least the
    training length (RoPE has no position table, so the config's 2048 is no limit there); from a checkpoint,
    the checkpoint config's."""
    if requested < 0:
        raise ValueError(f"max_seq_len must be >= 0 (0 = automatic), got {requested}")
    if requested > 0:
        return requested
    return config_limit if from_checkpoint else max(config_limit, seq_len)


def build_model(
    pythia: str, layout: str | None, scheme: str, init_from: str | None, seed: int, **overrides: Any
) -> RecursiveNeoX:
    """From scratch (a Pythia config/size) or from a local HF checkpoint (``init_from``)."""
    from iclr26.mesh.pythia import load_pythia, pythia_config

    torch.manual_seed(seed)
    if init_from:
        return load_pythia(init_from, layout=layout, scheme=scheme, **overrides)
    return RecursiveNeoX(pythia_config(pythia, layout=layout, scheme=scheme, **overrides))


def pythia_limit(pythia: str, init_from: str | None) -> int:
    """max_position_embeddings of the config the model is built from (the checkpoint's with init_from)."""
    from iclr26.mesh.pythia import pythia_config

    return pythia_config(init_from or pythia).max_seq_len


def run_paper_scale(ctx: RunContext) -> RunOutput:
    """``iclr26 run mesh --scale paper --set paper.pythia=PATH --set paper.train.tokens=PATH [--set ...]``
    (every key: ``--show-config``)."""
    from iclr26.mesh.diagnostics import loop_diagnostics
    from iclr26.mesh.pythia import pythia_config, vanilla_of
    from iclr26.mesh.summary import ARM_SCHEMES, summarize

    pc: PaperConfig = ctx.cfg.paper
    pythia = str(ctx.require_path("paper.pythia"))
    tokens = str(ctx.require_path("paper.train.tokens"))
    init_from = str(ctx.require_path("paper.init_from")) if pc.init_from else None
    arms = tuple(pc.arms)
    for need in ("vanilla", "base", "anchor", "mesh"):
        if need not in arms:
            raise ExperimentError(f"--set paper.arms must include {need} (the claims compare it)")
    try:
        rec = pythia_config(pythia, layout=pc.layout or None, scheme="base")
    except (ValueError, FileNotFoundError, KeyError) as exc:
        raise ExperimentError(f"--set paper.pythia={pythia}: {exc}") from exc
    if not rec.parsed_layout.recursive:
        raise ExperimentError("--set paper.layout=P+CRK+S is needed: the config's default layout is not recursive")
    tc = replace(pc.train, tokens=tokens)
    rec = replace(rec, max_seq_len=paper_max_seq_len(pc.max_seq_len, rec.max_seq_len, tc.seq_len, bool(init_from)))
    if tc.seq_len > rec.max_seq_len:
        raise ExperimentError(
            f"paper.train.seq_len={tc.seq_len} exceeds the model's {rec.max_seq_len} positions "
            f"(the paper trains at 4096; Pythia checkpoints stop at 2048): --set paper.train.seq_len={rec.max_seq_len}"
            f" or raise the limit with --set paper.max_seq_len={tc.seq_len}"
        )
    per_arm: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
    for seed in ctx.seeds:
        for arm in arms:
            cfg = vanilla_of(rec) if arm == "vanilla" else replace(rec, scheme=ARM_SCHEMES[arm])
            if init_from:  # the checkpoint's weights mapped into prelude/core/coda (no throwaway random model)
                model = build_model(pythia, cfg.layout, cfg.scheme, init_from, seed, max_seq_len=rec.max_seq_len)
            else:
                torch.manual_seed(seed)
                model = RecursiveNeoX(cfg)
            out = train_model(model, replace(tc, seed=seed), ctx.device, progress=ctx.show_progress)
            if cfg.parsed_layout.recursive:
                val = load_tokens(tokens)[-tc.val_tokens :]
                n = min(8, (len(val) - 1) // tc.seq_len)
                toks = torch.from_numpy(
                    np.stack([np.asarray(val[i * tc.seq_len : (i + 1) * tc.seq_len], dtype=np.int64) for i in range(n)])
                ).to(ctx.device)
                out["diagnostics"] = loop_diagnostics(model, toks)
            out.pop("train_losses")
            per_arm[arm].append(out)
    return summarize(
        ctx,
        per_arm,
        arms,
        {"pythia": pythia, "layout": rec.layout, "train": asdict(tc)},
        layouts={a: (str(rec.parsed_layout.depth) if a == "vanilla" else rec.layout) for a in arms},
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Train one recursive GPT-NeoX arm (torchrun-compatible).")
    p.add_argument("--pythia", required=True, help="Pythia size name or local GPT-NeoX config.json / folder")
    p.add_argument("--tokens", required=True)
    p.add_argument("--layout", default=None)
    p.add_argument("--scheme", default="mesh")
    d = PaperTrainConfig()  # the defaults live once, in the config
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--batch", type=int, default=d.batch)
    p.add_argument("--grad-accum", type=int, default=d.grad_accum)
    p.add_argument("--seq-len", type=int, default=d.seq_len)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--val-tokens", type=int, default=d.val_tokens)
    p.add_argument("--eval-every", type=int, default=d.eval_every)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init-from", default=None)
    p.add_argument("--max-seq-len", type=int, default=0, help="position limit (0: see PaperConfig.max_seq_len)")
    p.add_argument("--out", default="runs/mesh_train")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args(argv)
    # gloo for --device cpu even on a GPU machine (a CPU tensor under NCCL fails); cuda:LOCAL_RANK per rank
    rank, world = setup_distributed(a.device)
    try:
        device = rank_device(a.device)
        limit = pythia_limit(a.pythia, a.init_from)
        max_len = paper_max_seq_len(a.max_seq_len, limit, a.seq_len, bool(a.init_from))
        model = build_model(a.pythia, a.layout, a.scheme, a.init_from, a.seed, max_seq_len=max_len)
        check_seq_len(a.seq_len, model.cfg)
        tc = PaperTrainConfig(
            tokens=a.tokens,
            val_tokens=a.val_tokens,
            seq_len=a.seq_len,
            batch=a.batch,
            grad_accum=a.grad_accum,
            steps=a.steps,
            lr=a.lr,
            eval_every=a.eval_every,
            seed=a.seed,
        )
        out = train_model(model, tc, device, ckpt_dir=a.out, progress=rank == 0)
        if rank == 0:
            Path(a.out).mkdir(parents=True, exist_ok=True)
            res = {
                "config": asdict(model.cfg),
                "train": asdict(tc),
                "val_loss": out["val_loss"],
                "val_curve": out["val_curve"],
            }
            (Path(a.out) / "result.json").write_text(json.dumps(res, indent=2))
            save_trained(model, a.out)
            print(json.dumps({"val_loss": out["val_loss"]}))
        if world > 1:  # every rank leaves together, after rank 0 has written the results
            torch.distributed.barrier()
    finally:  # also on an exception: exiting with a live gloo group can abort a rank at shutdown
        if world > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
