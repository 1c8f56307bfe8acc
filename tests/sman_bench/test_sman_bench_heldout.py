"""C3/C4 measure a learned agent on held-out wording: the train and eval phrasings share no word, nothing the BC
agent learns from carries the eval wording, the Q&A reaches the prompt, the oracle follows networkx shortest
paths and the BC features go through scikit-learn's FeatureHasher with their counts."""

import re

import networkx as nx
import numpy as np
import torch
from sman_helpers import tiny_corpus, tiny_task

from iclr26.sman_bench import agents as A
from iclr26.sman_bench.evaluate import Action, Observation, mean_metrics, multi_path_episode, noisy_episode
from iclr26.sman_bench.generator import AD_PHRASINGS, GeneratorConfig, generate_corpus, popup_screen
from iclr26.sman_bench.instructions import VAGUE_PHRASINGS, generate_tasks, with_qa
from iclr26.sman_bench.splits import build_noisy_split

CFG = GeneratorConfig(n_apps=3, n_sections=2, n_items=3, n_more=1, n_options=2, n_details=1)


def _words(texts) -> set[str]:
    return {w for t in texts for w in re.findall(r"[a-z]+", t.lower()) if len(w) > 2}


def _phrasing_words(split: str) -> set[str]:
    ph = AD_PHRASINGS[split]
    return _words([ph["ad"].replace("{deal}", "").replace("{lure}", ""), *ph["deals"], *ph["dismiss"]]) | _words(
        VAGUE_PHRASINGS[split].values()
    )


def test_train_and_eval_phrasings_share_no_word():
    train, ev = _phrasing_words("train"), _phrasing_words("eval")
    assert train and ev and not train & ev
    assert set(VAGUE_PHRASINGS["train"]) == set(VAGUE_PHRASINGS["eval"])  # same slots, different words


def test_eval_phrasing_reaches_the_evaluated_splits():
    corpus, _ = generate_corpus(0, CFG)
    tasks = generate_tasks(corpus, 20, 0, phrasing="eval")
    for t in tasks:
        for q in t.qa:
            assert VAGUE_PHRASINGS["eval"][q["slot"]] in t.easy_instruct
            assert VAGUE_PHRASINGS["train"][q["slot"]] not in t.easy_instruct
    rng = np.random.default_rng(0)
    texts = [e["text"] for _ in range(20) for e in popup_screen(rng, ["Lamp"], "eval")]
    assert _words(texts) & _phrasing_words("eval") and not _words(texts) & _phrasing_words("train")
    eps = build_noisy_split(corpus, tasks, 0, p_noise=1.0, phrasing="eval")
    overlay_texts = [e.text for ep in eps for s in ep["screens"] if s["noise"] for e in s["elements"]]
    assert overlay_texts and not _words(overlay_texts) & _phrasing_words("train")


def test_bc_training_examples_never_hold_the_eval_wording():
    corpus, _ = generate_corpus(1, CFG)
    train = generate_tasks(corpus, 30, 1, phrasing="train")
    ex = A.bc_examples(corpus, train, p_overlay=1.0, seed=0)
    seen = _words(
        o.instruction + " " + (o.step_instruction or "") + " " + " ".join(e.text for e in o.elements) for o, _ in ex
    )
    assert not seen & _phrasing_words("eval")
    assert seen & _phrasing_words("train")  # the train wording is there: overlays and easy views are learned from
    overlays = [(o, i) for o, i in ex if o.page.endswith("#popup")]
    assert len(overlays) == len(train) and all(
        o.elements[i].text in AD_PHRASINGS["train"]["dismiss"] for o, i in overlays
    )
    views = [o for o, _ in ex if not o.page.endswith("#popup")]
    assert len(views) == 3 * sum(len(t.gold) for t in train)
    assert sum(o.step_instruction is None for o in views) == 2 * sum(len(t.gold) for t in train)
    easy_views = [o for o in views if o.instruction.startswith(tuple(t.easy_instruct for t in train))]
    assert len(easy_views) == sum(len(t.gold) for t in train) and all(" A: " in o.instruction for o in easy_views)


