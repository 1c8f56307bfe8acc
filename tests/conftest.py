import os

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
