"""Running the tool code: I' = 𝒯(y', I) (paper section 3.1, step 3).

The code sees exactly: the twelve ReFocus tools, ``image_1`` (a copy of the original PIL image),
``columns_bbox`` / ``rows_bbox`` (label -> bbox) and ``display``. Success means ``display`` received an
image; the last displayed image is I'. Anything else (syntax error, exception, timeout, a non-image
displayed, nothing displayed, a security violation) is a *failed tool step*, never a crashed run.

Two execution paths, chosen per call (``ToolExecutor.mode``):

* ``"sandbox"`` -- every call goes through :func:`iclr26.core.sandbox.run_untrusted` (a fresh locked-down
  process with rlimits, restricted builtins and a wall-time limit; ~0.1-0.3 s per call). This is what
  free-form model code must use.
* ``"auto"`` (default) -- code that parses into the library's own *whitelisted tool-call form*
  (:func:`whitelist_form`: only ``name = <tool>(<image var>, <list of str constants>, columns_bbox|rows_bbox)``
  statements followed by ``display(name)`` calls, nothing else) is run in-process by calling the trusted
  tool functions directly; there is nothing else the code could do. Any code that does not match the form
  exactly goes to the sandbox. The tiny VLM's detokenised calls are all of this form when well formed, so
  an RL step does not pay one process start per rollout; the remaining (malformed) calls are run in the
  sandbox in parallel threads. Both paths give pixel-identical results (tested).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from PIL import Image

from iclr26.core.sandbox import SandboxLimits, model_code_isolation, run_untrusted

from .tools import TOOL_NAMES, tool_functions, tool_specs

__all__ = ["ToolExecutor", "ToolResult", "whitelist_form"]

INPUT_NAMES = ("image_1", "columns_bbox", "rows_bbox")


@dataclass(frozen=True)
class ToolResult:
    """Outcome of one tool step."""

    ok: bool
    """True iff the code displayed an image."""
    image: np.ndarray | None = None
    """I' as an ``[H, W, 3]`` uint8 array (the last displayed image) when ok."""
    error: str | None = None
    """Error kind (the sandbox's kinds, plus ``NoImage`` / ``NotAnImage``)."""
    message: str = ""
    """One line for humans."""
    path: Literal["fast", "sandbox", "parse"] = "sandbox"
    """Where it ran: the trusted fast path, the sandbox, or nowhere (failed before running)."""


