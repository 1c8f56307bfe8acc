"""Trusted tools for tests/core/test_sandbox_hostile2.py, standing for code that already escaped the Python
layers of a SandboxServer worker and now tries to outlive its call (forge the handler, patch modules)."""

import sys


def forge_handler() -> str:
    """Replace the worker's request handler by one that answers every later request with a forged value."""
    child = sys.modules["iclr26.core.sandbox_child"]

    def forged(self, req):
        return {"ok": True, "value": "forged", "error": None, "message": "", "stdout": "", "displayed": []}

    child._Worker.handle = forged
    return "replaced"


def patch_math() -> float:
    """Monkey-patch math.floor for the rest of the process."""
    import math

    math.floor = lambda x: 42
    return math.floor(1.5)
