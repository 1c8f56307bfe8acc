import pytest

from iclr26.core.sandbox import kernel_isolation_available


@pytest.fixture(autouse=True)
def _sandbox_mode(monkeypatch):
    """Kernel isolation where the machine allows it, else the python-only layers (named explicitly)."""
    if kernel_isolation_available() is not None:
        monkeypatch.setenv("ICLR26_SANDBOX_ISOLATION", "python-only")
        monkeypatch.setenv("ICLR26_SANDBOX_ALLOW_PYTHON_ONLY", "1")
    yield
