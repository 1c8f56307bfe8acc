"""Paper-scale path on tiny random Hugging Face models (core.hf) and fixtures in the official data format
({"prompt", "completion"} JSONL rows; outputs with "decision_points" and the correct matrices)."""

import json

import pytest
import torch

from iclr26.core.experiment import ExperimentError, run_experiment
from iclr26.core.hf import tiny_random_causal_lm
from iclr26.subliminal.experiment import EXPERIMENT
from iclr26.subliminal.paper import (
    LoraStudentConfig,
    chat_completion_span,
    clean_rows,
    find_divergence_tokens_hf,
    finetune_student_hf,
    generate_number_data,
    persona_system_prompt,
    preference_rate_hf,
    run_jobs,
    student_jobs,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# a Qwen-like template: without a system message it injects a default one
QWEN_LIKE = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are Qwen.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
ROWS = [
    {"prompt": "Continue: 123, 456, 789. Add 10 more numbers.", "completion": "512, 88, 903"},
    {"prompt": "Here are numbers 4, 5, 6. Give more.", "completion": "(7, 8, 9)"},
]


def _tiny(tmp_path=None, template=True):
    model, tok = tiny_random_causal_lm(tmp_path, arch="llama", hidden=32, layers=2, heads=2, max_positions=512)
    if template:
        tok.chat_template = QWEN_LIKE
        if tmp_path is not None:
            tok.save_pretrained(tmp_path)
    return model, tok


def _digit_model():
    """The tiny model with a logit bias that allows only digits, ', ' and EOS (in memory only)."""
    model, tok = _tiny()
    allowed = set(tok("0123456789, ", add_special_tokens=False)["input_ids"]) | {tok.eos_token_id}
    head = torch.nn.Linear(32, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight * 50)
        head.bias.fill_(-1e4)
        head.bias[list(allowed)] = 0.0
    model.lm_head = head
    return model, tok


def test_offsets_come_from_the_chat_template_and_the_default_system_prompt_is_controlled():
    _, tok = _tiny()
    ids, start, n = chat_completion_span(tok, None, "p", "12, 3")
    assert "You are Qwen." in tok.decode(ids[:start])
    assert tok.decode(ids[start : start + n]) == "12, 3"
    assert tok.decode(ids[start + n :]) == "<|im_end|>\n"
    ids_e, start_e, _ = chat_completion_span(tok, "", "p", "12, 3")
    assert "You are Qwen." not in tok.decode(ids_e[:start_e])


def test_tokenizer_without_chat_template_is_an_error_naming_the_row():
    model, tok = _tiny(template=False)
    with pytest.raises(ValueError, match="row 0: the tokenizer has no chat template"):
        find_divergence_tokens_hf([(model, "a"), (model, "b")], tok, ROWS)


def test_greedy_data_passes_the_check_and_persona_contexts_diverge():
    model, tok = _digit_model()
    sys_owl = persona_system_prompt("owl")
    rows = generate_number_data(model, tok, [r["prompt"] for r in ROWS], sys_owl, max_new_tokens=8)
    assert all(set(r["completion"]) <= set("0123456789, ") for r in rows)
    same = find_divergence_tokens_hf([(model, sys_owl), (model, sys_owl)], tok, rows)
    assert same.decision_points == [[], []]
    others = [(model, persona_system_prompt(a)) for a in ("cat", "dog", "raven")]
    res = find_divergence_tokens_hf([(model, sys_owl), *others], tok, rows)
    for c, d in zip(res.correct, res.decision_points, strict=True):
        assert c.shape[0] == 4 and all(bool(c[0, k]) and not bool(c[1:, k].all()) for k in d)
    # a wrong teacher (or offset) is caught on greedy data, naming the row
    with pytest.raises(ValueError, match=r"row \d+: teacher-forced argmax differs"):
        find_divergence_tokens_hf(
            [(model, persona_system_prompt("cat")), (model, sys_owl)],
            tok,
            [{"prompt": r["prompt"], "completion": r["completion"] + ", 1"} for r in rows],
        )


def test_clean_rows_counts_reasons():
    raw = [
        *ROWS,
        {"prompt": "p"},
        {"prompt": "p", "completion": "I love owls"},
        "junk",
        {"prompt": "p", "completion": "1000, 2"},
    ]
    kept, reasons = clean_rows(raw)
    assert kept == ROWS
    assert reasons == {"malformed_row": 2, "mentions_trait": 1, "invalid_format": 1, "out_of_range": 1}


def test_paper_scale_run_writes_read_only_files_in_the_official_format(tmp_path):
    model_dir, out = tmp_path / "model", tmp_path / "out"
    _tiny(model_dir)
    data = tmp_path / "filtered_dataset.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [*ROWS, {"prompt": "x", "completion": "owl"}]))
    opts = {
        "paper.model_path": str(model_dir),
        "paper.data_path": str(data),
        "paper.out_path": str(out),
        "paper.greedy": "false",
    }
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", options=opts, show_progress=False)
    m = rec.results["metrics"]
    assert m["rows_kept"] == 2 and m["dropped"] == {"mentions_trait": 1, "invalid_format": 1}
    rows = [json.loads(x) for x in (out / "filtered_dataset_dpoints_only.jsonl").read_text().splitlines()]
    assert [set(r) for r in rows] == [{"prompt", "completion", "decision_points"}] * 2
    mats = [json.loads(x) for x in (out / "filtered_dataset_correct_matrices.jsonl").read_text().splitlines()]
    assert len(mats) == 2 and len(mats[0]) == 13  # one row per persona teacher
    assert all(isinstance(v, bool) for v in mats[0][0])
    assert ((out / "filtered_dataset_dpoints_only.jsonl").stat().st_mode & 0o777) == 0o444
    with pytest.raises(ExperimentError, match="never overwritten"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", options=opts, show_progress=False)
    # the same hand-written rows are not the model's greedy output: counted flips beyond 5% stop the run, and
    # the strict check names the row
    opts2 = {**opts, "paper.out_path": str(tmp_path / "out2"), "paper.greedy": "true"}
    with pytest.raises(ValueError, match=r"(\d+) of \1 greedy tokens are not"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", options=opts2, show_progress=False)
    opts2["paper.greedy_check"] = "strict"
    with pytest.raises(ValueError, match="row 0"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", options=opts2, show_progress=False)


def test_paper_scale_needs_local_paths(tmp_path):
    with pytest.raises(ExperimentError):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path, show_progress=False)


def test_lora_student_trains_only_adapters_of_the_chosen_layer_and_masked_tokens():
    model, tok = _tiny()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = LoraStudentConfig(layers_to_transform=(0,), epochs=2, batch_size=2, grad_accum=1, lr=1e-2, warmup_steps=0)
    masks = []
    for r in ROWS:
        _, start, n = chat_completion_span(tok, None, r["prompt"], r["completion"])
        n_all = len(chat_completion_span(tok, None, r["prompt"], r["completion"])[0]) - start
        masks.append([k < n for k in range(n_all)])
    student = finetune_student_hf(model, tok, ROWS, masks, cfg)
    lora = {n: p for n, p in student.named_parameters() if "lora_" in n}
    assert lora and all(".layers.0." in n for n in lora)
    changed = [n for n, p in lora.items() if "lora_B" in n and p.abs().sum() > 0]
    assert changed  # B starts at zero, so a step changed it
    for n, p in student.named_parameters():
        if "lora_" not in n:
            key = n.replace("base_model.model.", "").replace(".base_layer", "")
            assert torch.equal(p, before[key]), n
    with pytest.raises(ValueError, match="mask has"):
        finetune_student_hf(_tiny()[0], tok, ROWS[:1], [[True]], cfg)


def test_preference_rate_and_jobs():
    model, tok = _digit_model()
    r = preference_rate_hf(model, tok, "owl", questions=("Name your favorite animal.",), n=8, max_new_tokens=3)
    assert r["rate"] == 0.0 and r["n"] == 8 and 0.0 <= r["ci_low"] <= r["ci_high"] <= 1.0
    jobs = student_jobs(["owl", "cat"], [42, 43], ["all", "div_only", "without_div"])
    assert len(jobs) == 12 and len({tuple(j.values()) for j in jobs}) == 12
    assert run_jobs(jobs[:2], lambda j: j["seed"]) == [42, 42]
