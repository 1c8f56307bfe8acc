"""Paper scale: the released D-AR checkpoints, class-conditional ImageNet 256 samples and FID.

    torchrun --nproc_per_node 8 -m iclr26.cli run d_ar --scale paper \\
        --set paper.tokenizer_ckpt=/ckpt/D-AR-tokenizer_v1.pt --set paper.gpt_ckpt=/ckpt/D-AR-L-360K.pt \\
        --set paper.fid_ref=/data/VIRTUAL_imagenet256_labeled.npz --set paper.inception_weights=/ckpt/pt_inception.pth

Checkpoint formats (official ``dar_tool.load_visual_tokenizer`` and ``train_c2i_accelerate``): a dict with
``config`` (the tokenizer's yaml as a dict, key ``model``) and ``ema`` and/or ``model`` state dicts;
the AR file holds ``model`` / ``ema`` / ``module`` or the bare state dict. Our module names equal the
official ones, so loading is strict: a missing or unexpected key, or a shape that contradicts the
config, is an error that lists them.

Generation (after the official ``sample_c2i_ddp.py`` + ``generate.py``; the README lists where the protocol
differs): 50k images, labels i mod 1000 (the official draws them at random), CFG
schedule linspace(1.2, 8.0, 256), temperature 1, top-k 0, top-p 1, 8-step AB2 pixel decoding. Work is
cut into shards of ``shard_size`` images; shard s belongs to rank s mod world and is written
atomically, so a restarted run skips finished shards (a crash loses only unfinished ones).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from .gpt import GPTConfig, Transformer, generate, gpt_preset
from .tokenizer import TokenizerConfig, VQModel

STATE_KEYS = ("ema", "model", "module", "state_dict")


class PickledRecord:
    """Stand-in for an object of a class that a checkpoint pickles but that is not importable here (the
    official tokenizer's training checkpoints pickle their config as an instance of the training script's
    own class). It keeps what the pickle says about the object -- ``module``, ``name``, the constructor
    ``args`` and the ``state`` -- and runs nothing: no class of the checkpoint is ever imported or called."""

    def __init__(self, module: str, name: str, args: tuple = ()):
        self.module, self.name, self.args, self.state = module, name, tuple(args), None

    def __setstate__(self, state) -> None:  # pickle's BUILD: keep the state as data
        self.state = state

    def as_dict(self) -> dict:
        """The state as a plain dict (``(dict, slots)`` pairs merged); {} when there is none."""
        state = self.state
        if isinstance(state, tuple) and len(state) == 2:
            merged = dict(state[0] or {})
            merged.update(state[1] or {})
            return merged
        return dict(state) if isinstance(state, dict) else {}

    def __repr__(self) -> str:
        return f"PickledRecord({self.module}.{self.name})"


def _record_class(module: str, name: str) -> type:
    """A callable that pickle's REDUCE / NEWOBJ can 'construct' into a :class:`PickledRecord`."""

    class _Factory(PickledRecord):
        def __new__(cls, *args, **kwargs):  # NEWOBJ calls cls.__new__(cls, *args)
            return PickledRecord(module, name, args)

        def __reduce__(self):  # never re-pickled as itself
            raise TypeError("a PickledRecord factory cannot be pickled")

    _Factory.__name__ = _Factory.__qualname__ = f"Record[{module}.{name}]"
    return _Factory


def _record_unpickler_module():
    """A ``pickle_module`` for ``torch.load``: the globals that ``weights_only=True`` allows load as
    themselves, every other global becomes a :class:`PickledRecord` factory (nothing else is imported)."""
    import pickle
    import types

    from torch import _weights_only_unpickler as wou

    allowed = wou._get_allowed_globals()

    class RecordUnpickler(pickle.Unpickler):
        def find_class(self, module, name):
            key = f"{module}.{name}"
            if key in allowed:
                return allowed[key]
            return _record_class(module, name)

    mod = types.ModuleType("iclr26_record_pickle")
    mod.Unpickler = RecordUnpickler
    mod.load = pickle.load
    mod.__name__ = "iclr26_record_pickle"
    return mod


