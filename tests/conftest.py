import os

import pytest
import torch

# Two cores: keep each test process from oversubscribing them.
torch.set_num_threads(max(1, min(2, int(os.environ.get("OMP_NUM_THREADS", "2")))))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
