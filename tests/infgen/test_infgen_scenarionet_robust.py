"""Real-format ScenarioNet scenarios with a broken ego, NaN positions or empty tracks: a clear error for the
scenario (never another agent promoted to agent 0) or a counted skip of the track; lazy per-file loading."""

import pickle
from collections import Counter

import numpy as np
import pytest

from iclr26.infgen.scenarionet import BadScenario, LazyScenes, scenario_files, scenario_to_scene
from iclr26.infgen.world import GREEN, PEDESTRIAN, RED, VEHICLE

# Scenario dicts in the real ScenarioNet (Waymo) format: digit-string track and map ids, float32 arrays,
# sizes of shape [T], zeros at invalid frames, per-track and scenario metadata, traffic lights whose ``lane``
# is an int and that carry a stop point (the field set of the released converted pickles).
T10 = 91


def _track(tid, kind, pos, heading, speed, size, valid):
    T = len(valid)
    vel = np.stack([speed * np.cos(heading), speed * np.sin(heading)], 1)
    pos3 = np.concatenate([pos, np.zeros((T, 1))], 1)
    state = {
        "position": pos3.astype(np.float32),
        "length": np.full(T, size[0], np.float32),
        "width": np.full(T, size[1], np.float32),
        "height": np.full(T, size[2], np.float32),
        "heading": np.asarray(heading, np.float32),
        "velocity": vel.astype(np.float32),
        "valid": np.asarray(valid, bool),
    }
    for k in ("position", "length", "width", "height", "heading", "velocity"):
        state[k][~state["valid"]] = 0.0  # real files hold zeros at invalid frames
    meta = {"track_length": T, "type": kind, "object_id": tid, "dataset": "waymo"}
    return {"type": kind, "state": state, "metadata": meta}


def real_format_scenario(seed: int = 0) -> dict:
    """A straight two-way road (map ids "101", "102"; a road line "103"), the SDC "7" and two vehicles on
    lane "101", a pedestrian "12" on the kerb right next to where the SDC is at the current frame, a light
    on lane 101 given as an int."""
    rng = np.random.default_rng(seed)
    t = np.arange(T10) * 0.1
    tracks = {}
    for tid, x0 in (("7", 0.0), ("3", 15.0), ("21", -20.0)):
        v = 8.0 + rng.uniform(-1, 1)
        pos = np.stack([x0 - v * 1.0 + v * t, np.full(T10, 1.75)], 1)
        tracks[tid] = _track(tid, "VEHICLE", pos, np.zeros(T10), np.full(T10, v), (4.6, 1.9, 1.6), np.ones(T10, bool))
    tracks["12"] = _track(
        "12",
        "PEDESTRIAN",
        np.tile([0.5, 4.0], (T10, 1)),
        np.zeros(T10),
        np.zeros(T10),
        (0.6, 0.6, 1.8),
        np.ones(T10, bool),
    )

    def line(kind, x0, x1, y, n=40):
        return {"type": kind, "polyline": np.stack([np.linspace(x0, x1, n), np.full(n, y), np.zeros(n)], 1)}

    map_features = {
        "101": line("LANE_SURFACE_STREET", -80, 80, 1.75),
        "102": line("LANE_SURFACE_STREET", 80, -80, -1.75),
        "103": line("ROAD_LINE_SOLID_DOUBLE_YELLOW", -80, 80, 0.0),
    }
    states = ["LANE_STATE_GO"] * 50 + ["LANE_STATE_CAUTION"] * 10 + ["LANE_STATE_STOP"] * (T10 - 60)
    light = {
        "type": "TRAFFIC_LIGHT",
        "lane": 101,
        "stop_point": np.array([60.0, 1.75, 0.0]),
        "state": {"object_state": states},
        "metadata": {"type": "TRAFFIC_LIGHT", "object_id": "101", "dataset": "waymo", "track_length": T10},
    }
    return {
        "id": f"real{seed}",
        "version": "MetaDrive v0.3.0.1",
        "length": T10,
        "tracks": tracks,
        "dynamic_map_states": {"101": light},
        "map_features": map_features,
        "metadata": {
            "coordinate": "waymo",
            "ts": (np.arange(T10) * 0.1).astype(np.float32),
            "metadrive_processed": False,
            "sdc_id": "7",
            "dataset": "waymo",
            "scenario_id": f"real{seed}",
            "track_length": T10,
            "current_time_index": 10,
            "sdc_track_index": 0,
            "objects_of_interest": [],
            "tracks_to_predict": {},
        },
    }