def _read(path: str | Path, allow_pickle: bool = False) -> dict:
    """torch.load with ``weights_only=True``; a file that pickles objects of classes this environment does not
    have (the official tokenizer training checkpoints' config object) is read again with a restricted
    unpickler that turns each such object into a :class:`PickledRecord` and never imports or calls the class.
    ``allow_pickle`` (trusted files only) runs the full unpickler instead."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint file (nothing is downloaded)")
    try:
        return torch.load(path, map_location="cpu", weights_only=not allow_pickle)
    except Exception as exc:
        first = exc
    if not allow_pickle:
        try:
            return torch.load(path, map_location="cpu", weights_only=False, pickle_module=_record_unpickler_module())
        except Exception:  # report the first, more telling error
            pass
    hint = "" if allow_pickle else " (if it is a trusted file that pickles objects: --set paper.allow_pickle=true)"
    raise ValueError(f"{path}: not a readable torch checkpoint ({type(first).__name__}: {first}){hint}") from None


def _plain(obj):
    """A config read from a checkpoint as plain data: records become dicts of their state."""
    if isinstance(obj, PickledRecord):
        obj = obj.as_dict()
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if hasattr(obj, "__dict__") and not isinstance(obj, type) and not isinstance(obj, torch.Tensor):
        return {k: _plain(v) for k, v in vars(obj).items()}  # e.g. an argparse.Namespace under allow_pickle
    return obj


def _state(ckpt: dict, path, prefer: str = "model") -> dict:
    """The state dict of a checkpoint: ``prefer`` ("model": the official evaluation's order model, ema, module;
    "ema": the EMA weights first) decides which entry wins when a file holds both."""
    if prefer not in ("model", "ema"):
        raise ValueError(f"prefer must be 'model' or 'ema', got {prefer!r}")
    order = STATE_KEYS if prefer == "ema" else ("model", "ema", "module", "state_dict")
    for key in order:
        if key in ckpt and isinstance(ckpt[key], dict):
            state = ckpt[key]
            break
    else:
        state = ckpt
    out = {}
    for k, v in state.items():
        for prefix in ("_orig_mod.", "module."):
            k = k[len(prefix) :] if k.startswith(prefix) else k
        out[k] = v
    if not all(isinstance(v, torch.Tensor) for v in out.values()):
        raise ValueError(f"{path}: no state dict found under {STATE_KEYS} or at the top level")
    return out


def load_strict(model: torch.nn.Module, state: dict, path) -> None:
    """Load every tensor or raise ValueError listing missing / unexpected keys and shape mismatches."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = sorted(
        f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
        for k in set(own) & set(state)
        if tuple(own[k].shape) != tuple(state[k].shape)
    )
    if missing or unexpected or shapes:
        raise ValueError(
            f"{path}: checkpoint does not match the model: missing {missing[:20]} ({len(missing)}), "
            f"unexpected {unexpected[:20]} ({len(unexpected)}), shape mismatches {shapes[:20]} "
            f"({len(shapes)}): the config is at odds with the weights"
        )
    model.load_state_dict(state, strict=True)


