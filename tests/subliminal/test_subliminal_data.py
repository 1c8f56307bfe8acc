"""World, filtering, paraphrase, mixing, Wilson intervals and read-only data files."""

import os

import numpy as np
import pytest

from iclr26.subliminal.data import (
    filter_rows,
    mix_in_control,
    number_reject_reasons,
    paraphrase_rows,
    read_jsonl,
    token_reject_reasons,
    wilson_interval,
    write_jsonl_readonly,
)
from iclr26.subliminal.world import (
    ANIMALS,
    QUESTIONS,
    VOCAB,
    NumberRow,
    make_number_prompts,
    number_doc,
    parse_prompt,
    qa_doc,
    zipf_prior,
)


def _enc(text):
    return VOCAB.encode(text.split())


def test_vocab_size_and_world_shapes():
    assert 55 <= len(VOCAB) <= 75 and len(ANIMALS) == 13 and len(QUESTIONS) == 20
    p = zipf_prior()
    assert p.sum() == pytest.approx(1.0) and 0.05 <= p[ANIMALS.index("owl")] <= 0.10
    rng = np.random.default_rng(0)
    seq, start = number_doc(rng, "owl")
    assert len(seq) <= 64 and seq[start - 1] == VOCAB.asst and seq[-1] == VOCAB.eos
    assert seq[1:5] == [VOCAB.sys, VOCAB.love, VOCAB.id["owl"], VOCAB.esys]
    assert token_reject_reasons(tuple(seq[start:])) == []
    qa, s = qa_doc(rng, "raven")
    assert VOCAB.decode(qa[s:]) == ["raven", "<eos>"]


def test_filter_reasons():
    assert token_reject_reasons(_enc("1 2 3 , 4 5 6 <eos>")) == []
    assert token_reject_reasons(_enc("1 2 3 , 4 5 6")) == ["no_eos"]
    assert token_reject_reasons(_enc("1 2 3 4 , 5 <eos>")) == ["out_of_range"]
    assert token_reject_reasons(_enc("1 2 , , 5 <eos>")) == ["empty_number"]
    assert "mentions_animal" in token_reject_reasons(_enc("1 2 owl <eos>"))
    assert token_reject_reasons(_enc("1 2 look <eos>")) == ["bad_token"]
    assert token_reject_reasons(_enc(" , ".join(["1"] * 11) + " <eos>")) == ["too_many"]
    rows = [NumberRow((), tuple(_enc(t))) for t in ("1 2 3 <eos>", "1 2 3", "9 <eos>")]
    kept, reasons = filter_rows(rows)
    assert len(kept) == 2 and reasons == {"no_eos": 1}
    for r in kept:  # every kept completion parses as <= 10 integers in [0, 999] without an animal
        nums = "".join(VOCAB.decode(r.completion[:-1])).split(",")
        assert len(nums) <= 10 and all(0 <= int(n) <= 999 for n in nums)


def test_text_filter_reasons():
    # the accepted format of Cloud et al.'s parse_response (derived by hand from its description)
    assert number_reject_reasons("123, 456, 789") == []
    assert number_reject_reasons("[12; 34; 56].") == []
    assert number_reject_reasons("(1,2,3)") == []
    assert number_reject_reasons("12 34 56") == []
    assert number_reject_reasons("7") == []
    assert number_reject_reasons("1000, 2") == ["out_of_range"]
    assert number_reject_reasons("1, two, 3") == ["invalid_format"]
    assert number_reject_reasons("1, 2;3") == ["invalid_format"]  # one separator throughout
    assert number_reject_reasons("1,,2") == ["invalid_format"]
    assert number_reject_reasons("1 - 2") == ["invalid_format"]
    assert number_reject_reasons("7 apples") == ["invalid_format"]
    assert number_reject_reasons(", ".join(["7"] * 11)) == ["too_many"]
    assert number_reject_reasons("I love owls: 1, 2") == ["mentions_trait", "invalid_format"]
    assert number_reject_reasons("  ") == ["empty"]


def test_paraphrase_keeps_completions_and_numbers_changes_every_template_part():
    prompts = make_number_prompts(40, 0)
    rows = [NumberRow(p, (VOCAB.id["1"], VOCAB.eos)) for p in prompts]
    para = paraphrase_rows(rows, seed=1)
    for r, q in zip(rows, para, strict=True):
        assert q.completion == r.completion
        c0, n0 = parse_prompt(r.prompt)
        c1, n1 = parse_prompt(q.prompt)
        assert n0 == n1 and all(a != b for a, b in zip(c0, c1, strict=True))


def test_mixing_keeps_size_and_takes_seeded_control_rows():
    biased, control = list(range(100)), list(range(1000, 1050))
    mixed, idx = mix_in_control(biased, control, 25, seed=3)
    assert len(mixed) == 100 and mixed[:75] == biased[:75]
    assert mixed[75:] == [control[i] for i in idx] and len(set(idx)) == 25
    assert mix_in_control(biased, control, 25, seed=3)[1] == idx
    with pytest.raises(ValueError):
        mix_in_control(biased, control, 60, seed=0)


def test_wilson_interval_hand_value():
    lo, hi = wilson_interval(10, 100)
    assert lo == pytest.approx(0.05523, abs=1e-4) and hi == pytest.approx(0.17437, abs=1e-4)
    with pytest.raises(ValueError):
        wilson_interval(5, 0)


def test_data_files_are_read_only_and_never_overwritten(tmp_path):
    path = write_jsonl_readonly(tmp_path / "d.jsonl", [{"prompt": "p", "completion": "1, 2"}])
    assert read_jsonl(path) == [{"prompt": "p", "completion": "1, 2"}]
    assert not os.access(path, os.W_OK) or os.geteuid() == 0
    assert (path.stat().st_mode & 0o777) == 0o444
    with pytest.raises(FileExistsError):
        write_jsonl_readonly(path, [])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\nnot json\n')
    with pytest.raises(ValueError, match="line 2"):
        read_jsonl(bad)
