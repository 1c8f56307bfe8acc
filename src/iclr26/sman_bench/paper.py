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

AGENTS = ("oracle", "oracle_gold", "lexical", "lexical_shortcut", "random", "llm", "llm_local")


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


def load_tasks(path: str | Path, corpus: Corpus, skipped: list | None = None) -> list[Task]:
    """Task records of a common-split file. A record that cannot be used (no ``name``, a target page in no app of
    the corpus) is appended to ``skipped`` as ``(record, reason)`` when a list is given, else it raises."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict):
        data = data.get("data", list(data.values()))
    tasks = []
    for i, r in enumerate(data):
        try:
            t = task_from_record(r, corpus)
            if t.app not in corpus.apps:
                raise ValueError(f"app {t.app!r} is not in the corpus")
            tasks.append(t)
        except (KeyError, ValueError) as exc:
            if skipped is None:
                raise ValueError(f"{path}: record {i}: {exc}") from None
            skipped.append((f"{Path(path).name}[{i}]", str(exc)))
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
    if name == "llm_local":
        from iclr26.sman_bench.llm_agent import LLMAgent, local_chat

        if not options.get("model_path"):
            raise ValueError("agent=llm_local needs model_path=FOLDER (or a registered name, see `iclr26 models`)")
        return LLMAgent(chat_fn=local_chat(options["model_path"], int(options.get("max_tokens", 300))))
    raise ValueError(f"unknown agent {name!r}; valid: {', '.join(AGENTS)}")


_W: dict = {}


def _init(corpus_dir: str, agent: str, options: dict):
    _W["corpus"] = load_corpus(corpus_dir)
    _W["agent"], _W["options"] = agent, options


def _episodes(corpus, task, make, max_rounds: int, split: str) -> dict:
    if split == "ambiguous":  # the released ambiguous runs: easy_instruct vs complete_instruct (with its Q&A)
        rows = {}
        for key, instr in (("complete", "complete"), ("easy", "easy")):
            rows[key] = multi_path_episode(corpus, task, make(), max_rounds, instruction=instr, allow_ask=True)
        return {f"{k}_{m}": v for k, r in rows.items() for m, v in r.items() if m != "final_page"}
    mp = multi_path_episode(corpus, task, make(), max_rounds=max_rounds)
    sp = single_path_episode(corpus, task, make())
    return {
        **{f"multi_{k}": v for k, v in mp.items() if k != "final_page"},
        **{f"single_{k}": v for k, v in sp.items()},
    }


def _run_one(rec: dict) -> dict:
    """One task's metrics, or ``{"skipped": reason}``: a bad page or record never aborts the run."""
    corpus, opts = _W["corpus"], _W["options"]
    try:
        task = Task.from_json(rec)
        make = lambda: make_agent(_W["agent"], corpus, opts)  # noqa: E731
        return _episodes(corpus, task, make, int(opts.get("max_rounds", 20)), opts.get("split", "common"))
    except Exception as exc:  # noqa: BLE001 - counted with its reason, reported by evaluate_directory
        return {"skipped": f"{rec.get('name', '?')}: {type(exc).__name__}: {str(exc)[:160]}"}


def summarize_rows(rows: list[dict], skipped: list[tuple[str, str]]) -> dict:
    """Means over the evaluated tasks, plus the skip count and the first reasons."""
    done = [r for r in rows if "skipped" not in r]
    skips = list(skipped) + [("task", r["skipped"]) for r in rows if "skipped" in r]
    return {
        "n_tasks": len(done),
        "n_skipped": len(skips),
        "skip_reasons": [f"{w}: {why}" for w, why in skips[:20]],
        **mean_metrics(done),
    }


def evaluate_directory(
    corpus_dir: str | Path,
    tasks_file: str | Path,
    agent: str = "lexical_shortcut",
    workers: int = 1,
    options: dict | None = None,
    limit: int | None = None,
    split: str = "common",
) -> dict:
    """Metrics of ``agent`` on a local corpus + task file (``workers`` processes). ``split``: "common" (single- and
    multi-path) or "ambiguous" (a released ambiguous task file: the walk with ``complete_instruct`` and with
    ``easy_instruct``, asks answered from the record's Q&A). Bad records and tasks whose pages fail are skipped
    and counted (``n_skipped``, ``skip_reasons``); action strings no known form parses are counted per corpus."""
    if split not in ("common", "ambiguous"):
        raise ValueError(f"split must be 'common' or 'ambiguous', got {split!r}")
    options = {**(options or {}), "split": split}
    corpus = load_corpus(corpus_dir)
    skipped: list[tuple[str, str]] = []
    if split == "ambiguous":
        from iclr26.sman_bench.released import load_ambiguous_tasks

        tasks, skipped = load_ambiguous_tasks(tasks_file, corpus)
    else:
        tasks = load_tasks(tasks_file, corpus, skipped)
    tasks = tasks[:limit]
    make_agent(agent, corpus, options)  # validate before forking
    recs = [t.to_json() for t in tasks]
    if workers <= 1:
        _init(str(corpus_dir), agent, options)
        rows = [_run_one(r) for r in recs]
    else:
        with ProcessPoolExecutor(workers, initializer=_init, initargs=(str(corpus_dir), agent, options)) as ex:
            rows = list(ex.map(_run_one, recs, chunksize=max(1, len(recs) // (4 * workers))))
    bad = {a: app.unparsable_actions() for a, app in corpus.apps.items()}
    return {
        "agent": agent,
        "split": split,
        "unparsable_action_strings": sum(len(v) for v in bad.values()),
        **summarize_rows(rows, skipped),
    }


def evaluate_noisy_dir(folder: str | Path, agent: str = "lexical_shortcut", options: dict | None = None) -> dict:
    """A released noisy folder, teacher-forced (:func:`evaluate.noisy_episode`), with our scoring and the released
    one (``compat``, micro-averaged as in ``noise_data_test``). Agents that need the corpus graph are refused."""
    from iclr26.sman_bench.evaluate import noisy_episode
    from iclr26.sman_bench.released import load_noisy_dir

    if agent.startswith("oracle"):
        raise ValueError("the noisy split has no corpus graph: oracle agents are not available")
    episodes, skipped = load_noisy_dir(folder)
    rows, crows = [], []
    for ep in episodes:
        rows.append(noisy_episode(ep, make_agent(agent, None, options)))
        crows.append(noisy_episode(ep, make_agent(agent, None, options), compat=True))
    out = {"agent": agent, "split": "noisy", **summarize_rows(rows, skipped)}
    if crows:
        out.update({f"compat_{k}": v for k, v in mean_metrics(crows, micro=True).items()})
    return out