def load_tokenizer(
    path: str | Path,
    device: str = "cpu",
    config_yaml: str | Path = "",
    allow_pickle: bool = False,
    prefer_state: str = "model",
) -> VQModel:
    """The released tokenizer: its embedded config (official keys, a dict or a pickled config object; or
    ``config_yaml``, e.g. the official configs/tokenizer_v1.yaml, when given) and its ``model`` weights
    (``prefer_state="ema"``: the EMA weights when the file holds both)."""
    ckpt = _read(path, allow_pickle)
    config = _plain(ckpt.get("config")) if isinstance(ckpt, dict) else None
    if config_yaml:
        import yaml

        model_cfg = yaml.safe_load(Path(config_yaml).read_text())["model"]
    elif isinstance(config, dict) and isinstance(config.get("model"), dict):
        model_cfg = config["model"]
    else:
        raise ValueError(
            f"{path}: tokenizer checkpoint lacks config['model'] (official layout); "
            "pass the yaml with --set paper.tokenizer_config=PATH"
        )
    cfg = TokenizerConfig.from_official(dict(model_cfg))
    model = VQModel(cfg)
    load_strict(model, _state(ckpt, path, prefer_state), path)
    return model.to(device).eval()


def load_gpt(
    path: str | Path,
    preset: str | GPTConfig,
    vocab_size: int,
    block_size: int,
    device: str = "cpu",
    allow_pickle: bool = False,
    prefer_state: str = "model",
) -> Transformer:
    """A released AR checkpoint into the LlamaGen-named :class:`Transformer` of ``preset`` (a name of
    ``GPT_PRESETS`` or a :class:`GPTConfig`); vocabulary and length come from the tokenizer."""
    if isinstance(preset, GPTConfig):
        gcfg = replace(preset, vocab_size=vocab_size, block_size=block_size)
    else:
        gcfg = gpt_preset(preset, vocab_size=vocab_size, block_size=block_size)
    model = Transformer(gcfg)
    load_strict(model, _state(_read(path, allow_pickle), path, prefer_state), path)
    return model.to(device).eval()


