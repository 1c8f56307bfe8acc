"""Smoke run, claim rules, and the paper-scale path on tiny files in the SPECTRE / GDSS formats."""

import pickle

import networkx as nx
import numpy as np
import pytest
import torch

from iclr26.core.config import ConfigError
from iclr26.core.experiment import run_experiment
from iclr26.graph_ldm.data import community_small
from iclr26.graph_ldm.experiment import CLAIMS, EXPERIMENT, summarise
from iclr26.graph_ldm.paper_data import UntrustedFileError, load_graphs, split_graphs

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TINY = {
    "data.n_train": "12",
    "data.n_heldout": "4",
    "data.n_reference": "12",
    "data.n_samples": "6",
    "ae_train.steps": "4",
    "diff_train.steps": "4",
    "method.steps": "3",
    "method.d_model": "16",
    "method.n_layers": "1",
    "ae.hidden": "16",
    "step_sweep": "2",
    "batch_size": "8",
}


def test_smoke_run_writes_results(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False, options=TINY)
    res = rec.results
    assert [c["name"] for c in res["claims"]] == ["C1", "C2", "C3"]
    m = res["metrics"]
    assert {"node", "none", "self", "dual", "dual_steps2", "dual_sym"} <= set(m["summary"])
    assert "passed" in m["competence_gate"] and m["noise_floor"]["mean"] >= 0
    for v in m["per_seed"][0]["variants"].values():
        assert np.isfinite(v["avg"]) and v["avg"] >= -1e-9
    assert (rec.out_dir / "avg_mmd_per_variant.png").exists() and (rec.out_dir / "samples_per_variant.png").exists()


def test_same_seed_same_numbers(tmp_path):
    opts = {**TINY, "variants": "self,dual", "step_sweep": "", "symmetric": "false"}
    a = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path / "a", show_progress=False, options=opts)
    b = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path / "b", show_progress=False, options=opts)
    assert a.results["metrics"]["summary"] == b.results["metrics"]["summary"]


def test_unknown_setting_rejected(tmp_path):
    with pytest.raises(ConfigError):
        run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False, options={"method.pp": "1"})


def _fake_seed(seed, avg, c):
    variants = {
        v: {"avg": a, "degree": a, "clustering": a, "orbit": a, "spectral": a, "mismatch_c": c[v], "vun": {"un": 1.0}}
        for v, a in avg.items()
    }
    return {
        "seed": seed,
        "variants": variants,
        "ae": {"edge_acc": 0.99},
        "erdos_renyi": {"avg": 1.0},
        "noise_floor": {"avg": 0.001},
    }


def test_claim_rules_pass_and_fail():
    c = {"node": 0.0, "none": 0.8, "self": 0.6, "dual": 0.2}
    good = [_fake_seed(s, {"node": 0.2, "none": 0.3, "self": 0.2, "dual": 0.1}, c) for s in range(3)]
    _, res = summarise(good)
    verdicts = {cl.name: cl.check(res["measured"][cl.name]) for cl in CLAIMS}
    assert verdicts == {"C1": True, "C2": True, "C3": True} and res["gate"]["passed"]
    bad = [
        _fake_seed(s, {"node": 0.05, "none": 0.3, "self": 0.1, "dual": 0.09 + 0.02 * (s > 0)}, {**c, "dual": 0.4})
        for s in range(3)
    ]
    _, res = summarise(bad)
    verdicts = {cl.name: cl.check(res["measured"][cl.name]) for cl in CLAIMS}
    assert verdicts == {"C1": False, "C2": False, "C3": False}
    assert res["measured"]["C2"]["dual_below_self_frac"] == pytest.approx(1 / 3)


# ---- paper scale: released formats ---------------------------------------------------------------
def _spectre_file(path, graphs):
    adjs = [torch.tensor(nx.to_numpy_array(g), dtype=torch.float32) for g in graphs]
    eig = [torch.linalg.eigh(torch.eye(a.shape[0]) - a / a.sum(1).clamp(min=1).unsqueeze(1)) for a in adjs]
    n_nodes = [a.shape[0] for a in adjs]
    torch.save(
        (
            adjs,
            [e[0] for e in eig],
            [e[1] for e in eig],
            n_nodes,
            torch.tensor(2.0),
            torch.tensor(0.0),
            False,
            max(n_nodes),
        ),
        path,
    )


def test_spectre_file_loads_without_trust_and_splits_like_digress(tmp_path):
    graphs = community_small(10, 1)
    _spectre_file(tmp_path / "sbm_10.pt", graphs)
    loaded = load_graphs(tmp_path / "sbm_10.pt")
    assert len(loaded) == 10 and all(nx.is_isomorphic(a, b) for a, b in zip(loaded, graphs))
    train, val, test = split_graphs(list(range(200)), "planar_64_200.pt")
    assert (len(train), len(val), len(test)) == (128, 32, 40)
    assert sorted(train + val + test) == list(range(200))
    assert test == torch.randperm(200, generator=torch.Generator().manual_seed(0)).tolist()[160:]


def test_gdss_pickle_needs_trust_and_bad_graphs_are_named(tmp_path):
    graphs = community_small(6, 2)
    path = tmp_path / "community_small.pkl"
    path.write_bytes(pickle.dumps(graphs))
    with pytest.raises(UntrustedFileError, match="trust_pickle"):
        load_graphs(path)
    assert len(load_graphs(path, trust_pickle=True)) == 6
    train, val, test = split_graphs(graphs, "community_small.pkl")
    assert len(test) == 1 and test[0] is graphs[0] and len(train) == 5
    loop = nx.path_graph(4)
    loop.add_edge(2, 2)
    weighted = nx.path_graph(3)
    weighted[0][1]["weight"] = 2.5
    for bad, msg in [
        (loop, "self-loop"),
        (nx.DiGraph([(0, 1)]), "directed"),
        (weighted, "weights"),
        (nx.path_graph(70), "more than max_nodes"),
    ]:
        path.write_bytes(pickle.dumps(graphs[:2] + [bad]))
        with pytest.raises(ValueError, match=f"graph 2 .*{msg}|graph 2 has .*{msg}|{msg}"):
            load_graphs(path, trust_pickle=True)


def test_paper_scale_path_on_a_gdss_fixture(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "community_small.pkl").write_bytes(pickle.dumps(community_small(15, 3)))
    opts = {**TINY, "data_dir": str(data), "data_file": "community_small.pkl", "variants": "dual", "step_sweep": ""}
    with pytest.raises(Exception, match="trust_pickle"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path, show_progress=False, options=opts)
    opts["trust_pickle"] = "true"
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path, show_progress=False, options=opts)
    assert np.isfinite(rec.results["metrics"]["summary"]["dual"]["avg"]["mean"])
    with pytest.raises(Exception, match="data_dir"):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path, show_progress=False, options=TINY)


@pytest.mark.slow
def test_small_claim_run(tmp_path):
    """The `small` reproduction (minutes on 2 cores): the gate and every claim are evaluated and reported."""
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    claims = {c["name"]: c for c in rec.results["claims"]}
    assert set(claims) == {"C1", "C2", "C3"} and all(c.get("measured") is not None for c in claims.values())
    assert "passed" in rec.results["metrics"]["competence_gate"]
