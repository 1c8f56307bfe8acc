import pytest
import torch

from iclr26.core.parallel import seed_map, torch_threads


def _square_and_threads(x):
    import torch

    return x * x, torch.get_num_threads()


def _boom(x):
    if x == 7:  # only one item fails: with both failing, whichever finished first would be named
        raise ValueError(f"bad {x}")
    return x


def test_torch_threads_restores_even_on_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError):
        with torch_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("x")
    assert torch.get_num_threads() == before


def test_seed_map_in_process_and_pool_agree_and_keep_order():
    before = torch.get_num_threads()
    local = seed_map(_square_and_threads, [3, 1, 2])
    assert [v for v, _ in local] == [9, 1, 4] and all(t == 1 for _, t in local)
    assert torch.get_num_threads() == before
    pooled = seed_map(_square_and_threads, [3, 1, 2], workers=2, threads_per_worker=1)
    assert [v for v, _ in pooled] == [9, 1, 4] and all(t == 1 for _, t in pooled)


def test_seed_map_names_the_failing_item():
    with pytest.raises(RuntimeError, match="worker failed on 7"):
        seed_map(_boom, [7, 8], workers=2)


def _fit_bar_disabled(_):
    """In a worker: would fit's bar be drawn? (the same check fit makes)."""
    from iclr26.core.progress import progress_disabled

    return progress_disabled()


def test_no_progress_reaches_spawned_workers_and_is_restored():
    import os

    from iclr26.core.progress import NO_PROGRESS_ENV, progress_env

    assert os.environ.get(NO_PROGRESS_ENV) is None
    with progress_env(False):
        assert seed_map(_fit_bar_disabled, [0, 1], workers=2) == [True, True]
    assert os.environ.get(NO_PROGRESS_ENV) is None
    with progress_env(True):
        assert seed_map(_fit_bar_disabled, [0, 1], workers=2) == [False, False]


def test_fit_draws_no_bar_under_no_progress(capsys):
    from torch import nn

    from iclr26.core.progress import progress_env
    from iclr26.core.train import TrainConfig, fit

    model = nn.Linear(2, 1)

    def loss_fn(m, batch):
        return m(batch).pow(2).mean()

    def get_batch(step, rank, world):
        return torch.ones(4, 2)

    cfg = TrainConfig(steps=3, lr=1e-2, warmup_steps=0, progress=True, desc="bar-under-test")
    fit(model, loss_fn, get_batch, cfg)
    assert "bar-under-test" in capsys.readouterr().err  # drawn by default
    with progress_env(False):
        fit(model, loss_fn, get_batch, cfg)
    assert "bar-under-test" not in capsys.readouterr().err