def test_real_format_scene():
    skipped = Counter()
    scene = scenario_to_scene(real_format_scenario(0), skipped=skipped)
    assert scene.A == 4 and scene.T == 19
    assert scene.types[0] == VEHICLE and np.allclose(scene.states[2, 0, :2], 0.0, atol=1e-4)  # SDC at the origin
    assert scene.types[1] == PEDESTRIAN  # the nearest other agent at the current frame comes next
    assert scene.map.num_lights == 1 and scene.tl[0, 0] == GREEN and scene.tl[-1, 0] == RED
    assert skipped == Counter()


@pytest.mark.parametrize(
    "breakage, reason",
    [
        ("never_valid", "SDC never valid"),
        ("invalid_now", "SDC not valid at the current frame"),
        ("unmapped", "SDC not among the tracks"),
        ("nan_now", "SDC non-finite state"),
        ("empty", "SDC empty track"),
        ("not_an_agent", "SDC type"),
    ],
)
def test_broken_ego_is_a_clear_error_not_a_promoted_pedestrian(breakage, reason):
    sd = real_format_scenario(1)
    ego = sd["tracks"]["7"]["state"]
    if breakage == "never_valid":
        ego["valid"][:] = False
    elif breakage == "invalid_now":
        ego["valid"][10] = False
    elif breakage == "unmapped":
        sd["metadata"]["sdc_id"] = "999"
    elif breakage == "nan_now":
        ego["position"][10, 0] = np.nan
    elif breakage == "empty":
        sd["tracks"]["7"]["state"] = {k: np.zeros((0,) + v.shape[1:], v.dtype) for k, v in ego.items()}
    elif breakage == "not_an_agent":
        sd["tracks"]["7"]["type"] = "TRAFFIC_CONE"
    with pytest.raises(BadScenario, match="SDC|sdc_id") as info:
        scenario_to_scene(sd)
    assert info.value.reason == reason


def test_nan_positions_and_empty_tracks_are_counted_skips():
    sd = real_format_scenario(2)
    sd["tracks"]["3"]["state"]["position"][30, 1] = np.nan  # NaN at a sampled valid frame: the track goes
    sd["tracks"]["21"]["state"]["position"][31, :] = np.nan  # NaN at a 10 Hz frame that is not sampled: kept
    sd["tracks"]["12"]["state"]["valid"][:] = False  # never valid: skipped, not agent 0
    sd["tracks"]["40"] = {"type": "VEHICLE", "state": {k: np.zeros(0) for k in sd["tracks"]["3"]["state"]}}
    sd["tracks"]["41"] = {"type": "CYCLIST", "state": {}}
    sd["tracks"]["42"] = {"type": "VEHICLE", "state": dict(sd["tracks"]["21"]["state"], valid=np.ones(50, bool))}
    sd["tracks"]["43"] = {"type": "TRAFFIC_CONE", "state": sd["tracks"]["21"]["state"]}
    nan_only_invalid = dict(sd["tracks"]["21"]["state"])
    nan_only_invalid["valid"] = np.arange(T10) < 40
    nan_only_invalid["position"] = nan_only_invalid["position"].copy()
    nan_only_invalid["position"][40:] = np.nan  # NaN where invalid (as some converters write): kept
    sd["tracks"]["44"] = {"type": "VEHICLE", "state": nan_only_invalid}
    skipped = Counter()
    scene = scenario_to_scene(sd, skipped=skipped)
    assert skipped == Counter(
        {
            "track: non-finite state": 1,
            "track: never valid": 1,
            "track: empty track": 2,
            "track: length mismatch": 1,
            "track: type TRAFFIC_CONE": 1,
        }
    )
    assert scene.A == 3 and scene.types[0] == VEHICLE and np.allclose(scene.states[2, 0, :2], 0.0, atol=1e-4)
    assert np.isfinite(scene.states).all() and scene.valid[:, 2].sum() == 8  # track 44: frames 0..35