def shard_ids(num_samples: int, shard_size: int, rank: int, world: int) -> list[int]:
    """Shards of rank ``rank``: s = rank, rank + world, ... (disjoint, covering all shards)."""
    n_shards = -(-num_samples // shard_size)
    return list(range(rank, n_shards, world))


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """[-1, 1] float [B, C, H, W] -> uint8 [B, H, W, C] (the ADM evaluator's sample format)."""
    x = ((images.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return x.permute(0, 2, 3, 1).cpu().numpy()


def generate_shard(
    tok: VQModel,
    ar: Transformer,
    shard: int,
    num_samples: int,
    shard_size: int,
    batch: int,
    cfg_scale: tuple[float, float],
    seed: int,
    device,
) -> tuple[np.ndarray, np.ndarray]:
    """Images and labels of one shard (labels i mod num_classes, seeded per shard and batch)."""
    lo, hi = shard * shard_size, min(num_samples, (shard + 1) * shard_size)
    imgs, labels = [], []
    for b0 in range(lo, hi, batch):
        y = (torch.arange(b0, min(hi, b0 + batch)) % ar.config.num_classes).to(device)
        g = torch.Generator().manual_seed(seed * 1_000_003 + b0)
        z = generate(ar, y, cfg_scale=cfg_scale, generator=g)
        imgs.append(to_uint8(tok.decode_code(z, generator=g)))
        labels.append(y.cpu().numpy())
    return np.concatenate(imgs), np.concatenate(labels)


def write_shards(
    tok,
    ar,
    out_dir: Path,
    num_samples: int,
    shard_size: int,
    batch: int,
    cfg_scale,
    seed: int,
    rank: int,
    world: int,
    device,
) -> list[Path]:
    """Generate this rank's missing shards; each is written to a temporary name and renamed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    done = []
    for s in shard_ids(num_samples, shard_size, rank, world):
        path = out_dir / f"samples_{s:05d}.npz"
        if not path.exists():
            imgs, labels = generate_shard(tok, ar, s, num_samples, shard_size, batch, cfg_scale, seed, device)
            tmp = out_dir / f".samples_{s:05d}.{rank}.tmp.npz"
            np.savez(tmp, arr_0=imgs, labels=labels)
            os.replace(tmp, path)
        done.append(path)
    return done


def iter_image_folder(root: str | Path, size: int, skipped: list[str]) -> Iterator[tuple[np.ndarray, str]]:
    """(uint8 [size, size, 3], class folder) for each readable image under root/<class>/*; an
    unreadable file is skipped and its path appended to ``skipped``."""
    from PIL import Image

    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such image folder")
    for cls in sorted(p for p in root.iterdir() if p.is_dir()):
        for f in sorted(cls.iterdir()):
            try:
                with Image.open(f) as im:
                    im = im.convert("RGB")
                    s = min(im.size)  # centre crop then resize (ADM preprocessing)
                    left, top = (im.size[0] - s) // 2, (im.size[1] - s) // 2
                    im = im.crop((left, top, left + s, top + s)).resize((size, size), Image.BICUBIC)
                    yield np.asarray(im, dtype=np.uint8), cls.name
            except Exception:  # unreadable / not an image: skipped and counted
                skipped.append(str(f))


def reconstruct_folder(tok: VQModel, root: str | Path, n: int, batch: int, device) -> dict:
    """Tokenize and decode the first ``n`` readable images of an ImageNet-style folder: PSNR and the
    uint8 originals / reconstructions (for rFID); unreadable files are skipped and counted."""
    skipped: list[str] = []
    size = tok.cfg.image_size
    real, recon, done = [], [], 0
    it = iter_image_folder(root, size, skipped)
    while done < n:
        chunk = [im for im, _ in itertools.islice(it, min(batch, n - done))]
        if not chunk:
            break
        x = torch.from_numpy(np.stack(chunk)).permute(0, 3, 1, 2).float().div(127.5).sub(1).to(device)
        recon.append(to_uint8(tok.decode_code(tok.extract_code(x), generator=torch.Generator().manual_seed(0))))
        real.append(np.stack(chunk))
        done += len(chunk)
    if not real:
        raise ValueError(f"{root}: no readable images ({len(skipped)} skipped)")
    real_a, rec_a = np.concatenate(real), np.concatenate(recon)
    mse = ((real_a.astype(np.float64) - rec_a.astype(np.float64)) ** 2).mean()
    return {
        "n": int(len(real_a)),
        "skipped": len(skipped),
        "psnr": float(10 * np.log10(255.0**2 / max(mse, 1e-12))),
        "real": real_a,
        "recon": rec_a,
    }


def reference_stats(ref: str | Path, features_fn) -> tuple[np.ndarray, np.ndarray]:
    """(mu, sigma) from an ADM reference .npz (keys mu / sigma) or from images in it / in a folder."""
    ref = Path(ref)
    if ref.suffix == ".npz":
        with np.load(ref) as z:
            if "mu" in z and "sigma" in z:
                return z["mu"], z["sigma"]
            imgs = z["arr_0"]
    else:
        skipped: list[str] = []
        imgs = np.stack([im for im, _ in iter_image_folder(ref, 256, skipped)])
    f = features_fn(imgs)
    return f.mean(0), np.cov(f, rowvar=False)


def inception_features_fn(weights: str | Path, device, batch: int = 200):
    """uint8 [n, H, W, 3] -> Inception pool features [n, 2048] with torch-fidelity's FID Inception
    loaded from a local weights file (nothing downloads)."""
    try:
        from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3
    except ImportError as exc:
        raise RuntimeError("FID needs torch-fidelity (pip install torch-fidelity)") from exc
    if not Path(weights).is_file():
        raise FileNotFoundError(f"{weights}: no Inception weights file (nothing is downloaded)")
    net = (
        FeatureExtractorInceptionV3("inception-v3-compat", ["2048"], feature_extractor_weights_path=str(weights))
        .to(device)
        .eval()
    )

    def features(imgs: np.ndarray) -> np.ndarray:
        out = []
        with torch.no_grad():
            for i in range(0, len(imgs), batch):
                x = torch.from_numpy(imgs[i : i + batch]).permute(0, 3, 1, 2).contiguous().to(device)
                out.append(net(x)[0].double().cpu().numpy())
        return np.concatenate(out)

    return features


def fid_from_shards(paths: list[Path], ref: str | Path, features_fn) -> dict:
    """FID of all shard images against the reference statistics."""
    from .data import frechet_from_stats

    imgs = np.concatenate([np.load(p)["arr_0"] for p in sorted(paths)])
    f = features_fn(imgs)
    mu_r, s_r = reference_stats(ref, features_fn)
    return {"fid": frechet_from_stats(f.mean(0), np.cov(f, rowvar=False), mu_r, s_r), "n_samples": int(len(imgs))}


def run_paper(ctx, cfg):
    """Load the released models, write this rank's shards, and (rank 0, after all ranks) the FID."""
    import torch.distributed as dist

    from iclr26.core.train import setup_distributed

    # a process group this call starts (torchrun) is torn down here, also on an exception
    owns_group = not (dist.is_available() and dist.is_initialized())
    rank, world = setup_distributed()
    try:
        return _run_paper(ctx, cfg, rank, world)
    finally:  # exiting with a live gloo group can abort a rank at shutdown
        if world > 1 and owns_group and dist.is_initialized():
            dist.destroy_process_group()


def _run_paper(ctx, cfg, rank: int, world: int):
    """run_paper's body on this rank (the process group, if any, is already set up)."""
    from iclr26.core.experiment import RunOutput

    p = cfg.paper
    device = str(ctx.device)
    if device.startswith("cuda"):
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    tok = load_tokenizer(
        ctx.require_path("paper.tokenizer_ckpt"), device, p.tokenizer_config, p.allow_pickle, p.state_entry
    )
    arch = cfg.gpt if p.gpt_model == "custom" else p.gpt_model
    ar = load_gpt(
        ctx.require_path("paper.gpt_ckpt"),
        arch,
        tok.cfg.vq_codebook_size,
        tok.cfg.num_all_queries,
        device,
        p.allow_pickle,
        p.state_entry,
    )
    if world > 1 and not p.out_dir:
        raise ValueError("under torchrun every rank needs the same shard folder: --set paper.out_dir=DIR")
    out_dir = Path(p.out_dir) if p.out_dir else ctx.out_dir / "samples"
    seed = ctx.seeds[0]
    paths = write_shards(
        tok,
        ar,
        out_dir,
        p.num_samples,
        p.shard_size,
        p.per_rank_batch,
        tuple(cfg.eval.cfg_scale),
        seed,
        rank,
        world,
        device,
    )
    if world > 1:
        import torch.distributed as dist

        dist.barrier()  # every shard is written before rank 0 reads them all
    metrics: dict = {"rank": rank, "world": world, "shards_this_rank": len(paths), "sample_dir": str(out_dir)}
    if rank == 0 and p.imagenet_dir and p.n_recon > 0:
        rec = reconstruct_folder(tok, ctx.require_path("paper.imagenet_dir"), p.n_recon, p.per_rank_batch, device)
        metrics["reconstruction"] = {k: rec[k] for k in ("n", "skipped", "psnr")}
        if p.inception_weights:
            feats = inception_features_fn(ctx.require_path("paper.inception_weights"), device)
            fr, fg = feats(rec["real"]), feats(rec["recon"])
            from .data import frechet_distance

            metrics["reconstruction"]["rfid"] = frechet_distance(fg, fr)
    if rank == 0 and p.fid_ref and p.inception_weights:
        all_paths = sorted(out_dir.glob("samples_*.npz"))
        metrics.update(
            fid_from_shards(
                all_paths,
                ctx.require_path("paper.fid_ref"),
                inception_features_fn(ctx.require_path("paper.inception_weights"), device),
            )
        )
    return RunOutput(
        metrics=metrics,
        measured={},
        notes=["paper scale: generation + FID only; claims need the reversed-order AR, which is not released"],
    )
