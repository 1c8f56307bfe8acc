"""SMAN-Bench: A Cross-System Benchmark for Mobile Agents under Single- and Multi-path, Ambiguous, and
Noisy Tasks (Xu et al., ICLR 2026; arXiv 2505.11891, earlier "Mobile-Bench-v2").

Implemented:

* :mod:`~iclr26.sman_bench.corpus`: Mobile3M-style corpus format (double-JSON ``all_action_id.json``,
  ``all_page_actions.json``, ``all_page_id.json``, ``all_triple.json``, per-page xml/html), writer,
  loader, action strings, scroll-endpoint geometry, ``actions_generate`` and the transition model.
* :mod:`~iclr26.sman_bench.generator`: a synthetic corpus generator (apps, pages, elements, shortcut
  links, an ad app and pop-up overlays), deterministic from a seed.
* :mod:`~iclr26.sman_bench.instructions`: slot-based instruction generation (typed slot templates,
  step / complete / easy instructions, preset Q&A for dropped slots).
* :mod:`~iclr26.sman_bench.splits`: noisy and AITZ-Noise-style contaminated splits.
* :mod:`~iclr26.sman_bench.evaluate`: single-path (teacher-forced), multi-path (graph walk, step reward),
  noisy (coordinate-based) and ambiguous (Q&A) evaluators, with the released-code bugs fixed and a
  ``compat`` flag that reproduces them; character F1.
* :mod:`~iclr26.sman_bench.agents`: Oracle, GoldPrefix, Random, Lexical agents, Asking and NoiseAware
  wrappers, the behaviour-cloned TinyBC agent.
* :mod:`~iclr26.sman_bench.llm_agent`: an AppAgent-style agent for any OpenAI-compatible endpoint
  (standard-library HTTP), malformed replies become invalid actions.
* :mod:`~iclr26.sman_bench.paper`: evaluation on a local corpus + task file, tasks over processes.
* :mod:`~iclr26.sman_bench.experiment`: claims C1-C4 on synthetic corpora.

Not implemented: screenshots (PNG) and their tag annotation, the multimodal agents (AppAgent-v1 with
vision, Mobile-Agent-v2/E multi-agent frameworks), the "cross-system" part of the ICLR version, the paper's
model-ranking tables (not available to us; no paper number is quoted).
"""

from iclr26.sman_bench.agents import (
    AskingAgent,
    GoldPrefixAgent,
    LexicalAgent,
    NoiseAwareAgent,
    OracleAgent,
    RandomAgent,
    TinyBCAgent,
    train_bc,
)
from iclr26.sman_bench.corpus import (
    App,
    Corpus,
    Page,
    UIElement,
    actions_generate,
    load_app,
    load_corpus,
    page_parent,
    page_path_ids,
    parse_action_string,
    scroll_endpoints,
    write_corpus,
)
from iclr26.sman_bench.evaluate import (
    Action,
    Observation,
    char_f1,
    multi_path_episode,
    noisy_episode,
    single_path_episode,
    step_reward,
)
from iclr26.sman_bench.generator import GeneratorConfig, generate_corpus
from iclr26.sman_bench.instructions import TEMPLATES, Task, generate_tasks
from iclr26.sman_bench.llm_agent import LLMAgent, LLMConfig
from iclr26.sman_bench.splits import build_noisy_split

__all__ = [
    "Action",
    "App",
    "AskingAgent",
    "Corpus",
    "GeneratorConfig",
    "GoldPrefixAgent",
    "LLMAgent",
    "LLMConfig",
    "LexicalAgent",
    "NoiseAwareAgent",
    "Observation",
    "OracleAgent",
    "Page",
    "RandomAgent",
    "TEMPLATES",
    "Task",
    "TinyBCAgent",
    "UIElement",
    "actions_generate",
    "build_noisy_split",
    "char_f1",
    "generate_corpus",
    "generate_tasks",
    "load_app",
    "load_corpus",
    "multi_path_episode",
    "noisy_episode",
    "page_parent",
    "page_path_ids",
    "parse_action_string",
    "scroll_endpoints",
    "single_path_episode",
    "step_reward",
    "train_bc",
    "write_corpus",
]