class Recorder:
    def __init__(self):
        self.instructions = []

    def act(self, obs):
        self.instructions.append(obs.instruction)
        return Action("back")


def test_qa_in_prompt_gives_the_answers_from_the_first_round():
    corpus, _ = generate_corpus(0, CFG)
    t = generate_tasks(corpus, 5, 0, phrasing="eval")[0]
    rec = Recorder()
    multi_path_episode(corpus, t, rec, instruction="easy", step_instructions=False, qa_in_prompt=True, max_rounds=2)
    assert rec.instructions[0] == with_qa(t.easy_instruct, t.qa)
    for q in t.qa:
        assert f"A: {q['answer']}" in rec.instructions[0] and q["question"] in rec.instructions[0]
    rec2 = Recorder()
    multi_path_episode(corpus, t, rec2, instruction="easy", step_instructions=False, max_rounds=2)
    assert rec2.instructions[0] == t.easy_instruct


def test_privileged_references_know_the_held_out_wording():
    corpus, _ = generate_corpus(0, CFG)
    tasks = generate_tasks(corpus, 15, 0, phrasing="eval")
    eps = build_noisy_split(corpus, tasks, 0, p_noise=1.0, phrasing="eval")
    aware = mean_metrics([noisy_episode(e, A.NoiseAwareAgent(A.LexicalAgent())) for e in eps])
    assert (
        aware["success"]
        == mean_metrics(
            [noisy_episode(e, A.LexicalAgent()) for e in build_noisy_split(corpus, tasks, 0, 1.0, clean=True)]
        )["success"]
    )
    ask = [
        multi_path_episode(
            corpus, t, A.AskingAgent(A.LexicalAgent()), instruction="easy", step_instructions=False, allow_ask=True
        )
        for t in tasks
    ]
    assert all(r["asks"] == len(t.qa) for r, t in zip(ask, tasks))


def test_oracle_follows_networkx_shortest_paths():
    corpus = tiny_corpus()
    app = corpus.apps["r"]
    g = A.app_graph(app)
    assert g.edges["r", "r_0_3"]["action"] == 2 and set(g.edges) == {(s, d) for (s, _), d in app.T.items()}
    r = multi_path_episode(corpus, tiny_task(), A.OracleAgent(corpus))
    assert r["success"] == 1.0 and r["n_actions"] == nx.shortest_path_length(g, "r", "r_0_3_5") == 2
    c, _ = generate_corpus(2, CFG)
    for t in generate_tasks(c, 15, 2):
        n = multi_path_episode(c, t, A.OracleAgent(c))["n_actions"]
        assert n == nx.shortest_path_length(A.app_graph(c.apps[t.app]), t.root, t.name)


def test_bc_scorer_is_hashed_weights_times_counts_plus_dense():
    el = A.UIElement("click", "Red Lamp Red", ((40, 240), (1040, 370)))
    obs = Observation("Open Red Lamp.", "Select Red Lamp.", [el], "p", "a")
    strings, dense = A.element_features(obs, 0)
    assert dense[6:] == [540 / 1080, 305 / 2400, 1000 / 1080, 130 / 2400]
    hashed, dense_t = A.page_features(obs)
    ref = A.HASHER.transform([strings])
    assert (hashed != ref).nnz == 0
    model = A.TinyBCScorer()
    torch.manual_seed(0)
    torch.nn.init.normal_(model.emb.weight)
    w = model.emb.weight[:, 0].detach().numpy()
    manual = sum(w[j] * v for j, v in zip(ref.indices, ref.data)) + float(model.dense(dense_t)[0].detach())
    assert abs(float(model.score(obs)[0].detach()) - manual) < 1e-4
    twice = A.HASHER.transform([["e:red", "e:red"]])
    assert twice.data.tolist() == [2.0]  # a repeated feature counts twice
