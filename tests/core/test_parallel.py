import pytest
import torch

from iclr26.core.parallel import seed_map, torch_threads


def _square_and_threads(x):
    import torch

    return x * x, torch.get_num_threads()


def _boom(x):
    raise ValueError(f"bad {x}")


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
