"""One typed config per run of SMAN-Bench (printed by ``iclr26 run sman_bench --show-config``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from iclr26.sman_bench.generator import SMOKE_CONFIG, GeneratorConfig


@dataclass(frozen=True)
class PaperConfig:
    """Paper scale: one agent evaluated on local files (nothing downloads).

    split: common (single- and multi-path on corpus_dir + tasks) | ambiguous (tasks is a released ambiguous file:
        the walk with complete_instruct and with easy_instruct) | noisy (noisy_dir, teacher-forced).
    corpus_dir: corpus folder in the released layout (apps with their action maps and page graphs).
    tasks: tasks JSON file (complete / easy instructions, step instructions, gold paths, Q&A).
    noisy_dir: split=noisy: a released noisy folder (<N>.json trajectories + <N>-<k>.xml screens).
    agent: oracle | oracle_gold | lexical | lexical_shortcut | random | llm (HTTP endpoint) | llm_local (a local
        Hugging Face causal LM, greedy).
    workers: evaluation processes.
    limit: first N tasks only (0 = all).
    base_url: agent=llm: an OpenAI-compatible endpoint, e.g. http://HOST:PORT/v1.
    model: agent=llm: the model name sent to the endpoint.
    api_key_env: agent=llm: environment variable holding the API key (the key never enters config.json).
    model_path: agent=llm_local: local model folder or a registered checkpoint name (`iclr26 models`).
    max_tokens: agent=llm / llm_local: new tokens per reply (the released config: 300).
    seed: seed of the random agent.
    max_rounds: multi-path walk limit (20 for simple tasks, 25 for complex ones).
    """

    split: str = "common"
    corpus_dir: str = ""
    tasks: str = ""
    noisy_dir: str = ""
    agent: str = "lexical_shortcut"
    workers: int = 1
    limit: int = 0
    base_url: str = ""
    model: str = "default"
    api_key_env: str = ""
    model_path: str = ""
    max_tokens: int = 300
    seed: int = 0
    max_rounds: int = 20


@dataclass(frozen=True)
class RunConfig:
    """Everything that changes a result of one SMAN-Bench run.

    gen: the synthetic corpus generator.
    n_train_apps: apps whose tasks train the behaviour-cloning agent (the others are evaluated).
    n_train_tasks: training tasks of the BC agent.
    n_eval_tasks: evaluation tasks per seed.
    bc_epochs: training epochs of the BC agent.
    threads: torch threads.
    paper: paper scale (local files).
    """

    gen: GeneratorConfig = GeneratorConfig()
    n_train_apps: int = 8
    n_train_tasks: int = 300
    n_eval_tasks: int = 150
    bc_epochs: int = 3
    threads: int = 2
    paper: PaperConfig = PaperConfig()


def config_for(scale: str) -> RunConfig:
    """smoke: 2 apps, 20 tasks, one BC epoch; small and paper: the defaults."""
    base = RunConfig()
    if scale == "smoke":
        return replace(base, gen=SMOKE_CONFIG, n_train_apps=1, n_train_tasks=20, n_eval_tasks=20, bc_epochs=1)
    return base
