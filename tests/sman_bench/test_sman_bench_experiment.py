import json

import pytest

from iclr26.core.experiment import ExperimentError, run_experiment
from iclr26.sman_bench.corpus import write_corpus
from iclr26.sman_bench.experiment import EXPERIMENT
from iclr26.sman_bench.generator import SMOKE_CONFIG, generate_corpus
from iclr26.sman_bench.instructions import generate_tasks
from iclr26.sman_bench.paper import evaluate_directory


def test_smoke_scale_end_to_end(tmp_path):
    rec = run_experiment(EXPERIMENT, "smoke", out_root=tmp_path, show_progress=False)
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert [c["name"] for c in res["claims"]] == ["C1", "C2", "C3", "C4"]
    for c in res["claims"]:
        assert c["measured"] is not None and "error" not in c
    summary = res["metrics"]["summary"]
    assert summary["oracle"]["multi_success"] == 1.0 and summary["oracle_gold"]["gold_match"] == 1.0
    assert (rec.out_dir / "report.md").exists()


def test_paper_path_on_local_files(tmp_path):
    corpus, _ = generate_corpus(0, SMOKE_CONFIG)
    write_corpus(corpus, tmp_path / "corpus", write_pages=False)
    tasks = generate_tasks(corpus, 8, 0)
    # released-style records: only the target page and the numbered task text
    recs = [{"name": t.name, "task": t.task} for t in tasks]
    (tmp_path / "tasks.json").write_text(json.dumps(recs))
    res = evaluate_directory(tmp_path / "corpus", tmp_path / "tasks.json", agent="oracle_gold", workers=2)
    assert res["n_tasks"] == 8 and res["multi_success"] == 1.0 and res["single_success"] == 1.0
    rec = run_experiment(
        EXPERIMENT,
        "paper",
        out_root=tmp_path / "runs",
        show_progress=False,
        options={
            "paper.corpus_dir": str(tmp_path / "corpus"),
            "paper.tasks": str(tmp_path / "tasks.json"),
            "paper.agent": "lexical",
        },
    )
    assert rec.results["metrics"]["paper"]["n_tasks"] == 8
    with pytest.raises(ExperimentError):
        run_experiment(
            EXPERIMENT,
            "paper",
            out_root=tmp_path / "runs",
            show_progress=False,
            options={"paper.corpus_dir": str(tmp_path / "nope"), "paper.tasks": str(tmp_path / "tasks.json")},
        )
    with pytest.raises(ExperimentError, match="unknown agent"):
        run_experiment(
            EXPERIMENT,
            "paper",
            out_root=tmp_path / "runs",
            show_progress=False,
            options={
                "paper.corpus_dir": str(tmp_path / "corpus"),
                "paper.tasks": str(tmp_path / "tasks.json"),
                "paper.agent": "gpt",
            },
        )


@pytest.mark.slow
def test_small_scale(tmp_path):
    rec = run_experiment(EXPERIMENT, "small", out_root=tmp_path, show_progress=False)
    assert len(rec.claims) == 4 and all(c.measured is not None for c in rec.claims)


def test_same_seed_same_numbers():
    from iclr26.sman_bench.config import config_for
    from iclr26.sman_bench.experiment import run_seed

    assert run_seed(1, config_for("smoke")) == run_seed(1, config_for("smoke"))
