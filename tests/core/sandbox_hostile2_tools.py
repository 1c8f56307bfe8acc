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


def set_trusted() -> str:
    """Flip the worker's trusted flag, as the old harness did before formatting an exception."""
    frame = sys._getframe()
    while frame is not None:
        jail = frame.f_locals.get("jail")
        if jail is not None and type(jail).__name__ == "_Jail":
            jail.trusted = True
            return "trusted"
        frame = frame.f_back
    raise RuntimeError("no sandbox harness on the stack")


def write_file(path: str) -> str:
    """Library code called by the source that writes where it is told (the audit hook is what stops it)."""
    with open(path, "w") as f:
        f.write("pwned")
    return "wrote"
