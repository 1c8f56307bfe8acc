"""The paper-scale training path on a tiny random Qwen2.5-VL built in code (no download): v2 masks, log-prob
recomputation, micro-batching, one GRPO update, batched generation."""

import numpy as np
import pytest
import torch
from PIL import Image

transformers = pytest.importorskip("transformers")

from iclr26.core.hf import tiny_byte_tokenizer  # noqa: E402
from iclr26.vtool_r1.charts import make_chart  # noqa: E402
from iclr26.vtool_r1.hf_train import (  # noqa: E402
    VLChatEncoder,
    accumulate_grad,
    encode_sample,
    generate_batch,
    hf_grpo_step,
    response_logprobs,
)
from iclr26.vtool_r1.prompt import OBSERVATION_OK, round1_messages, round2_messages  # noqa: E402
from iclr26.vtool_r1.vtool import VToolConfig  # noqa: E402

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{% if not (loop.last and continue_final_message) %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tiny():
    tok = tiny_byte_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": SPECIALS})
    tok.chat_template = TEMPLATE
    ids = dict(zip(SPECIALS, tok.convert_tokens_to_ids(SPECIALS), strict=True))
    ip = transformers.Qwen2VLImageProcessorPil(min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 4)
    cfg = transformers.Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=8192,
            rope_scaling={"type": "mrope", "mrope_section": [2, 2, 4]},
        ),
        vision_config=dict(
            depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32, fullatt_block_indexes=[0]
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.Qwen2_5_VLForConditionalGeneration(cfg).float().eval()
    return model, VLChatEncoder(tok, ip), tok


def _rollouts():
    """A tool call (v2 round-2 chat as the prompt) and a direct answer, on one chart."""
    s = make_chart(np.random.default_rng(0), "VAL")
    img, edited = Image.fromarray(s.image), Image.fromarray(255 - s.image)
    meta = {"type": "v_bar", "columns_bbox": s.bboxes}
    y1 = f"ACTION 0:\n```python\nimg = focus_on_columns_with_mask(image_1, ['{s.args[0]}'], columns_bbox)\n```"
    tool = (round2_messages(img, edited, s.question, meta, y1, True, "v2"), f"FINAL ANSWER: {s.answer}. TERMINATE")
    direct = (round1_messages(img, s.question, meta), "ACTION 0: No action needed. FINAL ANSWER: 1. TERMINATE")
    return s, y1, tool, direct


def test_v2_mask_trains_only_the_final_answer(tiny):
    _, enc, tok = tiny
    _, y1, (msgs, y), (msgs_d, y_d) = _rollouts()
    smp = encode_sample(enc, msgs, y)
    trained = tok.decode(smp.input_ids[smp.mask == 1])
    prompt = tok.decode(smp.input_ids[smp.mask == 0])
    assert trained == y + "<|im_end|>"
    assert y1 in prompt and OBSERVATION_OK in prompt and y not in prompt  # y' and the observation: mask 0
    grid = smp.image_grid_thw
    assert grid.shape[0] == 2  # I and I'
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    assert int((smp.input_ids == pad).sum()) == int(grid.prod(-1).sum()) // 4
    d = encode_sample(enc, msgs_d, y_d)
    assert tok.decode(d.input_ids[d.mask == 1]) == y_d + "<|im_end|>" and d.image_grid_thw.shape[0] == 1


def _short():
    """The same chat shapes with short texts (fast on the byte tokenizer)."""
    s = make_chart(np.random.default_rng(1), "VAL")
    img, edited = Image.fromarray(s.image), Image.fromarray(255 - s.image)
    r1 = [{"role": "user", "content": [{"type": "image", "image": img}, {"type": "text", "text": "Value?"}]}]
    r2 = r1 + [
        {"role": "assistant", "content": [{"type": "text", "text": "CALL mask"}]},
        {"role": "user", "content": [{"type": "text", "text": "OK:"}, {"type": "image", "image": edited}]},
    ]
    return (r2, "FINAL ANSWER: 3."), (r1, "FINAL ANSWER: 12345.")


def test_logprobs_match_one_by_one_and_micro_batching_keeps_the_gradient(tiny):
    model, enc, tok = tiny
    (msgs, y), (msgs_d, y_d) = _short()
    samples = [
        encode_sample(enc, msgs, y),
        encode_sample(enc, msgs_d, y_d),
        encode_sample(enc, msgs, "FINAL ANSWER: 2."),
    ]
    pad = tok.pad_token_id
    with torch.no_grad():
        together = response_logprobs(model, samples, pad, micro_batch=3)
        alone = [response_logprobs(model, [s], pad, micro_batch=1)[0] for s in samples]
    for a, b, s in zip(together, alone, samples, strict=True):
        m = s.mask[1:] == 1
        assert torch.allclose(a[m], b[m], atol=1e-4)
    cfg = VToolConfig()
    adv = torch.tensor([1.0, -0.5, -0.5])
    grads = []
    for mb in (1, 3):
        model.zero_grad(set_to_none=True)
        old = [x.detach() for x in together]
        accumulate_grad(model, samples, old, old, adv, cfg, pad, mb)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    model.zero_grad(set_to_none=True)
    assert grads[0].abs().sum() > 0 and torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-4)


def test_one_grpo_step_raises_the_rewarded_answer(tiny):
    import copy

    model, enc, tok = tiny
    policy = copy.deepcopy(model).train()
    (msgs, _), _ = _short()
    good, bad = encode_sample(enc, msgs, "FINAL ANSWER: 3."), encode_sample(enc, msgs, "FINAL ANSWER: 9.")
    samples = [good, bad, good, bad]
    pad = tok.pad_token_id

    def mean_lp(s):
        with torch.no_grad():
            lp = response_logprobs(policy, [s], pad)[0]
        return float((lp * s.mask[1:]).sum() / s.mask[1:].sum())

    before = mean_lp(good), mean_lp(bad)
    opt = torch.optim.SGD(policy.parameters(), lr=1e-2)  # a small plain step: first order in the gradient
    cfg = VToolConfig(minibatches=1)
    stats = hf_grpo_step(
        policy, model, opt, samples, torch.tensor([1.0, 0, 1, 0]), torch.zeros(4, dtype=torch.long), cfg, pad, 2
    )
    after = mean_lp(good), mean_lp(bad)
    # the two answers differ in one token: the update moves probability from the unrewarded to the rewarded one
    assert np.isfinite(stats["loss"]) and after[0] - after[1] > before[0] - before[1]


def test_generate_batch_matches_one_at_a_time(tiny):
    model, enc, _ = tiny
    (msgs, _), (msgs_d, _) = _short()
    batch = generate_batch(model, enc, [msgs, msgs_d], max_new_tokens=4)
    single = [generate_batch(model, enc, [m], max_new_tokens=4)[0] for m in (msgs, msgs_d)]
    assert len(batch) == 2 and batch == single


def test_lora_policy_trains_only_the_adapters(tiny):
    import copy

    peft = pytest.importorskip("peft")
    model, enc, tok = tiny
    base = copy.deepcopy(model)
    policy = peft.get_peft_model(copy.deepcopy(model), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    (msgs, _), _ = _short()
    samples = [encode_sample(enc, msgs, "FINAL ANSWER: 3."), encode_sample(enc, msgs, "FINAL ANSWER: 9.")]
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    hf_grpo_step(
        policy,
        base,
        opt,
        samples,
        torch.tensor([1.0, 0.0]),
        torch.zeros(2, dtype=torch.long),
        VToolConfig(minibatches=1),
        tok.pad_token_id,
        1,
    )
    changed = {n for n, p in policy.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed)
