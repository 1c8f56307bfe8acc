"""load_pope opens images only under the image root: '..' parts, absolute paths and symlinks out are row errors."""

import json
import os

from PIL import Image

from iclr26.vif.hf import load_pope


def test_load_pope_refuses_image_paths_outside_the_root(tmp_path):
    root, outside = tmp_path / "data", tmp_path / "secret"
    root.mkdir()
    outside.mkdir()
    Image.new("RGB", (4, 4)).save(outside / "s.png")
    Image.new("RGB", (4, 4)).save(root / "ok.png")
    os.symlink(outside / "s.png", root / "link.png")
    names = ["../secret/s.png", str(outside / "s.png"), "link.png", "ok.png"]
    rows = [{"question_id": i, "image": n, "text": "Is there a cat?", "label": "no"} for i, n in enumerate(names)]
    (root / "pope.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    out = load_pope(root / "pope.jsonl")
    assert [r.error is None for r in out] == [False, False, False, True]
    assert all("outside the image root" in r.error and r.image is None for r in out[:3])
    assert out[3].image.size == (4, 4)
