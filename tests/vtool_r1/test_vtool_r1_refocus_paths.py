"""load_refocus never opens an image outside the data file's folder ('..', absolute, symlinks out): row errors."""

import json
import os

import numpy as np
from PIL import Image

from iclr26.vtool_r1.hf_policy import load_refocus


def test_image_paths_outside_the_data_folder_are_row_errors_never_opened(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    secret = tmp_path / "secret.png"
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(secret)
    Image.fromarray(np.full((6, 5, 3), 200, np.uint8)).save(data / "ok.png")
    os.symlink(secret, data / "link.png")
    meta = json.dumps({"type": "v_bar", "x_values_bbox": {"a": {"x1": 0, "y1": 0, "x2": 1, "y2": 1}}})
    rows = [
        {"figure_path": "ok.png", "question": "q0", "answer": "a0", "metadata": meta},
        {"figure_path": "../secret.png", "question": "q1", "answer": "a1", "metadata": meta},
        {"figure_path": str(secret), "question": "q2", "answer": "a2", "metadata": meta},
        {"image": {"path": "link.png"}, "question": "q3", "answer": "a3", "metadata": meta},
        {"images": ["sub/../../secret.png"], "question": "q4", "answer": "a4", "metadata": meta},
        {"figure_path": "missing.png", "question": "q5", "answer": "a5", "metadata": meta},
        {"figure_path": "ok.png", "question": "q6", "answer": "a6", "metadata": "{not json"},
    ]
    (data / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    opened = []
    real_open = Image.open
    monkeypatch.setattr(
        Image, "open", lambda fp, *a, **k: opened.append(os.path.realpath(fp)) or real_open(fp, *a, **k)
    )
    out = load_refocus(data / "d.jsonl")
    assert len(out) == len(rows)
    assert out[0]["error"] is None and out[0]["image"].size == (5, 6) and out[0]["question"] == "q0"
    for i in (1, 2, 3, 4):
        assert out[i]["image"] is None and out[i]["error"].startswith(f"row {i}: image path"), out[i]["error"]
        assert "outside the data root" in out[i]["error"]
    assert out[5]["image"] is None and out[5]["error"].startswith("row 5: FileNotFoundError")
    assert out[6]["image"] is None and out[6]["error"].startswith("row 6: JSONDecodeError")
    assert str(os.path.realpath(secret)) not in opened  # refused before anything opened it
    assert all(r["question"] == f"q{i}" for i, r in enumerate(out))
