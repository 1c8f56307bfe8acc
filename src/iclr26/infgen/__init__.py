"""InfGen / SceneStreamer: continuous scenario generation as next-token-group prediction.

Zhenghao Peng, Yuxin Liu, Bolei Zhou. "InfGen: Scenario Generation as Next Token Group Prediction" (v1),
renamed "SceneStreamer: Continuous Scenario Generation as Next Token Group Prediction" (ICLR 2026).
arXiv 2506.23316. Official code: VAIL-UCLA/SceneStreamer (not copied; used only to settle details).

A traffic scene is one token stream ``[<MAP>; (<TL>, <AS>, <MO>)_1; (<TL>, <AS>, <MO>)_2; ...]`` and one
transformer predicts the next token *group*. New agents are new <AS> tokens, so agents can be inserted at any
step and rollouts can run forever without the scene emptying.

Implemented:

* :mod:`.world` - TinyTown, a signalised intersection with IDM car following, Poisson arrivals and exits,
  2 Hz logs and 19-step windows (the in-package stand-in for WOMD).
* :mod:`.tokenizer` - traffic-light, agent-state (SOA, TYPE, MS, RS; 8 fields x 81 bins) and motion tokens
  (33 x 33 acceleration / yaw-rate grid with closed-loop average-corner-error labels).
* :mod:`.model` - map encoder + decoder with the group-causal attention mask, relative-pose attention bias,
  the five heads, incremental decoding with a KV cache.
* :mod:`.generate` - rollouts of any horizon with state-forcing, agent insertion (``released``: caller count
  toward a density target, the default; ``learned``: end-of-agents token, **our extension**; ``off``), reject
  sampling and eviction; log-replay.
* :mod:`.metrics` - counts, W1 of speed / acceleration / headway, collisions, off-road.
* :mod:`.scenarionet` - ScenarioNet scenario reader (paper scale); :mod:`.training` - training with core.train.
* :mod:`.config` - the run's typed settings (``RunConfig``, ``config_for``); :mod:`.evaluate` - rollout
  statistics, figures and tables of a run; :mod:`.experiment` / :mod:`.paper` - the TinyTown / ScenarioNet runs.

Not implemented: the official sparse KNN edge-feature attention (a dense bias is used), the 27-D map vector
features (lanes only), TrafficGen-protocol MMD and WOSAC metrics, the RL (TD3 / MetaDrive) experiment.
"""

from iclr26.infgen.generate import Generator, RolloutConfig, log_replay, top_p_sample
from iclr26.infgen.metrics import (
    box_corners,
    boxes_overlap,
    collisions_per_step,
    headways,
    offroad_per_step,
    scene_stats,
    wasserstein1,
)
from iclr26.infgen.model import InfGenConfig, InfGenModel, KVCache, collate, collate_maps, group_mask
from iclr26.infgen.scenarionet import load_scenarios, scenario_to_scene
from iclr26.infgen.tokenizer import (
    MotionTokenizer,
    SceneTokenizer,
    StateBuckets,
    TokenSeq,
    long_run_windows,
    relative_state,
    select_map_segment,
)
from iclr26.infgen.training import paper_train_config, train_infgen
from iclr26.infgen.world import MapData, Scene, TinyTown, TinyTownConfig, cut_windows, make_dataset

__all__ = [
    "Generator",
    "RolloutConfig",
    "log_replay",
    "top_p_sample",
    "box_corners",
    "boxes_overlap",
    "collisions_per_step",
    "headways",
    "offroad_per_step",
    "scene_stats",
    "wasserstein1",
    "InfGenConfig",
    "InfGenModel",
    "KVCache",
    "collate",
    "collate_maps",
    "group_mask",
    "load_scenarios",
    "scenario_to_scene",
    "MotionTokenizer",
    "SceneTokenizer",
    "StateBuckets",
    "TokenSeq",
    "long_run_windows",
    "relative_state",
    "select_map_segment",
    "paper_train_config",
    "train_infgen",
    "MapData",
    "Scene",
    "TinyTown",
    "TinyTownConfig",
    "cut_windows",
    "make_dataset",
]