def whitelist_form(code: str) -> list[tuple] | None:
    """Parse ``code`` into ``[("call", target, tool, source, keys, bbox_name) | ("display", name)]`` or None.

    Accepts only: assignments ``t = focus_on_*(src, ["a", "b"] | "a", columns_bbox | rows_bbox)`` where
    ``src`` is ``image_1`` or an earlier target, and ``display(t)`` of an earlier target. At least one
    display. Any other statement, name, keyword or expression -> None (the caller uses the sandbox).
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    known, ops, shown = {"image_1"}, [], False
    for st in tree.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            call = st.value
            if not (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id in TOOL_NAMES
                and len(call.args) == 3
                and not call.keywords
            ):
                return None
            src, keys, bb = call.args
            if not (isinstance(src, ast.Name) and src.id in known):
                return None
            if isinstance(keys, ast.Constant) and isinstance(keys.value, str):
                key_list = [keys.value]
            elif isinstance(keys, ast.List | ast.Tuple) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in keys.elts
            ):
                key_list = [e.value for e in keys.elts]
            else:
                return None
            if not (isinstance(bb, ast.Name) and bb.id in ("columns_bbox", "rows_bbox")):
                return None
            target = st.targets[0].id
            if target in INPUT_NAMES or target.startswith("_") or target in TOOL_NAMES or target == "display":
                return None
            ops.append(("call", target, call.func.id, src.id, key_list, bb.id))
            known.add(target)
        elif (
            isinstance(st, ast.Expr)
            and isinstance(st.value, ast.Call)
            and isinstance(st.value.func, ast.Name)
            and st.value.func.id == "display"
            and len(st.value.args) == 1
            and not st.value.keywords
            and isinstance(st.value.args[0], ast.Name)
            and st.value.args[0].id in known
        ):
            ops.append(("display", st.value.args[0].id))
            shown = True
        else:
            return None
    return ops if shown else None


def _as_rgb_array(obj) -> np.ndarray | None:
    if isinstance(obj, Image.Image):
        obj = np.asarray(obj.convert("RGB"))
    if isinstance(obj, np.ndarray) and obj.dtype == np.uint8 and obj.ndim == 3 and obj.shape[2] in (3, 4):
        return np.ascontiguousarray(obj[..., :3])
    if isinstance(obj, np.ndarray) and obj.dtype == np.uint8 and obj.ndim == 2:
        return np.repeat(obj[..., None], 3, axis=2)
    return None


def _from_displayed(displayed: Sequence) -> ToolResult:
    if not displayed:
        return ToolResult(False, error="NoImage", message="the code did not display an image")
    img = _as_rgb_array(displayed[-1])
    if img is None:
        return ToolResult(False, error="NotAnImage", message=f"display() got a {type(displayed[-1]).__name__}")
    return ToolResult(True, image=img)


@dataclass
class ToolExecutor:
    """Runs tool code against one image and its bbox metadata (see the module docstring)."""

    version: str = "v2"
    """Tool geometry / semantics of the official version ("v1" or "v2")."""
    mode: Literal["auto", "sandbox"] = "auto"
    """"auto": whitelisted calls in-process, everything else in the sandbox; "sandbox": always sandbox."""
    limits: SandboxLimits = field(default_factory=lambda: SandboxLimits(timeout_s=10.0, memory_mb=1024))
    """Sandbox limits (v2 uses a 10 s timeout)."""
    max_workers: int = 4
    """Parallel sandbox processes in :meth:`execute_many`."""

    def __post_init__(self) -> None:
        if self.version not in ("v1", "v2"):
            raise ValueError(f"version must be 'v1' or 'v2', got {self.version!r}")
        if self.mode not in ("auto", "sandbox"):
            raise ValueError(f"mode must be 'auto' or 'sandbox', got {self.mode!r}")
        self._fns = tool_functions(self.version)
        self.stats = {"fast": 0, "sandbox": 0}

    def _fast(self, ops: list[tuple], image: Image.Image, bboxes: Mapping[str, Mapping]) -> ToolResult:
        env: dict = {"image_1": image.copy()}
        displayed = []
        try:
            for op in ops:
                if op[0] == "call":
                    _, target, tool, src, keys, _bb = op
                    env[target] = self._fns[tool](env[src], keys, bboxes)
                else:
                    displayed.append(env[op[1]])
        except Exception as e:  # a tool refusing its arguments is a failed tool step, as in the sandbox
            return ToolResult(False, error="RuntimeError", message=f"{type(e).__name__}: {e}"[:500], path="fast")
        res = _from_displayed(displayed)
        return ToolResult(res.ok, res.image, res.error, res.message, path="fast")

    def _sandbox(self, code: str, image: Image.Image, bboxes: Mapping[str, Mapping]) -> ToolResult:
        inputs = {"image_1": image.copy(), "columns_bbox": dict(bboxes), "rows_bbox": dict(bboxes)}
        res = run_untrusted(
            code,
            inputs,
            tools=tool_specs(self.version),
            result_name=None,
            limits=self.limits,
            isolation=model_code_isolation(),  # python-only only when allowed (IsolationRefused otherwise)
        )
        if not res.ok:
            return ToolResult(False, error=res.error, message=res.message, path="sandbox")
        out = _from_displayed(res.displayed)
        return ToolResult(out.ok, out.image, out.error, out.message, path="sandbox")

    def execute(self, code: str, image: Image.Image | np.ndarray, bboxes: Mapping[str, Mapping]) -> ToolResult:
        """Run one tool step. ``bboxes`` serves as both ``columns_bbox`` and ``rows_bbox`` (charts)."""
        if isinstance(image, np.ndarray):
            image = Image.fromarray(image)
        ops = whitelist_form(code) if self.mode == "auto" else None
        if ops is not None:
            self.stats["fast"] += 1
            return self._fast(ops, image, bboxes)
        self.stats["sandbox"] += 1
        return self._sandbox(code, image, bboxes)

    def execute_many(self, codes: Sequence[str], images: Sequence, bboxes: Sequence[Mapping]) -> list[ToolResult]:
        """:meth:`execute` for many calls; sandbox calls run in parallel processes."""
        out: list[ToolResult | None] = [None] * len(codes)
        slow = []
        for i, (code, img, bb) in enumerate(zip(codes, images, bboxes, strict=True)):
            if isinstance(img, np.ndarray):
                img = Image.fromarray(img)
            ops = whitelist_form(code) if self.mode == "auto" else None
            if ops is not None:
                self.stats["fast"] += 1
                out[i] = self._fast(ops, img, bb)
            else:
                slow.append((i, code, img, bb))
        if slow:
            self.stats["sandbox"] += len(slow)
            with ThreadPoolExecutor(max_workers=max(1, min(self.max_workers, len(slow)))) as pool:
                results = list(pool.map(lambda s: self._sandbox(s[1], s[2], s[3]), slow))
            for (i, *_), r in zip(slow, results, strict=True):
                out[i] = r
        return out  # type: ignore[return-value]
