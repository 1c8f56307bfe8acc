"""Hypothesis fuzzes the CLI arguments: any text gives exit 0/2 and a one-line error, never a traceback."""

import sys
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from iclr26.cli import main

sys.path.insert(0, str(Path(__file__).parent))
import toy_experiment  # noqa: E402,F401  (registers the "toy" experiment)

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _exit_code(argv):
    try:
        return main(argv)
    except SystemExit as exc:  # argparse: --help or a usage error
        return exc.code


@FUZZ
@given(
    seeds=st.one_of(
        st.text(max_size=40),
        st.lists(st.integers(-(2**70), 2**70), min_size=1, max_size=4).map(lambda xs: ",".join(map(str, xs))),
    )
)
def test_fuzz_seeds(seeds, capsys):
    code = _exit_code(["run", "toy", "--scale", "smoke", "--seeds", seeds, "--show-config"])
    err = capsys.readouterr().err
    assert code in (0, 2)
    assert "Traceback" not in err
    if code == 2:
        assert err.startswith("iclr26: error")


@FUZZ
@given(key=st.text(max_size=30), value=st.text(max_size=30))
def test_fuzz_set(key, value, capsys):
    code = _exit_code(["run", "toy", "--scale", "smoke", "--set", f"{key}={value}", "--show-config"])
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err


@FUZZ
@given(scale=st.text(max_size=20), slug=st.text(max_size=20))
def test_fuzz_slug_and_scale(scale, slug, capsys):
    assume(not slug.startswith("-") and not scale.startswith("-"))  # option-looking values: argparse's business
    code = _exit_code(["run", slug or "toy", "--scale", scale, "--show-config"])
    assert code in (0, 1, 2)
    assert "Traceback" not in capsys.readouterr().err
