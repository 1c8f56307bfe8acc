"""ScenarioNet reader and the paper-scale code path on tiny local scenario files."""

import json
import pickle

import numpy as np
import pytest

from iclr26.core.experiment import ExperimentError, run_experiment
from iclr26.infgen.experiment import EXPERIMENT
from iclr26.infgen.scenarionet import load_scenarios, scenario_to_scene
from iclr26.infgen.tokenizer import SOS, SceneTokenizer
from iclr26.infgen.world import GREEN, RED, align_to_even_steps

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def fake_scenario(seed: int, T: int = 91) -> dict:
    """A ScenarioNet-format dict: a straight 2-lane road, 3 vehicles and a pedestrian, one light."""
    rng = np.random.default_rng(seed)
    tracks = {}
    for i in range(3):
        x0, v = -30.0 + 12 * i + rng.uniform(0, 2), rng.uniform(5, 10)
        t = np.arange(T) * 0.1
        pos = np.stack([x0 + v * t, np.full(T, 1.75), np.zeros(T)], 1)
        valid = np.ones(T, bool)
        if i == 2:
            valid[:23] = False  # appears later
        tracks[f"veh{i}"] = {
            "type": "VEHICLE",
            "state": {
                "position": pos,
                "heading": np.zeros(T),
                "velocity": np.stack([np.full(T, v), np.zeros(T)], 1),
                "length": np.full((T, 1), 4.5),
                "width": np.full((T, 1), 1.9),
                "height": np.full((T, 1), 1.5),
                "valid": valid,
            },
        }
    tracks["ped"] = {
        "type": "PEDESTRIAN",
        "state": {
            "position": np.tile([5.0, 6.0, 0.0], (T, 1)),
            "heading": np.zeros(T),
            "velocity": np.zeros((T, 2)),
            "length": np.full(T, 0.5),
            "width": np.full(T, 0.5),
            "height": np.full(T, 1.8),
            "valid": np.ones(T, bool),
        },
    }
    tracks["sign"] = {"type": "TRAFFIC_CONE", "state": tracks["ped"]["state"]}

    def lane(x0, x1, y, n=50, kind="LANE_SURFACE_STREET"):
        return {"type": kind, "polyline": np.stack([np.linspace(x0, x1, n), np.full(n, y)], 1)}

    lanes = {
        "l1": lane(-60, 60, 1.75),
        "l2": lane(60, -60, -1.75),
        "sw": lane(-60, 60, 6.0),
        "e": lane(-60, 60, 4.0, 9, "ROAD_EDGE_BOUNDARY"),
    }
    states = ["LANE_STATE_GO"] * 40 + ["LANE_STATE_CAUTION"] * 10 + ["LANE_STATE_STOP"] * (T - 50)
    return {
        "id": f"s{seed}",
        "tracks": tracks,
        "map_features": lanes,
        "metadata": {"sdc_id": "veh0"},
        "dynamic_map_states": {"tl0": {"type": "TRAFFIC_LIGHT", "lane": "l1", "state": {"object_state": states}}},
    }


def test_scenario_to_scene_and_tokens():
    scene = scenario_to_scene(fake_scenario(0))
    assert scene.T == 19 and scene.A == 4  # cone dropped
    assert scene.types.tolist().count(1) == 1
    assert np.allclose(scene.states[2, 0, :2], [0.0, 0.0], atol=1e-6)  # centred on the SDC at frame 10
    assert scene.tl[0, 0] == GREEN and scene.tl[-1, 0] == RED
    assert scene.map.num_segments >= 36  # 3 lanes of 120 m cut at <= 10 m
    assert np.all(np.linalg.norm(scene.map.seg_points[:, -1] - scene.map.seg_points[:, 0], axis=1) <= 10.0 + 1e-6)
    seq, info = SceneTokenizer(n_slots=128)(scene)
    assert set(np.unique(seq.t[seq.kind == SOS]).tolist()) == set(range(0, 19, 2))
    # the late vehicle (first valid frame 23 -> 2 Hz step 5, odd) enters at the next even step
    late = int(np.flatnonzero(~scene.valid[0])[0])
    assert scene.valid[:, late].argmax() == 5
    assert align_to_even_steps(scene).valid[:, late].argmax() == 6


def test_real_waymo_ids_keep_the_traffic_lights():
    """Real ScenarioNet (Waymo) files key map features by digit strings and give a light's lane as an int."""
    sd = fake_scenario(0)
    sd["map_features"] = {"101" if k == "l1" else k: v for k, v in sd["map_features"].items()}
    sd["dynamic_map_states"]["tl0"]["lane"] = 101  # an int, as in the released pickles
    scene = scenario_to_scene(sd)
    assert scene.map.num_lights == 1
    assert scene.tl[0, 0] == GREEN and scene.tl[-1, 0] == RED


def test_bad_inputs_raise(tmp_path):
    with pytest.raises(ValueError):
        scenario_to_scene({"tracks": {}})
    with pytest.raises(FileNotFoundError, match="dataset_summary.pkl"):
        load_scenarios(tmp_path, trust_pickles=True)
    with pytest.raises(ValueError, match="trust_pickles"):
        load_scenarios(tmp_path)


def write_dataset(folder, scenarios, sub="", mapping=True):
    """A ScenarioNet dataset: scenario pickles in ``folder/sub`` plus the summary and mapping index files."""
    (folder / sub).mkdir(parents=True, exist_ok=True)
    names = [f"sd_test_{i}.pkl" for i in range(len(scenarios))]
    for name, sd in zip(names, scenarios, strict=True):
        with open(folder / sub / name, "wb") as f:
            pickle.dump(sd, f)
    with open(folder / "dataset_summary.pkl", "wb") as f:
        pickle.dump({n: {"id": n, "number_summary": {"num_objects": 5}} for n in names}, f)
    if mapping:
        with open(folder / "dataset_mapping.pkl", "wb") as f:
            pickle.dump({n: sub for n in names}, f)
    return names


def test_paper_scale_code_path(tmp_path):
    data = tmp_path / "db"
    data.mkdir()
    write_dataset(data, [fake_scenario(i) for i in range(4)], sub="part0")
    with pytest.raises(ExperimentError, match="trust_pickles"):  # no opt-in, no unpickling
        run_experiment(
            EXPERIMENT,
            "paper",
            out_root=tmp_path / "runs",
            show_progress=False,
            options={"paper.data_dir": str(data)},
        )
    rec = run_experiment(
        EXPERIMENT,
        "paper",
        out_root=tmp_path / "runs",
        show_progress=False,
        options={
            "paper.data_dir": str(data),
            "paper.trust_pickles": "true",
            "model.d_model": "64",  # the official full-small shape
            "train.steps": "2",
            "train.warmup_steps": "1",
            "batch": "2",
            "paper.n_eval": "1",
            "eval.horizon": "8",
            "eval.eval_from": "4",
        },
    )
    res = json.loads((rec.out_dir / "results.json").read_text())
    assert {c["name"] for c in res["claims"]} == {"C1", "C2", "C3"}
    assert (rec.out_dir / "ckpt_seed0" / "checkpoint.pt").exists()
    with pytest.raises(ExperimentError):
        run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", show_progress=False)
