"""The static results site, checked in a real browser (headless Chromium) when one is installed."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from iclr26.core.experiment import run_experiment
from iclr26.core.html import write_site

HERE = Path(__file__).parent
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    sys.path.insert(0, str(HERE))
    import toy_experiment

    runs = tmp_path_factory.mktemp("runs")
    run_experiment(toy_experiment.EXPERIMENT, "smoke", (0,), runs, show_progress=False)
    small = run_experiment(toy_experiment.EXPERIMENT, "small", (0, 1), runs, {"train.steps": "60"}, show_progress=False)
    # a newer smoke run must not hide the small run's verdicts
    run_experiment(toy_experiment.EXPERIMENT, "smoke", (3,), runs, show_progress=False)
    out = tmp_path_factory.mktemp("site")
    return write_site(runs, out), small


def test_site_has_every_claim_escaped_and_one_row_per_scale(site):
    index, small = site
    text = index.read_text()
    assert text.count("<tr><td><a href=") == 2  # toy smoke + toy small
    assert "1/2" in text and "n/a (smoke)" in text
    pages = sorted(p for p in index.parent.glob("toy-small-*.html"))
    assert len(pages) == 1
    page = pages[0].read_text()
    for claim in small.results["claims"]:
        assert f'data-claim="{claim["name"]}"' in page
    assert page.count('class="pass"') == 1 and page.count('class="fail"') == 1
    assert "provenance" in page.lower() and "train" in page and ".png" in page
    assert all((index.parent / src).exists() for src in _img_srcs(page))


def _img_srcs(page):
    import re

    return re.findall(r'<img src="([^"]+)"', page)


def test_markup_in_values_is_escaped(tmp_path):
    from iclr26.core.html import render_run

    run = {
        "slug": "x",
        "scale": "small",
        "seeds": [0],
        "_dir": str(tmp_path / "r1"),
        "wall_seconds": 1.0,
        "claims": [
            {
                "name": "C1",
                "statement": "<script>alert(1)</script>",
                "paper_value": "a&b",
                "measured": {"step_reward[gold_prefix_0]": 0.5},
                "rule": "x < y",
                "passed": True,
            }
        ],
    }
    page = render_run(run, None, [])
    assert "<script>" not in page and "&lt;script&gt;" in page and "step_reward[gold_prefix_0]" in page


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (Debian package: chromium)")
def test_chromium_renders_index_and_a_paper_page(site, tmp_path):
    index, small = site
    page = next(index.parent.glob("toy-small-*.html"))
    env = {**os.environ, "HOME": str(tmp_path)}
    base = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    for target in (index, page):
        png = tmp_path / (target.stem + ".png")
        r = subprocess.run(
            base + [f"--screenshot={png}", "--window-size=1200,1600", target.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert png.exists() and png.read_bytes()[:4] == b"\x89PNG", r.stderr[-2000:]
    dom = subprocess.run(
        base + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, env=env
    ).stdout
    for claim in small.results["claims"]:
        assert f'data-claim="{claim["name"]}"' in dom
    assert json.loads(json.dumps(small.results["seeds"])) == [0, 1]
