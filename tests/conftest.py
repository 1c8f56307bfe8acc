import os
import socket
import subprocess
import sys

import pytest
import torch

# Two cores: keep each test process from oversubscribing them.
torch.set_num_threads(max(1, min(2, int(os.environ.get("OMP_NUM_THREADS", "2")))))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def one_torch_thread():
    """Tiny models run fastest (and robustly on a shared 2-core machine) on one thread.
    Use with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def pytest_configure(config):
    """Where the sandbox's kernel layer is unavailable (no user namespaces in this container), papers' tests that
    run model-written code use the Python-only layers, named explicitly as callers must; the sandbox's own tests
    check both the refusal and the kernel mode where it exists. The header line says which mode ran."""
    from iclr26.core.sandbox import kernel_isolation_available

    why = kernel_isolation_available()
    if why is not None and "ICLR26_SANDBOX_ISOLATION" not in os.environ:
        os.environ["ICLR26_SANDBOX_ISOLATION"] = "python-only"
        os.environ["ICLR26_SANDBOX_ALLOW_PYTHON_ONLY"] = "1"  # model-code paths refuse python-only otherwise
    config._iclr26_sandbox = "kernel" if why is None else f"python-only ({why})"


def pytest_report_header(config):
    return f"iclr26 sandbox for papers' tests: {getattr(config, '_iclr26_sandbox', '?')}"


@pytest.fixture
def torchrun():
    """``torchrun(args, env, timeout)``: ``python -m torch.distributed.run --nproc_per_node=2 ... *args`` on a
    fresh rendezvous port, up to 3 times (the port can race with other sockets on a busy machine; a real bug
    fails every attempt); the finished process, or an AssertionError with torchrun's stderr of each attempt."""

    def run(args, env, timeout=300, nproc=2):
        errors = []
        for _ in range(3):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
            cmd += [f"--master_port={port}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", *args]
            proc = subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True)
            if proc.returncode == 0:
                return proc
            errors.append(proc.stderr[-3000:])
        raise AssertionError("torchrun failed 3 times:\n" + "\n----\n".join(errors))

    return run


# --------------------------------------------------------------------------------------------------
# real pretrained checkpoints (iclr26.core.checkpoints); `make test` requires them, a bare pytest skips
# --------------------------------------------------------------------------------------------------


def real_checkpoint_dir(name: str):
    """The local folder of a registered real checkpoint, built on first use. Without its package installed the
    test is skipped, unless ICLR26_REQUIRE_REAL_CHECKPOINTS=1 (set by `make test`, hence CI): then it fails."""
    from iclr26.core.checkpoints import CheckpointError, local_checkpoint

    try:
        return local_checkpoint(name)
    except CheckpointError as exc:
        if os.environ.get("ICLR26_REQUIRE_REAL_CHECKPOINTS") == "1":
            pytest.fail(f"real checkpoint required (ICLR26_REQUIRE_REAL_CHECKPOINTS=1): {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def smollm2_dir():
    """Folder of SmolLM2-135M-Instruct (real weights, chat template)."""
    return real_checkpoint_dir("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def smollm2(smollm2_dir):
    """``(model, tokenizer)`` of SmolLM2-135M-Instruct, float32, eval mode, loaded once per session.
    Shared by tests: never train or modify it (load your own copy from ``smollm2_dir`` for that)."""
    from iclr26.core.hf import load_local

    model, tok = load_local(smollm2_dir)
    for p in model.parameters():
        p.requires_grad_(False)
    return model, tok


@pytest.fixture
def penalised_chat_lm():
    """A tiny random Llama with a chat template whose generation_config penalises repeats and truncates
    sampling: 'greedy' decoding that inherits the config is not the argmax, pure decoding is."""
    pytest.importorskip("torch")
    from iclr26.core.hf import tiny_random_causal_lm

    model, tok = tiny_random_causal_lm(arch="llama", seed=3)
    if not getattr(tok, "chat_template", None):
        tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    model.generation_config.repetition_penalty = 20.0
    model.generation_config.no_repeat_ngram_size = 1
    model.generation_config.top_k = 3
    model.generation_config.eos_token_id = None
    return model, tok


@pytest.fixture(scope="session")
def minilm_dir():
    """Folder of all-MiniLM-L6-v2 (real sentence encoder)."""
    return real_checkpoint_dir("all-minilm-l6-v2")


# --- smoke runs seen this session, for tests/test_run_logging.py (no smoke runs twice) ---------------------------
_SMOKE_RUNS: dict = {}
"""slug -> run folder of the first default smoke run (seed 0, no ``--set`` options) made by any test."""
_SMOKE_RUNS_WITH_OPTIONS: dict = {}
"""slug -> run folder of the first smoke run (seed 0) made with ``--set`` options (e.g. a cheaper smoke)."""


def _record_smoke_runs():
    """Wrap ``iclr26.core.experiment.run_experiment`` (before test modules import it) so every default smoke run
    a paper's own test makes is remembered; the logging test then checks those folders instead of re-running."""
    import functools

    from iclr26.core import experiment as core_experiment

    original = core_experiment.run_experiment
    if getattr(original, "_records_smoke_runs", False):
        return

    @functools.wraps(original)
    def run_experiment(exp, scale, seeds=None, *args, **kwargs):
        rec = original(exp, scale, seeds, *args, **kwargs)
        if scale == "smoke" and not args and (seeds is None or 0 in tuple(seeds)):
            (_SMOKE_RUNS_WITH_OPTIONS if kwargs.get("options") else _SMOKE_RUNS).setdefault(exp.slug, rec.out_dir)
        return rec

    run_experiment._records_smoke_runs = True
    core_experiment.run_experiment = run_experiment


_record_smoke_runs()


@pytest.fixture(scope="session")
def smoke_runs():
    """``(default, with_options)``: slug -> run folder of a smoke run made earlier in this session without / with
    ``--set`` options (see :func:`_record_smoke_runs`)."""
    return _SMOKE_RUNS, _SMOKE_RUNS_WITH_OPTIONS


def pytest_collection_modifyitems(config, items):
    """The all-papers logging test goes last, so it sees the smoke runs the papers' own tests made."""
    last = [it for it in items if it.path.name == "test_run_logging.py"]
    if last:
        items[:] = [it for it in items if it not in last] + last
