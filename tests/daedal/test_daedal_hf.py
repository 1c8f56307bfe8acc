"""Paper-scale plumbing offline: a tiny random BertForMaskedLM through the adapter and the eval CLI."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from iclr26.daedal import DaedalConfig, daedal_generate  # noqa: E402
from iclr26.daedal.eval import extract_prediction, gold_answer, main, same_number  # noqa: E402
from iclr26.daedal.hf import HFMaskedDiffusionAdapter, check_llada_ids  # noqa: E402

WORDS = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "answer",
    "is",
    "<",
    ">",
    "reasoning",
    "solve",
    "math",
    "problem",
    "final",
    "boxed",
    "{",
    "}",
    "number",
    "and",
    "a",
    "b",
    "1",
    "2",
    "3",
    "4",
    "5",
    "+",
    "=",
    "what",
    "?",
    "inside",
    "/",
    "then",
    "write",
    ".",
    ",",
    "following",
    "as",
    "\\",
]


def tiny_bert(tmp_path, seed=0):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(WORDS) + "\n")
    tok = transformers.BertTokenizer(str(vocab))
    cfg = transformers.BertConfig(
        vocab_size=len(WORDS),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=256,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(seed)
    model = transformers.BertForMaskedLM(cfg).eval()
    return model, tok


def test_adapter_batch_equals_single(tmp_path):
    model, tok = tiny_bert(tmp_path)
    fn = HFMaskedDiffusionAdapter(model, position_ids_from_mask=True)
    prompts = [torch.tensor(tok(q)["input_ids"]) for q in ("solve the math problem", "what is 1 + 2 ?")]
    cfg = DaedalConfig(
        initial_length=4, max_length=16, block_length=4, expansion_factor=4, eos_window=4, eos_anchor=2, tau_low=0.2
    )
    out = daedal_generate(fn, prompts, tok.mask_token_id, tok.sep_token_id, cfg)
    for b, p in enumerate(prompts):
        one = daedal_generate(fn, [p], tok.mask_token_id, tok.sep_token_id, cfg)
        assert torch.equal(one.sequences[0], out.sequences[b])
    assert all(not (s == tok.mask_token_id).any() for s in out.sequences)


def test_self_check_stops_a_model_that_misuses_the_padding_mask(tmp_path):
    """A padded batch must never change a row's decode: a model that ignores the mask when it has a 0
    (like the upstream LLaDA code turning it causal) is stopped on the first padded batch."""
    model, tok = tiny_bert(tmp_path)

    class IgnoresPadding(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask=None, **kw):
            return self.inner(input_ids=input_ids, attention_mask=torch.ones_like(attention_mask), **kw)

    ids = torch.tensor([[0, 0, 5, 6, 7], [4, 5, 6, 7, 8]])
    attn = torch.tensor([[False, False, True, True, True], [True] * 5])
    with pytest.raises(ValueError, match="padded row"):
        HFMaskedDiffusionAdapter(IgnoresPadding(model), position_ids_from_mask=True)(ids, attn)
    # the honest model passes the check (and is checked once), unless its positions shift with the padding
    good = HFMaskedDiffusionAdapter(model, position_ids_from_mask=True)
    assert good(ids, attn).shape == (2, 5, len(WORDS)) and good._checked
    with pytest.raises(ValueError, match="position ids"):
        HFMaskedDiffusionAdapter(model)(ids, attn)
    # without padding there is nothing to check
    unpadded = HFMaskedDiffusionAdapter(IgnoresPadding(model))
    unpadded(ids[1:], attn[1:])
    assert not unpadded._checked


def test_adapter_without_mask_refuses_padding(tmp_path):
    model, tok = tiny_bert(tmp_path)
    fn = HFMaskedDiffusionAdapter(model, pass_attention_mask=False)
    ids = torch.tensor([[5, 6, 7]])
    assert fn(ids, torch.ones_like(ids, dtype=torch.bool)).shape == (1, 3, len(WORDS))
    with pytest.raises(ValueError, match="padding"):
        fn(ids, torch.tensor([[False, True, True]]))


def test_llada_eot_is_refused():
    with pytest.raises(ValueError, match="eot"):
        check_llada_ids(None, 126336, 126348)


def test_answer_parsing():
    assert extract_prediction("so \\boxed{12} and then \\boxed{1,234}") == "1,234"
    assert extract_prediction("<answer> 7 </answer>") == "7"
    assert extract_prediction("it is 3 then 42.") == "42."
    assert same_number("1,234", gold_answer("blah #### 1234")) and not same_number("5", "6")
    assert not same_number(None, "1")


def test_eval_cli_offline(tmp_path):
    model, tok = tiny_bert(tmp_path)
    mdir = tmp_path / "model"
    model.save_pretrained(mdir)
    tok.save_pretrained(mdir)
    data = tmp_path / "gsm.jsonl"
    data.write_text(
        "\n".join(
            json.dumps({"question": q, "answer": f"work #### {a}"})
            for q, a in [("what is 1 + 2 ?", 3), ("what is 2 + 2 ?", 4), ("what is 3 + 2 ?", 5)]
        )
    )
    common = [
        "--model",
        str(mdir),
        "--data",
        str(data),
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--mask-id",
        str(tok.mask_token_id),
        "--eos-id",
        str(tok.sep_token_id),
        "--block-length",
        "4",
        "--batch-size",
        "2",
    ]
    s = main(
        common
        + [
            "--out",
            str(tmp_path / "d"),
            "--method",
            "daedal",
            "--initial-length",
            "4",
            "--max-length",
            "16",
            "--expansion-factor",
            "4",
            "--eos-window",
            "4",
        ]
    )["daedal"]
    assert s["n"] == 3 and 0 <= s["accuracy"] <= 100 and 0 <= s["E_ratio"] <= 100 and s["nfe"] > 0
    lines = (tmp_path / "d" / "daedal" / "samples.jsonl").read_text().splitlines()
    assert [json.loads(ln)["index"] for ln in lines] == [0, 1, 2]
    f = main(common + ["--out", str(tmp_path / "f"), "--method", "fixed", "--gen-length", "8"])["fixed"]
    assert f["N_tok"] == 8 and f["nfe"] == 8


def test_paper_scale_through_run_experiment(tmp_path):
    from iclr26.core.experiment import run_experiment
    from iclr26.daedal.experiment import EXPERIMENT

    model, tok = tiny_bert(tmp_path)
    mdir = tmp_path / "model"
    model.save_pretrained(mdir)
    tok.save_pretrained(mdir)
    data = tmp_path / "gsm.jsonl"
    data.write_text(json.dumps({"question": "what is 1 + 2 ?", "answer": "#### 3"}) + "\n")
    opts = {
        "paper.model_path": str(mdir),
        "paper.data_path": str(data),
        "paper.device": "cpu",
        "paper.dtype": "float32",
        "paper.mask_id": str(tok.mask_token_id),
        "paper.eos_id": str(tok.sep_token_id),
        "paper.daedal.initial_length": "4",
        "paper.daedal.max_length": "16",
        "paper.daedal.block_length": "4",
        "paper.daedal.expansion_factor": "4",
        "paper.daedal.eos_window": "4",
        "paper.fixed_length": "8",
    }
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", options=opts, show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert res["metrics"]["fixed"]["N_tok"] == 8 and res["metrics"]["daedal"]["n"] == 1
    assert [c["name"] for c in res["claims"]] == ["C1", "C2", "C3", "C4", "C5"]


def test_eval_config_reaches_the_loader_and_the_self_check(tmp_path, monkeypatch):
    """trust_remote_code and self_check from the config (flags or --set) are the ones the eval uses."""
    import iclr26.daedal.eval as ev
    from iclr26.daedal.config import PaperConfig

    model, tok = tiny_bert(tmp_path)
    seen = {}

    def fake_load(path, *, device, dtype, trust_remote_code):
        seen["trust_remote_code"] = trust_remote_code
        return model, tok

    monkeypatch.setattr(ev, "load_masked_diffusion_lm", fake_load)
    data = tmp_path / "gsm.jsonl"
    # prompts of different lengths: the batch is padded; BERT without position ids from the mask
    # shifts positions with the padding, which the self-check catches
    data.write_text(
        json.dumps({"question": "what is 1 + 2 ?", "answer": "#### 3"})
        + "\n"
        + json.dumps({"question": "solve the math problem : what is 1 + 2 + 3 + 4 ?", "answer": "#### 10"})
        + "\n"
    )
    small = DaedalConfig(initial_length=4, max_length=8, block_length=4, expansion_factor=4, eos_window=4)
    cfg = PaperConfig(
        model_path="m",
        data_path=str(data),
        method="daedal",
        daedal=small,
        mask_id=tok.mask_token_id,
        eos_id=tok.sep_token_id,
        batch_size=2,
        device="cpu",
        dtype="float32",
        trust_remote_code=True,
    )
    with pytest.raises(ValueError, match="padded row"):
        ev.evaluate(cfg, tmp_path / "a")
    assert seen["trust_remote_code"] is True
    out = ev.evaluate(replace(cfg, self_check=False, trust_remote_code=False), tmp_path / "b")
    assert out["daedal"]["n"] == 2 and seen["trust_remote_code"] is False


FIXTURES = Path(__file__).parent / "fixtures"


def test_boxed_extraction_matches_nested_braces_and_math_verify_checks_equivalence():
    from iclr26.daedal.eval import is_correct, last_boxed

    assert last_boxed("a \\boxed{1} then \\boxed{\\frac{\\sqrt{3}}{2}} end") == "\\frac{\\sqrt{3}}{2}"
    assert last_boxed("\\boxed{unclosed") is None and last_boxed("none") is None
    assert extract_prediction("<answer> \\boxed{\\left( 3, \\frac{\\pi}{2} \\right)} </answer>") == (
        "\\left( 3, \\frac{\\pi}{2} \\right)"
    )
    assert extract_prediction("only 12 here", number_fallback=False) is None
    for pred, gold in [("0.5", "\\frac{1}{2}"), ("\\dfrac{\\sqrt3}{2}", "\\frac{\\sqrt{3}}{2}"), ("42.0", "42")]:
        assert is_correct(pred, gold, "math_verify"), (pred, gold)
    assert not is_correct("41", "42", "math_verify") and not is_correct(None, "42", "math_verify")
    assert not is_correct("0.5", "\\frac{1}{2}", "number")  # the plain checker misses equivalent forms


def test_official_task_prompt():
    from iclr26.daedal.eval import ASSISTANT_PREFIX, build_prompt, task_prompt

    text = task_prompt("What is 1 + 2?")
    assert text.startswith("You are a math expert. You will be given a question to solve.")
    assert "Wrap the final answer in a \\boxed{}. \nRespond in the following format:\n<reasoning>\n" in text
    assert text.endswith("</answer>\n\nWhat is 1 + 2?\n\n")

    class Tok:  # no chat template: the prompt text, a newline, then the assistant prefix
        chat_template = None

        def __call__(self, s, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in s]}

    ids = build_prompt(Tok(), "What is 1 + 2?")
    assert "".join(map(chr, ids)) == text + "\n" + ASSISTANT_PREFIX


def test_math500_fixture_in_the_released_format_is_read_and_scored(tmp_path, monkeypatch):
    import iclr26.daedal.eval as ev
    from iclr26.daedal.config import PaperConfig

    rows = ev.read_jsonl(FIXTURES / "math500_tiny.jsonl", "math500")
    assert {"problem", "solution", "answer", "subject", "level", "unique_id"} <= set(rows[0])
    with pytest.raises(ValueError, match="question"):
        ev.read_jsonl(FIXTURES / "math500_tiny.jsonl", "gsm8k")
    model, tok = tiny_bert(tmp_path)
    monkeypatch.setattr(ev, "load_masked_diffusion_lm", lambda *a, **k: (model, tok))
    # the decoded texts (in problem order) give each gold answer in another, equivalent form
    texts = ["\\boxed{0.5}", "<answer> \\dfrac{\\sqrt3}{2} </answer>", "so \\boxed{(3,\\pi/2)}", "\\boxed{42}"]
    for checker, expect in (("math_verify", 100.0), ("number", 25.0)):
        calls = iter(texts)
        monkeypatch.setattr(tok, "decode", lambda ids, skip_special_tokens=False, calls=calls: next(calls))
        cfg = PaperConfig(
            model_path="m",
            data_path=str(FIXTURES / "math500_tiny.jsonl"),
            task="math500",
            checker=checker,
            method="fixed",
            fixed_length=4,
            daedal=DaedalConfig(block_length=4),
            mask_id=tok.mask_token_id,
            eos_id=tok.sep_token_id,
            batch_size=4,
            device="cpu",
            dtype="float32",
            self_check=False,
        )
        s = ev.evaluate(cfg, tmp_path / checker)["fixed"]
        assert (s["task"], s["n"], s["accuracy"]) == ("math500", 4, expect)
        lines = (tmp_path / checker / "fixed" / "samples.jsonl").read_text().splitlines()
        golds = [json.loads(ln)["gold"] for ln in lines]
        assert golds == [r["answer"] for r in rows]


@pytest.mark.dist
def test_torchrun_two_gloo_processes_gather_every_problem(tmp_path, torchrun):
    """eval.py under torchrun: 2 CPU processes (gloo) shard the problems and rank 0 writes all of them."""
    import os

    model, tok = tiny_bert(tmp_path)
    mdir = tmp_path / "model"
    model.save_pretrained(mdir)
    tok.save_pretrained(mdir)
    data = tmp_path / "gsm.jsonl"
    data.write_text(
        "\n".join(json.dumps({"question": f"what is {a} + 1 ?", "answer": f"#### {a + 1}"}) for a in range(5)) + "\n"
    )
    args = [
        "-m",
        "iclr26.daedal.eval",
        "--model",
        str(mdir),
        "--data",
        str(data),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--mask-id",
        str(tok.mask_token_id),
        "--eos-id",
        str(tok.sep_token_id),
        "--block-length",
        "4",
        "--initial-length",
        "4",
        "--max-length",
        "8",
        "--eos-window",
        "4",
        "--expansion-factor",
        "4",
        "--gen-length",
        "4",
        "--batch-size",
        "2",
        "--no-self-check",
        "--checker",
        "number",
    ]
    torchrun(args, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    for method in ("daedal", "fixed"):
        s = json.loads((tmp_path / "out" / method / "summary.json").read_text())
        lines = (tmp_path / "out" / method / "samples.jsonl").read_text().splitlines()
        assert s["n"] == 5 and [json.loads(ln)["index"] for ln in lines] == [0, 1, 2, 3, 4]


def test_eval_passes_the_official_batching_flags_to_both_decoders(tmp_path, monkeypatch):
    import iclr26.daedal.eval as ev
    from iclr26.daedal.config import PaperConfig

    model, tok = tiny_bert(tmp_path)
    monkeypatch.setattr(ev, "load_masked_diffusion_lm", lambda *a, **k: (model, tok))
    seen = {}

    def spy(name, fn):
        def wrapped(*args, **kwargs):
            seen[name] = (args, kwargs)
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(ev, "llada_fixed_generate", spy("fixed", ev.llada_fixed_generate))
    monkeypatch.setattr(ev, "daedal_generate", spy("daedal", ev.daedal_generate))
    official = DaedalConfig(
        initial_length=4,
        max_length=8,
        block_length=4,
        expansion_factor=4,
        eos_window=4,
        attend_prompt_padding=True,
        cfg_mask_prompt_padding=True,
    )
    cfg = PaperConfig(
        model_path="m",
        data_path=str(FIXTURES / "math500_tiny.jsonl"),
        task="math500",
        fixed_length=4,
        daedal=official,
        mask_id=tok.mask_token_id,
        eos_id=tok.sep_token_id,
        batch_size=2,
        device="cpu",
        dtype="float32",
        self_check=False,
    )
    ev.evaluate(cfg, tmp_path / "o")
    assert seen["daedal"][0][-1] == official
    kw = seen["fixed"][1]
    assert kw["attend_prompt_padding"] and kw["cfg_mask_prompt_padding"]
