"""Paper-scale path on a fixture in the official annotation CSV format (demo/preference.csv columns)."""

import json
from pathlib import Path

import pytest

from iclr26.core.experiment import ExperimentError, run_experiment
from iclr26.rosetta.experiment import EXPERIMENT
from iclr26.rosetta.paper import read_feedback_csv

HEADER = (
    '"Timestamp","Score","What\'s your name? Make sure to enter your name the same way every single time.",'
    '"Which video are you giving feedback for? Copy-paste the .mp4 file. So if the file is named ""video_name.mp4"", '
    'put ""video_name"" here.","Describe the video","Give feedback. Again, be natural! Speak the way you\'d want to '
    'speak to your personal robot assistant."\n'
)
ROWS = (
    "1/15/2025 21:04:54,,demo,-SphereAndBins-4ebb1fc87b6b0ebf,,Slow it down and put it in the other bin.\n"
    '1/15/2025 21:05:10,4,demo,-SphereAndBins-aa,"Put the red cube into bin1.",Not that one.\n'
)


def _csv(tmp_path: Path, body: str = ROWS) -> Path:
    p = tmp_path / "preference.csv"
    p.write_text(HEADER + body, encoding="utf-8")
    return p


def test_reads_the_official_columns(tmp_path):
    rows = read_feedback_csv(_csv(tmp_path))
    assert [r.feedback for r in rows] == ["Slow it down and put it in the other bin.", "Not that one."]
    assert rows[0].score == "" and rows[1].score == "4" and rows[0].env_name == "SphereAndBins"
    assert rows[1].description == "Put the red cube into bin1."


@pytest.mark.parametrize(
    "body, msg",
    [
        ("1/15/2025,,demo,-X-1,,\n", "row 2 has an empty video id or feedback"),
        ("1/15/2025,,demo,-X-1,desc\n", "row 2 has 5 cells"),
        ("1/15/2025,great,demo,-X-1,,hi\n", "row 2 has a non-numeric score"),
    ],
)
def test_bad_row_gives_one_line_error_naming_it(tmp_path, body, msg):
    with pytest.raises(ValueError, match=msg):
        read_feedback_csv(_csv(tmp_path, body))


def test_bad_header(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("a,b,c,d,e,f\n", encoding="utf-8")
    with pytest.raises(ValueError, match="column 1"):
        read_feedback_csv(p)


def test_paper_scale_run_on_the_fixture(tmp_path):
    csv_path = _csv(tmp_path)
    demo_dir = tmp_path / "demos"
    demo_dir.mkdir()
    (demo_dir / "-SphereAndBins-aa.txt").write_text(
        "gripper at [0.0, 0.0, 0.15] (open); red_cube at [-0.1, -0.1, 0.02]; blue_cube at [-0.1, 0.1, 0.02]; "
        "bin1 at [0.15, -0.12, 0.0]; bin2 at [0.15, 0.12, 0.0]\n"
        "gripper at [0.15, -0.12, 0.05] (open); red_cube at [0.15, -0.12, 0.02]; blue_cube at [-0.1, 0.1, 0.02]; "
        "bin1 at [0.15, -0.12, 0.0]; bin2 at [0.15, 0.12, 0.0]\n"
    )
    opts = {"feedback_csv": str(csv_path), "demo_dir": str(demo_dir), "backend.kind": "scripted"}
    rec = run_experiment(EXPERIMENT, "paper", out_root=tmp_path / "runs", show_progress=False, options=opts)
    out = [json.loads(x) for x in (rec.out_dir / "rewards.jsonl").read_text().splitlines()]
    assert len(out) == 2 and all(r["functions"] for r in out)
    assert "bin2" in out[0]["grounded"] and "0.03" in out[0]["grounded"]
    assert "blue_cube" in out[1]["grounded"]  # "not that one": the red cube was placed in the demo
    assert (rec.out_dir / "transcript.jsonl").exists()
    with pytest.raises(ExperimentError):
        run_experiment(
            EXPERIMENT, "paper", out_root=tmp_path / "runs", show_progress=False, options={"backend.kind": "scripted"}
        )
