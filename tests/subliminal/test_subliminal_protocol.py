"""The paper path's protocol switches against the official scripts (each a flag), on tiny random Hugging Face
models, the Gemma 3 tokenizer when installed, and the real SmolLM2 for what only a real model shows."""

import json

import pytest
import torch

from iclr26.core.experiment import run_experiment
from iclr26.core.hf import tiny_random_causal_lm
from iclr26.subliminal.experiment import EXPERIMENT
from iclr26.subliminal.paper import (
    GEMMA_EXTRA_ANIMALS,
    OFFICIAL_QUESTIONS,
    PAPER_ANIMALS,
    LoraStudentConfig,
    _student_batches,
    _target_forms,
    assistant_header_start,
    chat_completion_span,
    find_divergence_tokens_hf,
    finetune_student_hf,
    generate_number_data,
    header_in_loss,
    paper_animals,
    persona_system_prompt,
    preference_exact_hf,
    preference_rate_hf,
    sampling_kwargs,
)
from iclr26.subliminal.real import brute_force_mismatch_hf, real_gate, real_number_prompts, trim_cut

pytestmark = pytest.mark.usefixtures("one_torch_thread")

QWEN_LIKE = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are Qwen.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Gemma 3's turn format (written for this test): the template itself writes the BOS, a system message is
# merged into the first user turn, the assistant role is "model"
GEMMA_LIKE = (
    "{{ bos_token }}{% set sys = '' %}{% for m in messages %}{% if m['role'] == 'system' %}"
    "{% set sys = m['content'] + '\n\n' %}{% else %}<start_of_turn>"
    "{{ 'model' if m['role'] == 'assistant' else 'user' }}\n{{ sys if m['role'] == 'user' else '' }}"
    "{{ m['content'] }}<end_of_turn>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
ROWS = [
    {"prompt": "Continue: 123, 456, 789. Add 10 more numbers.", "completion": "512, 88, 903"},
    {"prompt": "Here are numbers 4, 5, 6. Give more.", "completion": "(7, 8, 9)"},
]


def _tiny(seed=0):
    model, tok = tiny_random_causal_lm(arch="llama", hidden=32, layers=2, heads=2, max_positions=512, seed=seed)
    tok.chat_template = QWEN_LIKE
    return model, tok


def _digit_model():
    model, tok = _tiny()
    allowed = set(tok("0123456789, ", add_special_tokens=False)["input_ids"]) | {tok.eos_token_id}
    head = torch.nn.Linear(32, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight * 50)
        head.bias.fill_(-1e4)
        head.bias[list(allowed)] = 0.0
    model.lm_head = head
    return model, tok


# --- counterfactual set per model family --------------------------------------------------------------------


def test_gemma_family_adds_whale_and_dragon_to_the_counterfactual_personas():
    assert paper_animals("auto", "gemma3") == PAPER_ANIMALS + ("whale", "dragon") == paper_animals("gemma15")
    assert paper_animals("auto", "gemma3_text")[-2:] == GEMMA_EXTRA_ANIMALS
    assert paper_animals("auto", "qwen2") == PAPER_ANIMALS == paper_animals("auto", "llama")
    assert len(PAPER_ANIMALS) == 13 and len(paper_animals("gemma15")) == 15
    with pytest.raises(ValueError, match="animal set"):
        paper_animals("gemma")


def test_paper_run_uses_the_chosen_animal_set(tmp_path):
    model_dir, data = tmp_path / "model", tmp_path / "d.jsonl"
    tiny_random_causal_lm(model_dir, arch="llama", hidden=32, layers=2, heads=2, max_positions=512)
    tok_cfg = json.loads((model_dir / "tokenizer_config.json").read_text())
    tok_cfg["chat_template"] = QWEN_LIKE
    (model_dir / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    opts = {
        "paper.model_path": str(model_dir),
        "paper.data_path": str(data),
        "paper.out_path": str(tmp_path / "out"),
        "paper.greedy": "false",
        "paper.animals": "gemma15",
        "paper.target": "whale",
    }
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", options=opts, show_progress=False)
    assert rec.results["metrics"]["animals"][-2:] == ["whale", "dragon"]
    mats = [json.loads(x) for x in (tmp_path / "out" / "d_correct_matrices.jsonl").read_text().splitlines()]
    assert len(mats[0]) == 15


# --- chat tokenisation: one or two BOS ---------------------------------------------------------------------------


def _gemma_tokenizer():
    from iclr26.core.checkpoints import CheckpointError, local_checkpoint
    from iclr26.core.hf import load_local_tokenizer

    try:
        tok = load_local_tokenizer(local_checkpoint("gemma3-270m"))
    except CheckpointError as exc:
        pytest.skip(f"gemma3-270m not installed: {exc}")
    tok.chat_template = GEMMA_LIKE  # the 270M base model ships without one
    return tok


def test_gemma_chat_gets_one_bos_from_the_template_and_two_as_the_official_scripts_tokenise():
    tok = _gemma_tokenizer()
    bos = tok.bos_token_id
    sys_owl = persona_system_prompt("owl")
    ours, start, n = chat_completion_span(tok, sys_owl, ROWS[0]["prompt"], ROWS[0]["completion"])
    official, start2, n2 = chat_completion_span(
        tok, sys_owl, ROWS[0]["prompt"], ROWS[0]["completion"], add_special_tokens=True
    )
    assert ours[:2] == [bos, tok.convert_tokens_to_ids("<start_of_turn>")] and ours.count(bos) == 1
    assert official[:2] == [bos, bos] and official.count(bos) == 2
    assert official[1:] == ours and start2 == start + 1 and n2 == n
    assert tok.decode(ours[start : start + n]) == ROWS[0]["completion"]
    # the official finder locates the completion as 3 tokens after the second <start_of_turn>: same place
    sot = [i for i, t in enumerate(ours) if t == tok.convert_tokens_to_ids("<start_of_turn>")]
    assert sot[1] + 3 == start
    # the header (<start_of_turn>model\n) begins where the chat without the generation prompt ends
    assert tok.decode(ours[assistant_header_start(tok, sys_owl, ROWS[0]["prompt"], "1") : start]) == (
        "<start_of_turn>model\n"
    )


def test_qwen_like_tokenisation_is_the_same_either_way():
    _, tok = _tiny()  # the byte tokenizer adds no special tokens of its own, as Qwen's and SmolLM2's
    a = chat_completion_span(tok, "s", "p", "1, 2")
    b = chat_completion_span(tok, "s", "p", "1, 2", add_special_tokens=True)
    assert a == b


# --- greedy check: count flips or stop -----------------------------------------------------------------------


def test_greedy_flips_are_counted_not_fatal_and_too_many_stop_the_run():
    model, tok = _digit_model()
    sys_owl = persona_system_prompt("owl")
    rows = generate_number_data(model, tok, [r["prompt"] for r in ROWS], sys_owl, max_new_tokens=12)
    contexts = [(model, sys_owl), (model, persona_system_prompt("cat"))]
    clean = find_divergence_tokens_hf(contexts, tok, rows, greedy_check="count")
    assert clean.greedy_flips == [[], []]
    # flip one digit of row 0 (as a bf16 near-tie would): counted at its position, not a divergence token
    comp = rows[0]["completion"]
    k = next(i for i, ch in enumerate(comp) if ch.isdigit())
    flipped = comp[:k] + str((int(comp[k]) + 1) % 10) + comp[k + 1 :]
    bad = [{**rows[0], "completion": flipped}, rows[1]]
    with pytest.raises(ValueError, match="row 0: teacher-forced argmax differs"):
        find_divergence_tokens_hf(contexts, tok, bad, greedy_check="strict")
    res = find_divergence_tokens_hf(contexts, tok, bad, greedy_check="count", max_flip_fraction=0.5)
    assert len(res.greedy_flips[0]) >= 1 and res.greedy_flips[1] == []
    assert all(not bool(res.correct[0][0, j]) for j in res.greedy_flips[0])
    assert not set(res.greedy_flips[0]) & set(res.decision_points[0])
    with pytest.raises(ValueError, match="greedy tokens are not"):
        find_divergence_tokens_hf(contexts, tok, bad, greedy_check="count", max_flip_fraction=0.0)


# --- preference evaluation as the official ---------------------------------------------------------------------


def test_official_question_set_and_sampling_settings():
    import inspect

    assert len(OFFICIAL_QUESTIONS) == 50 == len(set(OFFICIAL_QUESTIONS))
    sig = inspect.signature(preference_rate_hf).parameters
    assert sig["n"].default == 200 and sig["max_new_tokens"].default == 10 and sig["temperature"].default == 1.0
    assert sig["questions"].default == OFFICIAL_QUESTIONS and sig["sampling"].default == "official"
    assert sampling_kwargs("official") == {"do_sample": True, "temperature": 1.0, "top_p": 1.0}
    assert sampling_kwargs("pure")["top_k"] == 0


def test_official_sampling_keeps_the_models_top_k_and_pure_sampling_does_not():
    model, tok = _tiny(seed=3)
    model.generation_config.top_k = 1  # a checkpoint's generation_config (Qwen: top_k 20)
    q = ("Name your favorite animal using only one word.",)
    official = preference_rate_hf(model, tok, "x", q, n=12, max_new_tokens=4, sampling="official")
    pure = preference_rate_hf(model, tok, "x", q, n=12, max_new_tokens=4, sampling="pure")
    assert official["n"] == pure["n"] == 12
    # top_k = 1 from the generation config makes "official" sampling greedy: one answer 12 times

    def answers(sampling):
        torch.manual_seed(0)
        head = tok(
            tok.apply_chat_template([{"role": "user", "content": q[0]}], tokenize=False, add_generation_prompt=True),
            add_special_tokens=False,
        )["input_ids"]
        ids = torch.as_tensor([head])
        gen = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            **sampling_kwargs(sampling),
            max_new_tokens=4,
            num_return_sequences=12,
            pad_token_id=tok.pad_token_id,
        )
        return {tuple(g.tolist()) for g in gen[:, ids.shape[1] :]}

    assert len(answers("official")) == 1 and len(answers("pure")) > 1


def test_exact_preference_is_the_summed_probability_of_the_target_forms():
    model, tok = _tiny(seed=4)
    forms = _target_forms(tok, "owl")
    assert [1 for f in forms for g in forms if f != g and g[: len(f)] == f] == []  # no form extends another
    q = OFFICIAL_QUESTIONS[:2]
    got = preference_exact_hf(model, tok, "owl", q, partial_answer="It is the", batch_size=3)
    want = 0.0
    for question in q:
        ids, start, n = chat_completion_span(tok, None, question, "It is the")
        prefix = ids[: start + n]
        for f in forms:
            with torch.no_grad():
                lp = model(input_ids=torch.as_tensor([prefix + f])).logits[0].log_softmax(-1)
            want += float(sum(lp[len(prefix) - 1 + j, t] for j, t in enumerate(f)).exp())
    assert got == pytest.approx(want / 2, rel=1e-4)
    sys_got = preference_exact_hf(model, tok, "owl", q, partial_answer="It is the", system="You love owls.")
    assert abs(sys_got - got) > 1e-4 * got  # the system prompt reaches the model


# --- assistant header in the student's loss ------------------------------------------------------------------------


def test_header_tokens_get_loss_in_all_and_without_div_but_not_div_only():
    assert header_in_loss("official", "all") and header_in_loss("official", "without_div")
    assert header_in_loss("official", "random") and not header_in_loss("official", "div_only")
    assert not any(header_in_loss("never", m) for m in ("all", "div_only", "without_div", "random"))
    _, tok = _tiny()
    ((ids, m0),) = _student_batches(tok, ROWS[:1], None, 500, header=False)
    ((ids1, m1),) = _student_batches(tok, ROWS[:1], None, 500, header=True)
    extra = [i for i, (a, b) in enumerate(zip(m0, m1, strict=True)) if a != b]
    assert ids == ids1 and tok.decode([ids[i] for i in extra]) == "<|im_start|>assistant\n"
    _, start, _ = chat_completion_span(tok, None, ROWS[0]["prompt"], ROWS[0]["completion"])
    assert extra == list(range(start - len(extra), start)) and not any(m0[:start])


def test_header_flag_reaches_training():
    """An all-false completion mask trains only through the header: LoRA B moves under without_div (official
    header loss) and stays zero under div_only or header_loss='never'."""
    cfg = LoraStudentConfig(epochs=1, batch_size=2, grad_accum=1, lr=1e-2, warmup_steps=0)
    _, tok = _tiny()
    masks = [
        [False] * (len(ids) - chat_completion_span(tok, None, r["prompt"], r["completion"])[1])
        for r, ids in ((r, chat_completion_span(tok, None, r["prompt"], r["completion"])[0]) for r in ROWS)
    ]

    def moved(mode, header_loss="official"):
        from dataclasses import replace

        student = finetune_student_hf(_tiny()[0], tok, ROWS, masks, replace(cfg, header_loss=header_loss), mode=mode)
        return any(p.abs().sum() > 0 for n, p in student.named_parameters() if "lora_B" in n)

    assert moved("without_div") and not moved("div_only") and not moved("without_div", "never")


# --- real scale pieces ---------------------------------------------------------------------------------------------


def test_real_prompts_are_seeded_and_ask_for_numbers():
    a, b = real_number_prompts(6, 0), real_number_prompts(6, 0)
    assert a == b and a != real_number_prompts(6, 1) and len(set(a)) == 6
    assert all("up to 10 more numbers" in p and "3 digits" in p for p in a)
    assert trim_cut(" 138, 139, 140, ") == "138, 139, 140" and trim_cut("1, 2") == "1, 2"


def test_real_brute_force_check_agrees_with_the_batched_finder():
    model, tok = _digit_model()
    sys_owl = persona_system_prompt("owl")
    rows = generate_number_data(model, tok, [r["prompt"] for r in ROWS], sys_owl, max_new_tokens=10)
    contexts = [(model, persona_system_prompt(a)) for a in ("owl", "cat", "dog")]
    res = find_divergence_tokens_hf(contexts, tok, rows)
    assert brute_force_mismatch_hf(contexts, tok, rows, res.decision_points, 1e-3) == 0
    wrong = [d + [len(d) + 100] for d in res.decision_points]  # a position the finder never returns
    assert brute_force_mismatch_hf(contexts, tok, rows, wrong, 1e-3) == 2


def test_real_gate():
    per_seed = {0: {"parse_rate": {"teacher": 0.9, "control": 0.6}, "div_fraction": 0.1}}
    ok = real_gate({"base_p_target": 0.01, "teacher_p_target": 0.2}, per_seed)
    assert ok["passed"]
    assert not real_gate({"base_p_target": 0.1, "teacher_p_target": 0.2}, per_seed)["passed"]  # < 3x base
    assert not real_gate({"base_p_target": 0.001, "teacher_p_target": 0.04}, per_seed)["passed"]  # < +5 points
    low = {0: {"parse_rate": {"teacher": 0.9, "control": 0.4}, "div_fraction": 0.1}}
    assert not real_gate({"base_p_target": 0.01, "teacher_p_target": 0.2}, low)["passed"]
    far = {0: {"parse_rate": {"teacher": 0.9, "control": 0.9}, "div_fraction": 0.6}}
    assert not real_gate({"base_p_target": 0.01, "teacher_p_target": 0.2}, far)["passed"]


@pytest.mark.real
def test_persona_raises_the_exact_preference_on_the_real_model(smollm2):
    """Only a real instruction-tuned model follows the persona: p(owl | owl persona) far above p(owl)."""
    model, tok = smollm2
    qs = OFFICIAL_QUESTIONS[:3]
    base = preference_exact_hf(model, tok, "owl", qs)
    owl = preference_exact_hf(model, tok, "owl", qs, system=persona_system_prompt("owl"))
    dog = preference_exact_hf(model, tok, "owl", qs, system=persona_system_prompt("dog"))
    assert owl > 3 * base and owl > 3 * dog and owl > 0.05


def test_finder_and_generation_feed_the_official_double_bos_when_asked():
    tok = _gemma_tokenizer()
    model, _ = tiny_random_causal_lm(vocab_size=len(tok), hidden=8, layers=1, heads=2, arch="llama", max_positions=512)
    seen = []

    class Spy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, input_ids, attention_mask):
            seen.append([row[m.bool()].tolist()[:2] for row, m in zip(input_ids, attention_mask, strict=True)])
            return self.inner(input_ids=input_ids, attention_mask=attention_mask)

    rows = [{"prompt": "Look at these numbers: 1, 2, 3.", "completion": "4, 5"}]
    contexts = [(Spy(), persona_system_prompt("owl")), (None, persona_system_prompt("cat"))]
    contexts[1] = (contexts[0][0], contexts[1][1])
    bos = tok.bos_token_id
    find_divergence_tokens_hf(contexts, tok, rows, greedy=False)
    assert all(s[:2] != [bos, bos] for s in seen[-1])
    find_divergence_tokens_hf(contexts, tok, rows, greedy=False, add_special_tokens=True)
    assert all(s[:2] == [bos, bos] for s in seen[-1])


def test_real_brute_force_check_leaves_out_tied_positions():
    model, tok = _tiny()
    with torch.no_grad():
        model.lm_head.weight.zero_()  # every logit equal: every position is a tie in every context
    contexts = [(model, persona_system_prompt(a)) for a in ("owl", "cat")]
    assert brute_force_mismatch_hf(contexts, tok, ROWS[:1], [[0, 1]], 1e-3) == 0
    assert brute_force_mismatch_hf(contexts, tok, ROWS[:1], [[0, 1]], 0.0) == 2
