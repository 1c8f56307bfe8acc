"""Paper-scale path on tiny fixtures in the released VG150 (SGB h5 + dicts json) and GloVe text formats."""

import json

import numpy as np
import pytest

from iclr26.apt.experiment import EXPERIMENT
from iclr26.apt.vg import VGError, load_glove, load_vg150
from iclr26.core.experiment import ExperimentError, run_experiment

h5py = pytest.importorskip("h5py")
pytestmark = pytest.mark.usefixtures("one_torch_thread")
OBJ = ["man", "horse", "street", "cup"]
PRED = ["on", "riding", "holding", "walking on"]


def _write_fixture(root, drop=None):
    # 4 images: 0 train (3 boxes, 2 rels), 1 train without rels (filtered), 2 test (2 boxes, 1 rel), 3 val-less -1 box
    first_box, last_box = np.array([0, 3, 5, 7]), np.array([2, 4, 6, -1])
    first_box[3] = -1
    first_rel, last_rel = np.array([0, -1, 2, -1]), np.array([1, -1, 2, -1])
    boxes = np.array(
        [
            [100, 100, 40, 80],
            [110, 160, 60, 40],
            [300, 500, 600, 100],
            [50, 50, 10, 10],
            [70, 70, 10, 10],
            [200, 200, 50, 100],
            [220, 260, 20, 20],
        ],
        dtype=np.int32,
    )
    data = {
        "split": np.array([0, 0, 2, 0]),
        "img_to_first_box": first_box,
        "img_to_last_box": last_box,
        "img_to_first_rel": first_rel,
        "img_to_last_rel": last_rel,
        "labels": np.array([[1], [2], [3], [4], [4], [1], [4]]),
        "boxes_1024": boxes,
        "boxes_512": boxes // 2,
        "relationships": np.array([[0, 1], [1, 2], [5, 6]]),
        "predicates": np.array([[2], [1], [3]]),
        "attributes": np.zeros((7, 10), dtype=np.int64),
        "active_object_mask": np.ones((7, 1), dtype=bool),
    }
    with h5py.File(root / "VG-SGG-with-attri.h5", "w") as f:
        for k, v in data.items():
            if k != drop:
                f.create_dataset(k, data=v)
    dicts = {
        "label_to_idx": {n: i + 1 for i, n in enumerate(OBJ)},
        "idx_to_label": {str(i + 1): n for i, n in enumerate(OBJ)},
        "predicate_to_idx": {n: i + 1 for i, n in enumerate(PRED)},
        "idx_to_predicate": {str(i + 1): n for i, n in enumerate(PRED)},
        "attribute_to_idx": {},
        "idx_to_attribute": {},
        "object_count": {},
        "predicate_count": {},
    }
    if drop in dicts:
        del dicts[drop]
    (root / "VG-SGG-dicts-with-attri.json").write_text(json.dumps(dicts))
    rng = np.random.default_rng(0)
    words = ["man", "horse", "street", "cup", "on", "riding", "holding", "walking", "the"]
    (root / "glove.tiny.6d.txt").write_text(
        "".join(w + " " + " ".join(f"{x:.4f}" for x in rng.normal(size=6)) + "\n" for w in words)
    )
    return root


def test_load_vg150_released_format(tmp_path):
    root = _write_fixture(tmp_path)
    train, objects, preds = load_vg150(root / "VG-SGG-with-attri.h5", root / "VG-SGG-dicts-with-attri.json")
    assert objects == OBJ and preds == PRED
    assert len(train) == 1  # image 1 has no relationships, image 3 no boxes
    im = train[0]
    assert im["labels"].tolist() == [0, 1, 2] and im["rels"].tolist() == [[0, 1, 2], [1, 2, 1]]
    assert np.allclose(im["boxes"][0], np.array([80, 60, 120, 140]) / 1024)  # xywh centre -> x1y1x2y2
    test, _, _ = load_vg150(root / "VG-SGG-with-attri.h5", root / "VG-SGG-dicts-with-attri.json", "test")
    assert len(test) == 1 and test[0]["rels"].tolist() == [[0, 1, 3]]


def test_glove_multiword_mean_and_unknown_zero(tmp_path):
    root = _write_fixture(tmp_path)
    vec = load_glove(root / "glove.tiny.6d.txt", ["walking on", "walking", "on", "zebra"])
    assert np.allclose(vec[0], (vec[1] + vec[2]) / 2) and (vec[3] == 0).all()
    with pytest.raises(VGError, match="width"):
        load_glove(root / "glove.tiny.6d.txt", ["man"], dim=300)


@pytest.mark.parametrize("drop", ["predicates", "idx_to_predicate"])
def test_missing_key_is_one_line_error(tmp_path, drop):
    root = _write_fixture(tmp_path, drop=drop)
    with pytest.raises(VGError, match=f"missing key '{drop}'") as err:
        load_vg150(root / "VG-SGG-with-attri.h5", root / "VG-SGG-dicts-with-attri.json")
    assert "\n" not in str(err.value)


def test_paper_scale_runs_on_fixture(tmp_path):
    root = _write_fixture(tmp_path)
    opts = {
        "vg_h5": str(root / "VG-SGG-with-attri.h5"),
        "vg_dicts": str(root / "VG-SGG-dicts-with-attri.json"),
        "glove": str(root / "glove.tiny.6d.txt"),
        "optim.steps": "3",
        "optim.batch_size": "4",
        "optim.warmup_steps": "1",
    }
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", show_progress=False, options=opts)
    res = json.loads((rec.out_dir / "results.json").read_text())
    got = res["metrics"]["vg150_predcls_geometry"]
    assert set(got) == {"seed0/b0", "seed0/apt"} and 0 <= got["seed0/apt"]["R@20"] <= 100
    with pytest.raises(ExperimentError, match="vg_h5"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", show_progress=False)


def test_frozen_table_from_a_local_clip_text_encoder(tmp_path):
    """A tiny random CLIP text encoder saved in the Hugging Face layout stands in for CLIP-text (SDSGG)."""
    transformers = pytest.importorskip("transformers")
    import torch

    from iclr26.apt import CGP
    from iclr26.apt.names import compute_table
    from iclr26.core.hf import tiny_byte_tokenizer

    torch.manual_seed(0)
    cfg = transformers.CLIPTextConfig(
        vocab_size=262,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=32,
        pad_token_id=256,
        bos_token_id=257,
        eos_token_id=258,
    )
    transformers.CLIPTextModel(cfg).save_pretrained(tmp_path)
    tiny_byte_tokenizer().save_pretrained(tmp_path)
    table = compute_table(tmp_path, ("standing on", "walking on", "riding"))
    assert table.shape == (3, 16) and np.allclose(np.linalg.norm(table, axis=1), 1.0, atol=1e-5)
    e_ov, w = CGP(16, 8, num_basis=4)(torch.from_numpy(table), torch.randn(3, 8))
    assert e_ov.shape == (3, 16) and torch.allclose(w.sum(-1), torch.ones(3), atol=1e-6)
