"""Paper-scale path on tiny random checkpoints in the official layout: strict loading, shards, FID,
and the command under torchrun with 2 gloo processes."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from iclr26.d_ar.config import small_tokenizer
from iclr26.d_ar.gpt import GPTConfig, Transformer
from iclr26.d_ar.paper import (
    fid_from_shards,
    iter_image_folder,
    load_gpt,
    load_tokenizer,
    shard_ids,
    to_uint8,
    write_shards,
)
from iclr26.d_ar.tokenizer import DiffDecoderConfig, TokenizerConfig, VQModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def official_tiny_cfg() -> TokenizerConfig:
    """A tiny RGB tokenizer (16x16 images) whose official dict goes into the checkpoint."""
    dec = DiffDecoderConfig(
        dim=32, cond_dim=32, patch_size=4, depth=2, repa=True, repa_layer=1, repa_hidden=16, repa_out_dim=8
    )
    return TokenizerConfig(
        encoder_patch_size=4,
        num_encoder_layers=1,
        num_decoder_layers=1,
        encoder_dim=32,
        decoder_dim=32,
        vq_dim=4,
        vq_codebook_size=16,
        num_denoising_steps=2,
        num_query_groups=2,
        num_all_queries=4,
        queries_per_step=2,
        image_size=16,
        head_dim=16,
        diff_decoder=dec,
    )


def official_dict(cfg: TokenizerConfig) -> dict:
    d = cfg.to_official()
    for k in ("head_dim", "vq_beta", "max_queries", "group_rule"):
        d.pop(k)  # not keys of the official yaml; defaults apply
    d["diff_decoder"] = {k: v for k, v in d["diff_decoder"].items() if not k.startswith("repa")}
    return d


@pytest.fixture()
def ckpts(tmp_path):
    cfg = official_tiny_cfg()
    torch.manual_seed(0)
    tok = VQModel(cfg)
    model_dict = official_dict(cfg)
    model_dict.update(head_dim=16)
    model_dict["diff_decoder"].update(repa_layer=1, repa_hidden=16, repa_out_dim=8)
    tok_path = tmp_path / "D-AR-tokenizer_v1.pt"
    torch.save({"config": {"model": model_dict}, "model": tok.state_dict(), "ema": tok.state_dict()}, tok_path)
    gcfg = GPTConfig(dim=32, n_layer=1, n_head=2, multiple_of=16, vocab_size=16, block_size=4)
    ar = Transformer(gcfg)
    torch.nn.init.normal_(ar.output.weight, 0, 0.5)
    ar_path = tmp_path / "D-AR-L-360K.pt"
    torch.save({"model": ar.state_dict(), "steps": 360000}, ar_path)
    return tok, tok_path, ar, ar_path, gcfg


def test_tokenizer_checkpoint_round_trip(ckpts):
    tok, tok_path, *_ = ckpts
    loaded = load_tokenizer(tok_path)
    assert loaded.cfg == official_tiny_cfg()
    codes = torch.randint(0, 16, (2, 4))
    eps = torch.randn(2, 3, 16, 16)
    assert torch.equal(loaded.decode_code(codes, eps), tok.eval().decode_code(codes, eps))


def test_missing_unexpected_and_mismatched_keys_are_listed(ckpts, tmp_path):
    tok, tok_path, *_ = ckpts
    raw = torch.load(tok_path, weights_only=True)
    bad = dict(raw["model"])
    bad.pop("query_linear.weight")
    bad["extra.weight"] = torch.zeros(1)
    torch.save({**raw, "model": bad}, tmp_path / "bad.pt")  # "model" is the entry loaded by default
    with pytest.raises(ValueError, match=r"missing \['query_linear.weight'\].*unexpected \['extra.weight'\]"):
        load_tokenizer(tmp_path / "bad.pt")
    wrong = {**raw, "config": {"model": {**raw["config"]["model"], "vq_codebook_size": 32}}}
    torch.save(wrong, tmp_path / "wrong.pt")
    with pytest.raises(ValueError, match="quantize.embedding.weight"):
        load_tokenizer(tmp_path / "wrong.pt")
    torch.save({"model": raw["ema"]}, tmp_path / "noconfig.pt")
    with pytest.raises(ValueError, match="config"):
        load_tokenizer(tmp_path / "noconfig.pt")
    with pytest.raises(FileNotFoundError):
        load_tokenizer(tmp_path / "absent.pt")


def test_gpt_checkpoint_loads_strictly(ckpts, tmp_path, monkeypatch):
    *_, ar, ar_path, gcfg = ckpts
    import iclr26.d_ar.paper as paper

    monkeypatch.setitem(
        paper.__dict__, "gpt_preset", lambda name, **kw: GPTConfig(dim=32, n_layer=1, n_head=2, multiple_of=16, **kw)
    )
    loaded = load_gpt(ar_path, "GPT-L", 16, 4)
    z, y = torch.randint(0, 16, (2, 3)), torch.tensor([3, 4])
    assert torch.equal(loaded(z, y), ar.eval()(z, y))
    compiled = {f"_orig_mod.{k}": v for k, v in ar.state_dict().items()}  # torch.compile prefix
    torch.save({"ema": compiled}, tmp_path / "c.pt")
    load_gpt(tmp_path / "c.pt", "GPT-L", 16, 4)
    with pytest.raises(ValueError, match="shape mismatches"):
        load_gpt(ar_path, "GPT-L", 32, 4)


def test_shards_cover_all_samples_once_and_resume(ckpts, tmp_path):
    tok, _, ar, _, _ = ckpts
    ranks = [shard_ids(10, 3, r, 2) for r in range(2)]
    assert sorted(ranks[0] + ranks[1]) == [0, 1, 2, 3] and not set(ranks[0]) & set(ranks[1])
    out = tmp_path / "samples"
    for r in range(2):
        write_shards(tok.eval(), ar.eval(), out, 10, 3, 2, (1.2, 8.0), 0, r, 2, "cpu")
    files = sorted(out.glob("samples_*.npz"))
    assert len(files) == 4
    data = [np.load(f) for f in files]
    assert sum(len(d["arr_0"]) for d in data) == 10
    assert data[0]["arr_0"].dtype == np.uint8 and data[0]["arr_0"].shape[1:] == (16, 16, 3)
    assert np.concatenate([d["labels"] for d in data]).tolist() == [i % 1000 for i in range(10)]
    stamp = files[0].stat().st_mtime_ns
    before = np.load(files[2])["arr_0"]
    files[2].unlink()  # rank 0 crashed before finishing shard 2: only that shard is regenerated
    write_shards(tok, ar, out, 10, 3, 2, (1.2, 8.0), 0, 0, 2, "cpu")
    assert files[2].exists() and files[0].stat().st_mtime_ns == stamp
    assert np.array_equal(np.load(files[2])["arr_0"], before)  # same seed, same images
    fid = fid_from_shards(files, _ref_npz(tmp_path), lambda imgs: imgs.reshape(len(imgs), -1)[:, :6].astype(float))
    assert fid["n_samples"] == 10 and np.isfinite(fid["fid"])


def _ref_npz(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    f = rng.normal(size=(50, 6))
    np.savez(tmp_path / "ref.npz", mu=f.mean(0), sigma=np.cov(f, rowvar=False))
    return tmp_path / "ref.npz"


def test_unreadable_images_are_skipped_and_counted(tmp_path):
    from PIL import Image

    (tmp_path / "n01").mkdir()
    Image.fromarray(np.zeros((20, 30, 3), np.uint8)).save(tmp_path / "n01" / "a.JPEG")
    (tmp_path / "n01" / "b.JPEG").write_bytes(b"not an image")
    skipped: list[str] = []
    imgs = list(iter_image_folder(tmp_path, 16, skipped))
    assert len(imgs) == 1 and imgs[0][0].shape == (16, 16, 3) and imgs[0][1] == "n01"
    assert len(skipped) == 1 and skipped[0].endswith("b.JPEG")


def test_uint8_conversion():
    x = torch.tensor([-1.0, 0.0, 1.0, 2.0]).view(1, 1, 1, 4).expand(1, 3, 1, 4)
    assert to_uint8(x)[0, 0, :, 0].tolist() == [0, 128, 255, 255]
    assert small_tokenizer().diff_decoder.in_dim == 1


def test_reconstruct_folder_counts_skipped(ckpts, tmp_path):
    from PIL import Image

    from iclr26.d_ar.paper import reconstruct_folder

    tok = ckpts[0].eval()
    root = tmp_path / "val"
    (root / "n02").mkdir(parents=True)
    for i in range(3):
        Image.fromarray(np.full((24, 24, 3), 40 * i, np.uint8)).save(root / "n02" / f"{i}.png")
    (root / "n02" / "z.png").write_bytes(b"\x89PNG broken")
    rec = reconstruct_folder(tok, root, 5, 2, "cpu")
    assert rec["n"] == 3 and rec["skipped"] == 1 and rec["recon"].shape == (3, 16, 16, 3)
    assert np.isfinite(rec["psnr"])


def test_paper_scale_under_torchrun_two_processes(tmp_path, torchrun):
    from iclr26.d_ar.tokenizer import VQModel

    torch.manual_seed(0)
    cfg = official_tiny_cfg()
    tok = VQModel(cfg)
    model = official_dict(cfg)
    model.update(head_dim=16)
    model["diff_decoder"].update(repa_layer=1, repa_hidden=16, repa_out_dim=8)
    torch.save({"config": {"model": model}, "ema": tok.state_dict()}, tmp_path / "tok.pt")
    ar = Transformer(GPTConfig(dim=32, n_layer=1, n_head=2, multiple_of=16, vocab_size=16, block_size=4))
    torch.save({"model": ar.state_dict()}, tmp_path / "ar.pt")
    shards = tmp_path / "shards"
    sets = {
        "paper.tokenizer_ckpt": tmp_path / "tok.pt",
        "paper.gpt_ckpt": tmp_path / "ar.pt",
        "paper.gpt_model": "custom",
        "gpt.dim": 32,
        "gpt.n_layer": 1,
        "gpt.n_head": 2,
        "gpt.multiple_of": 16,
        "paper.num_samples": 10,
        "paper.shard_size": 3,
        "paper.per_rank_batch": 2,
        "paper.out_dir": shards,
        "device": "cpu",
    }
    args = [
        "-m",
        "iclr26.cli",
        "run",
        "d_ar",
        "--scale",
        "paper",
        "--no-progress",
        "--out",
        str(tmp_path / "runs"),
    ]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    torchrun(args, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=240)
    files = sorted(shards.glob("samples_*.npz"))
    assert [f.name for f in files] == [f"samples_{i:05d}.npz" for i in range(4)]
    assert sum(len(np.load(f)["arr_0"]) for f in files) == 10
