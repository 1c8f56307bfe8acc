"""The lm-evaluation-harness interface (MeshLM): log-likelihoods, rolling windows and greedy generation
checked against direct computations on the model's logits; importable without lm_eval."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from iclr26.mesh.evaluate import MeshLM
from iclr26.mesh.model import MeshConfig, RecursiveNeoX

EOT = 256


class ByteTok:
    """Bytes 0..255 plus an end-of-text id 256."""

    eos_token_id = EOT

    def encode(self, text):
        return list(text.encode())

    def decode(self, ids):
        return bytes(i for i in ids if i < 256).decode(errors="replace")


def _model(max_len=32, seed=0):
    torch.manual_seed(seed)
    m = RecursiveNeoX(
        MeshConfig(vocab_size=257, d_model=32, n_heads=2, layout="1+1R2+1", scheme="mesh", max_seq_len=max_len)
    )
    with torch.no_grad():  # non-trivial routers
        for p in m.routers.parameters():
            p.normal_(0, 0.5)
    return m.eval()


def _req(*args):
    return SimpleNamespace(args=args)


@torch.no_grad()
def _direct_logprob(model, ids, n_target):
    """sum log p of the last n_target tokens of ids given everything before, from one forward pass."""
    x = torch.tensor([ids[:-1]])
    logp = F.log_softmax(model(x)[0].float(), -1)
    tgt = torch.tensor(ids[1:])
    per = logp.gather(-1, tgt[:, None])[:, 0]
    return float(per[-n_target:].sum()), logp[-n_target:].argmax(-1).tolist() == ids[-n_target:]


def test_importable_without_the_harness():
    from iclr26.mesh import evaluate

    lm = MeshLM(_model(), ByteTok())
    assert lm.rank == 0 and lm.world_size == 1
    assert isinstance(evaluate.HAS_LM_EVAL, bool)


def test_loglikelihood_equals_direct_sum_and_moves_trailing_space():
    model, tok = _model(), ByteTok()
    lm = MeshLM(model, tok, batch_size=3)
    reqs = [("def f(x):", " return x"), ("import os ", "path"), ("", "abc"), ("a", "b")]
    got = lm.loglikelihood([_req(c, k) for c, k in reqs])
    for (ctx, cont), (lp, greedy) in zip(reqs, got):
        if ctx == "":
            ids, n = [EOT, *tok.encode(cont)], len(cont)
        else:
            stripped = ctx.rstrip()
            cont2 = ctx[len(stripped) :] + cont  # the space goes to the continuation
            ids, n = tok.encode(stripped + cont2), len(tok.encode(cont2))
        want, want_greedy = _direct_logprob(model, ids, n)
        assert lp == pytest.approx(want, abs=1e-4)
        assert greedy == want_greedy
    assert lm.encode_pair("import os ", "path") == (tok.encode("import os"), tok.encode(" path"))
    assert lm.encode_pair("  ", "x") == ([EOT], tok.encode("  x"))  # whitespace-only context: end-of-text


def test_greedy_flag_true_for_the_argmax_continuation():
    model, tok = _model(), ByteTok()
    lm = MeshLM(model, tok)
    ctx = tok.encode("class A:")
    ids = list(ctx)
    for _ in range(3):
        ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    lp, greedy = lm.score_tokens([(ctx, ids[len(ctx) :])])[0]
    assert greedy
    wrong = [(ids[-1] + 1) % 256]
    assert not lm.score_tokens([(ids[:-1], wrong)])[0][1]
    # greedy means every continuation token is the argmax: two right, the last one wrong is not greedy
    assert not lm.score_tokens([(ctx, ids[len(ctx) : -1] + wrong)])[0][1]


def test_padding_and_batching_do_not_change_scores():
    model, tok = _model(), ByteTok()
    reqs = [_req("x" * n, " yz") for n in (1, 5, 11, 2)]
    a = MeshLM(model, tok, batch_size=1).loglikelihood(reqs)
    b = MeshLM(model, tok, batch_size=4).loglikelihood(reqs)
    for (la, ga), (lb, gb) in zip(a, b):
        assert la == pytest.approx(lb, abs=1e-5) and ga == gb


def test_long_context_keeps_the_rightmost_tokens():
    model, tok = _model(max_len=16), ByteTok()
    lm = MeshLM(model, tok)
    ctx, cont = tok.encode("0123456789abcdefghij"), tok.encode("kl")  # 22 tokens > 16
    lp, _ = lm.score_tokens([(ctx, cont)])[0]
    want, _ = _direct_logprob(model, (ctx + cont)[-17:], 2)
    assert lp == pytest.approx(want, abs=1e-4)


def test_rolling_windows_predict_each_token_once_with_full_context():
    lm = MeshLM(_model(max_len=4), ByteTok())
    w = lm.rolling_windows(list(range(10)))
    # the harness's documented example: max length 4, tokens 0..9, prefix EOT
    assert w == [([EOT], [0, 1, 2, 3]), ([3], [4, 5, 6, 7]), ([5, 6, 7], [8, 9])]
    for n in (1, 4, 5, 9):
        ws = lm.rolling_windows(list(range(n)))
        assert [t for _, tg in ws for t in tg] == list(range(n))
        assert all(len(c) + len(t) - 1 <= 4 for c, t in ws)


def test_loglikelihood_rolling_equals_direct_sum_when_it_fits():
    model, tok = _model(max_len=64), ByteTok()
    text = "for i in range(3): print(i)"
    got = MeshLM(model, tok).loglikelihood_rolling([_req(text)])[0]
    ids = [EOT, *tok.encode(text)]
    want, _ = _direct_logprob(model, ids, len(ids) - 1)
    assert got == pytest.approx(want, abs=1e-4)
    # in windows of 8: the sum of the windows' direct log-probabilities
    lm8 = MeshLM(model, tok, max_length=8)
    windows = lm8.rolling_windows(tok.encode(text))
    want8 = sum(_direct_logprob(model, c + t, len(t))[0] for c, t in windows)
    assert lm8.loglikelihood_rolling([_req(text)])[0] == pytest.approx(want8, abs=1e-4)


def test_generate_until_is_greedy_and_stops():
    model, tok = _model(), ByteTok()
    lm = MeshLM(model, tok)
    ctx = "x = "
    ids = tok.encode(ctx)
    for _ in range(6):
        ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    full = tok.decode(ids[len(tok.encode(ctx)) :])
    assert lm.generate_until([_req(ctx, {"until": [], "max_gen_toks": 6})]) == [full]
    assert lm.generate_until([_req(ctx, {"until": [], "max_gen_toks": 2})]) == [tok.decode(ids[4:6])]
    stop = full[2]
    out = lm.generate_until([_req(ctx, {"until": [stop], "max_gen_toks": 6})])[0]
    assert out == full[: full.index(stop)]
    with pytest.raises(NotImplementedError):
        lm.generate_until([_req(ctx, {"do_sample": True, "temperature": 1.0})])


def test_save_and_load_trained_round_trip(tmp_path):
    from iclr26.mesh.train import load_trained, save_trained

    model = _model()
    save_trained(model, tmp_path)
    back = load_trained(tmp_path)
    assert back.cfg == model.cfg
    x = torch.randint(0, 257, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(back(x), model(x), atol=0, rtol=0)