def test_light_on_an_unknown_lane_is_counted():
    sd = real_format_scenario(3)
    sd["dynamic_map_states"]["101"]["lane"] = 555
    skipped = Counter()
    assert scenario_to_scene(sd, skipped=skipped).map.num_lights == 0
    assert skipped == Counter({"light: lane not in the map": 1})


def _write(folder, scenarios):
    names = [f"sd_real_{i}.pkl" for i in range(len(scenarios))]
    for n, sd in zip(names, scenarios, strict=True):
        with open(folder / n, "wb") as f:
            pickle.dump(sd, f)
    with open(folder / "dataset_summary.pkl", "wb") as f:
        pickle.dump({n: {"id": n} for n in names}, f)
    return names


def test_lazy_scenes_read_on_demand_and_skip_bad_scenarios(tmp_path):
    scenarios = [real_format_scenario(i) for i in range(5)]
    scenarios[2]["tracks"]["7"]["state"]["valid"][:] = False  # a never-valid ego
    scenarios[0]["tracks"]["99"] = dict(scenarios[0]["tracks"]["3"], type="TRAFFIC_CONE")  # a dropped track
    _write(tmp_path, scenarios)
    files = scenario_files(tmp_path, trust_pickles=True)

    def convert(sd, skipped):
        return scenario_to_scene(sd, skipped=skipped)

    lazy = LazyScenes(files, convert, cache_size=2)
    assert lazy.reads == 0 and len(lazy) == 5  # nothing unpickled until asked
    s0 = lazy[0]
    assert lazy.reads == 1 and lazy[0] is s0 and lazy.reads == 1  # cached
    s2 = lazy[2]  # the bad one is skipped, counted, and the next usable scene is served
    assert lazy.skipped == Counter({"scenario: SDC never valid": 1, "track: type TRAFFIC_CONE": 1})
    assert "sd_real_2.pkl" in next(iter(lazy.bad))
    assert np.array_equal(s2.states, lazy[3].states)
    for i in (4, 1, 0):
        lazy[i]
    assert lazy.reads == 6  # 0, 2 (bad), 3, 4, 1, and 0 again (evicted from a cache of 2)
    # a re-read scene's dropped tracks are not counted again
    assert lazy.skipped == Counter({"scenario: SDC never valid": 1, "track: type TRAFFIC_CONE": 1})


def test_training_reads_only_the_scenes_its_batches_draw(tmp_path):
    from iclr26.core.train import TrainConfig
    from iclr26.infgen.model import InfGenConfig, InfGenModel
    from iclr26.infgen.paper import LazyTokens
    from iclr26.infgen.tokenizer import MotionTokenizer, SceneTokenizer
    from iclr26.infgen.training import train_infgen

    _write(tmp_path, [real_format_scenario(i) for i in range(8)])
    lazy = LazyScenes(scenario_files(tmp_path, trust_pickles=True), lambda sd, sk: scenario_to_scene(sd, skipped=sk))
    tok = SceneTokenizer(motion=MotionTokenizer(n_bins=5), n_slots=8)
    cfg = InfGenConfig(d_model=16, n_heads=2, n_dec_layers=1, n_actions=25, n_slots=8, max_segments=64)
    model = InfGenModel(cfg)
    train_infgen(model, LazyTokens(lazy, tok, seed=0), TrainConfig(steps=1, warmup_steps=1, progress=False), 2, 0)
    assert 1 <= lazy.reads <= 2  # one batch of 2 draws: the other scenario files were never unpickled
