"""Paper scale: evaluate an agent on a local Mobile3M-style corpus and MobileBench-v2-style task file,
tasks in parallel over processes.

Task files: a JSON list (or ``{"data": [...]}``) of task dicts. Our generated tasks have every field;
for released MobileBench-v2 tasks only ``name`` (target page) and ``task`` (numbered step lines, the
overall instruction on the last line) are required: the step instructions are parsed from ``task``,
``complete_instruct``/``easy_instruct`` default to the overall instruction and the app is the corpus
app holding the target page.
"""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from iclr26.sman_bench.corpus import Corpus, load_corpus
from iclr26.sman_bench.evaluate import mean_metrics, multi_path_episode, single_path_episode
from iclr26.sman_bench.instructions import Task

AGENTS = ("oracle", "oracle_gold", "lexical", "lexical_shortcut", "random", "llm")


def task_from_record(rec: dict, corpus: Corpus) -> Task:
    if not isinstance(rec, dict) or "name" not in rec:
        raise ValueError(f"task record without 'name': {str(rec)[:80]}")
    if "step_instruct" in rec and "app" in rec:
        return Task.from_json(rec)
    lines = [ln.strip() for ln in str(rec.get("task", "")).splitlines() if ln.strip()]
    steps = [re.sub(r"^\d+[.)]\s*", "", ln) for ln in lines[:-1]]
    overall = lines[-1] if lines else ""
    app = rec.get("app") or corpus.app_of(rec["name"]).name
    return Task(
        app,
        rec["name"],
        rec.get("task", ""),
        rec.get("step_instruct", steps),
        rec.get("complete_instruct", overall),
        rec.get("easy_instruct", overall),
        rec.get("qa", []),
    )


def load_tasks(path: str | Path, corpus: Corpus) -> list[Task]:
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict):
        data = data.get("data", list(data.values()))
    tasks = [task_from_record(r, corpus) for r in data]
    missing = [t.name for t in tasks if t.app not in corpus.apps]
    if missing:
        raise ValueError(f"{len(missing)} tasks point to apps missing from the corpus, e.g. {missing[0]}")
    return tasks


def make_agent(name: str, corpus: Corpus, options: dict | None = None):
    from iclr26.sman_bench import agents

    options = options or {}
    if name == "oracle":
        return agents.OracleAgent(corpus)
    if name == "oracle_gold":
        return agents.OracleAgent(corpus, shortcuts=False)
    if name == "lexical":
        return agents.LexicalAgent(prefer_shortcuts=False)
    if name == "lexical_shortcut":
        return agents.LexicalAgent(prefer_shortcuts=True)
    if name == "random":
        return agents.RandomAgent(int(options.get("seed", 0)))
    if name == "llm":
        from iclr26.sman_bench.llm_agent import LLMAgent, LLMConfig

        if "base_url" not in options:
            raise ValueError("agent=llm needs base_url=http://HOST:PORT/v1")
        key = options.get("api_key")
        if options.get("api_key_env"):  # the key stays out of config.json when read from the environment
            key = os.environ.get(options["api_key_env"])
            if not key:
                raise ValueError(f"api_key_env={options['api_key_env']}: that environment variable is not set")
        return LLMAgent(LLMConfig(options["base_url"], model=options.get("model", "default"), api_key=key))
    raise ValueError(f"unknown agent {name!r}; valid: {', '.join(AGENTS)}")


_W: dict = {}


def _init(corpus_dir: str, agent: str, options: dict):
    _W["corpus"] = load_corpus(corpus_dir)
    _W["agent"], _W["options"] = agent, options


def _run_one(rec: dict) -> dict:
    corpus = _W["corpus"]
    task = Task.from_json(rec)
    agent = make_agent(_W["agent"], corpus, _W["options"])
    max_rounds = int(_W["options"].get("max_rounds", 20))
    mp = multi_path_episode(corpus, task, agent, max_rounds=max_rounds)
    sp = single_path_episode(corpus, task, make_agent(_W["agent"], corpus, _W["options"]))
    return {
        **{f"multi_{k}": v for k, v in mp.items() if k != "final_page"},
        **{f"single_{k}": v for k, v in sp.items()},
    }


def evaluate_directory(
    corpus_dir: str | Path,
    tasks_file: str | Path,
    agent: str = "lexical_shortcut",
    workers: int = 1,
    options: dict | None = None,
    limit: int | None = None,
) -> dict:
    """Single- and multi-path metrics of ``agent`` on a local corpus + task file (``workers`` processes)."""
    options = dict(options or {})
    corpus = load_corpus(corpus_dir)
    tasks = load_tasks(tasks_file, corpus)[:limit]
    make_agent(agent, corpus, options)  # validate before forking
    recs = [t.to_json() for t in tasks]
    if workers <= 1:
        _init(str(corpus_dir), agent, options)
        rows = [_run_one(r) for r in recs]
    else:
        with ProcessPoolExecutor(workers, initializer=_init, initargs=(str(corpus_dir), agent, options)) as ex:
            rows = list(ex.map(_run_one, recs, chunksize=max(1, len(recs) // (4 * workers))))
    return {"n_tasks": len(rows), "agent": agent, **mean_metrics(rows)}
