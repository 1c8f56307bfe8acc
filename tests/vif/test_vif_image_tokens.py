"""The paper path's image-token count comes from the processor of the model family in use (issue: a config
field that LLaVA-NeXT mis-states for anyres images and Qwen2-VL lacks). Processors built in code."""

import pytest
import torch

transformers = pytest.importorskip("transformers")
from PIL import Image  # noqa: E402

from iclr26.core.hf import tiny_byte_tokenizer  # noqa: E402
from iclr26.vif.hf import image_token_span, processor_image_tokens  # noqa: E402


def _llava_next():
    tok = tiny_byte_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    ip = transformers.LlavaNextImageProcessor(
        size={"shortest_edge": 28},
        crop_size={"height": 28, "width": 28},
        image_grid_pinpoints=[[28, 56], [56, 28], [56, 56]],
    )
    proc = transformers.LlavaNextProcessor(
        image_processor=ip,
        tokenizer=tok,
        patch_size=14,
        vision_feature_select_strategy="default",
        image_token="<image>",
        num_additional_image_tokens=1,  # the CLS slot of a CLIP tower, as the released processor configs
    )
    return proc, tok.convert_tokens_to_ids("<image>")


@pytest.mark.parametrize("size", [(50, 30), (30, 50), (28, 28), (90, 40)])
def test_llava_next_anyres_count_is_what_the_processor_writes(size):
    proc, image_id = _llava_next()
    inputs = proc(images=Image.new("RGB", size, (10, 200, 30)), text="<image> is there a dog", return_tensors="pt")
    written = int((inputs["input_ids"] == image_id).sum())
    assert processor_image_tokens(proc, inputs, transformers.LlavaNextConfig()) == written
    span = image_token_span(inputs["input_ids"][0], image_id, processor_image_tokens(proc, inputs))
    assert span.stop - span.start == written
    # the config's field would have refused this prompt
    assert transformers.LlavaNextConfig().image_seq_length != written


def test_llava_next_counts_differ_with_the_image():
    proc, _ = _llava_next()
    counts = {
        processor_image_tokens(proc, proc(images=Image.new("RGB", s), text="<image>", return_tensors="pt"))
        for s in [(50, 30), (28, 28), (90, 40)]
    }
    assert len(counts) > 1


def test_qwen2_vl_count_from_the_grid():
    ip = transformers.Qwen2VLImageProcessor(min_pixels=28 * 28, max_pixels=56 * 84, merge_size=2, patch_size=14)
    out = ip(images=Image.new("RGB", (84, 56)), return_tensors="pt")
    assert out["image_grid_thw"].tolist() == [[1, 4, 6]]

    class Proc:
        image_processor = ip

    assert processor_image_tokens(Proc(), dict(out)) == 1 * 4 * 6 // 4
    assert processor_image_tokens(Proc(), {"image_grid_thw": torch.tensor([[1, 4, 6], [1, 2, 2]])}) == 6 + 1
    assert getattr(transformers.Qwen2VLConfig(), "image_seq_length", None) is None  # no config field to read


def test_fixed_count_families_and_the_clear_error():
    class Fixed:
        num_image_tokens = 256

    assert processor_image_tokens(Fixed(), {"pixel_values": torch.zeros(1, 3, 8, 8)}) == 256

    class Cfg:
        image_seq_length = 576

    assert processor_image_tokens(object(), {}, Cfg()) == 576
    with pytest.raises(ValueError, match="cannot tell how many image tokens"):
        processor_image_tokens(object(), {})


def test_load_agent_counts_with_the_processor_on_a_saved_tiny_llava_next(tmp_path):
    """End to end through the paper path's loader: a tiny LLaVA-NeXT saved with its processor; every prompt's
    image-token count is the processor's (it varies with the image), and the ViF answer runs on it."""
    from iclr26.vif.config import ViFConfig
    from iclr26.vif.hf_run import _load_agent, vif_logit

    proc, image_id = _llava_next()
    proc.chat_template = (
        "{% for m in messages %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<image>"
        "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endfor %} answer:"
    )
    proc.tokenizer.add_tokens(["Yes", "No"])
    vc = transformers.CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=28, patch_size=14
    )
    tc = transformers.LlamaConfig(
        vocab_size=len(proc.tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    cfg = transformers.LlavaNextConfig(
        vision_config=vc,
        text_config=tc,
        image_token_index=image_id,
        image_grid_pinpoints=[[28, 56], [56, 28], [56, 56]],
        vision_feature_select_strategy="default",
    )
    torch.manual_seed(0)
    transformers.LlavaNextForConditionalGeneration(cfg).save_pretrained(tmp_path)
    proc.save_pretrained(tmp_path)
    agent = _load_agent(tmp_path, "cpu")
    seen = set()
    for size in [(50, 30), (28, 28), (90, 40)]:
        inputs = agent.encode("is there a dog", Image.new("RGB", size, (10, 200, 30)))
        n = int((inputs["input_ids"] == image_id).sum())
        assert agent.expected_image_tokens(inputs) == n
        seen.add(n)
        assert isinstance(vif_logit(agent, inputs, ViFConfig()), float)
    assert len(seen) >= 2 and cfg.image_seq_length not in seen
