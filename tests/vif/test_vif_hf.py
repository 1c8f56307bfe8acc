"""Paper-scale plumbing on a tiny random LLaVA (no download) and POPE-format fixtures."""

import json

import numpy as np
import pytest
import torch

from iclr26.vif.hf import ViFAttention, image_token_span, load_pope, register_vif_attention, vif_attention
from iclr26.vif.method import Reallocation

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_torch_thread")
IMAGE_TOKEN = 63


def _tiny_llava():
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    vc = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=28,
        patch_size=14,
        projection_dim=32,
    )
    tc = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    cfg = LlavaConfig(vision_config=vc, text_config=tc, image_token_id=IMAGE_TOKEN, image_seq_length=4)
    torch.manual_seed(0)
    return LlavaForConditionalGeneration(cfg).eval()


def _inputs():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 60, (2, 12), generator=g)
    ids[:, 1:5] = IMAGE_TOKEN  # [bos] [4 image tokens] [text]
    return {"input_ids": ids, "pixel_values": torch.randn(2, 3, 28, 28, generator=g)}


def _hook(T, alpha_mid, alpha_deep, tau):
    vision = torch.zeros(2, T, dtype=torch.bool)
    vision[:, 1:5] = True
    instr = torch.zeros(2, T, dtype=torch.bool)
    instr[:, 5:] = True
    return Reallocation((1, 2), (3,), vision, vision.clone(), instr, tau, alpha_mid, alpha_deep)


def test_vif_attention_identity_equals_stock_and_reallocation_changes_logits():
    model, inputs = _tiny_llava(), _inputs()
    with torch.no_grad():
        stock = model(**inputs).logits
        model.set_attn_implementation(register_vif_attention())
        plain = model(**inputs).logits  # no active state: SDPA fall-through
        with vif_attention(ViFAttention((0, 1, 2, 3), _hook(12, 0.0, 0.0, 1.0), record=True)) as st:
            ident = model(**inputs).logits
        with vif_attention(ViFAttention((0, 1, 2, 3), _hook(12, 0.1, 0.3, 0.8))):
            vif = model(**inputs).logits
    torch.testing.assert_close(plain, stock)
    torch.testing.assert_close(ident, stock, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(vif, stock, atol=1e-4)
    assert sorted(st.curves) == [0, 1, 2, 3]
    # every query row sums to 1, so the column masses sum to the number of rows
    torch.testing.assert_close(st.curves[0].sum(-1), torch.full((2,), 12.0))


def test_vif_attention_runs_under_generate():
    model, inputs = _tiny_llava(), _inputs()
    model.set_attn_implementation(register_vif_attention())
    with torch.no_grad(), vif_attention(ViFAttention((1, 2), None, record=True)):
        out = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert out.shape == (2, 15)


def test_image_token_span_checks_count():
    ids = _inputs()["input_ids"][0]
    assert image_token_span(ids, IMAGE_TOKEN, 4) == slice(1, 5)
    with pytest.raises(ValueError, match="row 7: 4 image tokens, the config expects 576"):
        image_token_span(ids, IMAGE_TOKEN, 576, row=7)


def test_load_pope_marks_bad_rows(tmp_path):
    from PIL import Image

    Image.new("RGB", (8, 8), (255, 0, 0)).save(tmp_path / "COCO_val2014_000000000001.jpg")
    (tmp_path / "broken.jpg").write_bytes(b"not an image")
    rows = [
        {
            "question_id": 1,
            "image": "COCO_val2014_000000000001.jpg",
            "text": "Is there a dog in the image?",
            "label": "yes",
        },
        {"question_id": 2, "image": "broken.jpg", "text": "Is there a cat in the image?", "label": "no"},
        {"question_id": 3, "image": "COCO_val2014_000000000001.jpg", "text": "Is there a car in the image?"},
        {"question_id": 4, "image": "COCO_val2014_000000000001.jpg", "label": "no"},
    ]
    path = tmp_path / "coco_pope_random.json"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{not json\n")
    out = load_pope(path)
    assert len(out) == 5
    assert out[0].error is None and out[0].image.size == (8, 8) and out[0].answer == "yes"
    assert "row 1 (question_id 2): cannot decode image broken.jpg" in out[1].error
    assert "row 2 (question_id 3): missing or unknown answer" in out[2].error
    assert "row 3 (question_id 4): missing question" in out[3].error
    assert out[4].error.startswith("row 4: invalid JSON")


def _agent():
    from iclr26.vif.hf_run import HFAgent

    model = _tiny_llava()
    model.set_attn_implementation(register_vif_attention())
    vocab = {
        w: i for i, w in enumerate("is there a dog cat car in the image answer yes or no agent answered".split(), 3)
    }

    def encode(prompt, image):
        words = [vocab.get(w.strip(".?:1234567890").lower(), 2) for w in prompt.split()]
        ids = torch.tensor([[1] + [IMAGE_TOKEN] * 4 + words])
        pix = torch.from_numpy(np.asarray(image, dtype=np.float32)).permute(2, 0, 1)[None] / 255.0
        return {"input_ids": ids, "pixel_values": torch.nn.functional.interpolate(pix, size=28)}

    return HFAgent(model, encode, vocab["yes"], vocab["no"], IMAGE_TOKEN, 4)


def test_paper_chain_on_tiny_llava_with_pope_rows(tmp_path):
    from dataclasses import replace

    from PIL import Image

    from iclr26.vif.config import ViFConfig
    from iclr26.vif.hf_run import bands_for, evaluate_rows, run_chain, summarise_rows

    assert bands_for(32) == (tuple(range(12)), tuple(range(12, 24)), tuple(range(24, 32)))
    Image.new("RGB", (8, 8), (0, 200, 0)).save(tmp_path / "a.jpg")
    (tmp_path / "b.jpg").write_bytes(b"broken")
    lines = [
        {"question_id": 1, "image": "a.jpg", "text": "Is there a dog in the image?", "label": "yes"},
        {"question_id": 2, "image": "b.jpg", "text": "Is there a cat in the image?", "label": "no"},
    ]
    (tmp_path / "pope.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    rows = load_pope(tmp_path / "pope.jsonl")
    agent = _agent()
    seeded = run_chain(agent, rows[0], 3, ViFConfig(), use_vif=True, seeded=True)
    assert len(seeded) == 3 and seeded[0] is False
    ident = replace(ViFConfig(), alpha_mid=0.0, alpha_deep=0.0, tau=1.0)
    text = run_chain(agent, rows[0], 3, ident, use_vif=False, seeded=False)
    assert run_chain(agent, rows[0], 3, ident, use_vif=True, seeded=False) == text
    out = evaluate_rows(agent, rows, 2, ViFConfig())
    assert {f["row"] for f in out["failed"]} == {1} and len(out["failed"]) == 4
    assert "cannot decode image" in out["failed"][0]["error"]
    m = summarise_rows(out)
    assert m["vif_seeded"]["episodes"] == 1 and m["text_natural"]["episodes"] == 1
    wrong = _agent()
    wrong.n_image_tokens = 576  # image-token count at odds with the config: the episode fails, named
    out = evaluate_rows(wrong, rows[:1], 2, ViFConfig())
    assert "vif_seeded" not in out and "text_seeded" in out
    assert {f["variant"] for f in out["failed"]} == {"vif_seeded", "vif_natural"}
    assert "row 0: 4 image tokens, the config expects 576" in out["failed"][0]["error"]
