"""ReFocus-style image-editing tools (the tool set 𝒯 of VTool-R1, paper section 3 / ReFocus).

Twelve functions ``focus_on_{columns,rows,x_values,y_values}_with_{mask,draw,highlight}(image, keys,
all_bboxes)``. ``image`` is a PIL image, ``keys`` the labels to focus on (a list of str; a single str is
accepted too), ``all_bboxes`` a dict ``label -> {"x1", "y1", "x2", "y2"}`` in pixels (PIL convention:
both corners inclusive). Every tool returns a NEW image; the input image is never modified.

* **mask**: paint every bbox whose label is *not* in ``keys`` solid white. v1 insets each box by 2 px,
  v2 expands it by 1 px (clipped to the image). ``rows`` tools always keep the first row (the table
  header). If ``keys`` is empty, or every box would be masked, the image comes back unchanged.
* **draw**: a red rectangle outline around each focused bbox (v1: width 5, inset 2; v2: width 3, pad 2).
* **highlight**: alpha-composite a ``(255, 0, 0, 50)`` overlay over each focused bbox, i.e.
  ``new = old · (1 − 50/255) + (255, 0, 0) · 50/255`` inside the box.
* v2 adds fuzzy (substring) key matching for ``y_values_with_draw``.

The module-level names are the **v2** tools (the library default); :data:`V1_TOOLS` / :data:`V2_TOOLS`
map each tool name to the ``"module:attr"`` spec that :func:`iclr26.core.sandbox.run_untrusted` imports
in its child process. The prompt shows only the six column/row tools (:data:`PROMPT_TOOL_NAMES`).

This module imports only PIL (no torch), so a sandbox child that imports it starts fast.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from PIL import Image, ImageDraw

__all__ = ["PROMPT_TOOL_NAMES", "TOOL_NAMES", "V1_TOOLS", "V2_TOOLS", "ToolStyle", "apply_tool", "tool_specs"]

WHITE = (255, 255, 255)
RED = (255, 0, 0)
HIGHLIGHT_RGBA = (255, 0, 0, 50)


@dataclass(frozen=True)
class ToolStyle:
    """Geometry of one official tool version."""

    mask_pad: int
    """Pixels added to each masked box on every side (negative = inset): v1 -2, v2 +1."""
    draw_width: int
    """Outline width of the draw tool: v1 5, v2 3."""
    draw_pad: int
    """Pixels added around a box before drawing its outline (negative = inset): v1 -2, v2 +2."""
    fuzzy_y_draw: bool
    """Substring key matching in ``focus_on_y_values_with_draw`` (v2 only)."""


STYLES = {
    "v1": ToolStyle(mask_pad=-2, draw_width=5, draw_pad=-2, fuzzy_y_draw=False),
    "v2": ToolStyle(mask_pad=1, draw_width=3, draw_pad=2, fuzzy_y_draw=True),
}

AXES = ("columns", "rows", "x_values", "y_values")
OPS = ("mask", "draw", "highlight")
TOOL_NAMES = tuple(f"focus_on_{axis}_with_{op}" for axis in AXES for op in OPS)
PROMPT_TOOL_NAMES = tuple(f"focus_on_{axis}_with_{op}" for axis in ("columns", "rows") for op in OPS)


def _box(b: Mapping[str, float], pad: int, w: int, h: int) -> tuple[int, int, int, int] | None:
    """Integer box grown by ``pad`` px (shrunk if negative), clipped to the image; None if empty."""
    x1, y1 = max(0, int(round(b["x1"])) - pad), max(0, int(round(b["y1"])) - pad)
    x2, y2 = min(w - 1, int(round(b["x2"])) + pad), min(h - 1, int(round(b["y2"])) + pad)
    return (x1, y1, x2, y2) if x1 <= x2 and y1 <= y2 else None


def _keys(keys) -> list[str]:
    if keys is None:
        return []
    if isinstance(keys, str):
        return [keys]
    return [str(k) for k in keys]


def _match(keys: list[str], bboxes: Mapping[str, Mapping], fuzzy: bool) -> list[str]:
    """Labels of ``bboxes`` selected by ``keys`` (exact; with ``fuzzy`` also substring either way)."""
    chosen = [k for k in bboxes if k in keys]
    if fuzzy:
        low = [k.lower().strip() for k in keys if k]
        chosen += [k for k in bboxes if k not in chosen and any(q in k.lower() or k.lower() in q for q in low)]
    return chosen


def apply_tool(
    image: Image.Image, keys, all_bboxes: Mapping[str, Mapping], *, axis: str, op: str, version: str = "v2"
) -> Image.Image:
    """Apply one ReFocus tool (``axis`` in :data:`AXES`, ``op`` in :data:`OPS`) in official ``version``."""
    if axis not in AXES or op not in OPS or version not in STYLES:
        raise ValueError(f"unknown tool axis={axis!r} op={op!r} version={version!r}")
    if not isinstance(image, Image.Image):
        raise TypeError(f"image must be a PIL image, got {type(image).__name__}")
    if not isinstance(all_bboxes, Mapping):
        raise TypeError("all_bboxes must be a dict label -> {'x1','y1','x2','y2'}")
    style = STYLES[version]
    out = image.convert("RGB") if image.mode != "RGB" else image.copy()
    w, h = out.size
    keys_l = _keys(keys)
    focus = _match(keys_l, all_bboxes, fuzzy=style.fuzzy_y_draw and axis == "y_values" and op == "draw")
    if op == "mask":
        keep = set(focus)
        if axis == "rows" and all_bboxes:
            keep.add(next(iter(all_bboxes)))  # the header row always stays
        hide = [k for k in all_bboxes if k not in keep]
        if not keys_l or not focus or len(hide) == len(all_bboxes):
            return out  # nothing to focus on, or everything would be masked: unchanged
        draw = ImageDraw.Draw(out)
        for k in hide:
            box = _box(all_bboxes[k], style.mask_pad, w, h)
            if box is not None:
                draw.rectangle(box, fill=WHITE)
        return out
    if op == "draw":
        draw = ImageDraw.Draw(out)
        for k in focus:
            box = _box(all_bboxes[k], style.draw_pad, w, h)
            for i in range(style.draw_width if box is not None else 0):  # a ring of draw_width 1-px outlines
                x1, y1, x2, y2 = box[0] + i, box[1] + i, box[2] - i, box[3] - i
                if x1 > x2 or y1 > y2:
                    break
                draw.rectangle((x1, y1, x2, y2), outline=RED, width=1)
        return out
    overlay = Image.new("RGBA", out.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    for k in focus:
        box = _box(all_bboxes[k], 0, w, h)
        if box is not None:
            draw.rectangle(box, fill=HIGHLIGHT_RGBA)
    return Image.alpha_composite(out.convert("RGBA"), overlay).convert("RGB")


def _make(axis: str, op: str, version: str) -> Callable:
    def tool(image, keys, all_bboxes):
        return apply_tool(image, keys, all_bboxes, axis=axis, op=op, version=version)

    what = {
        "mask": "masks (paints white) every other",
        "draw": "draws a red box around each chosen",
        "highlight": "highlights in translucent red each chosen",
    }[op]
    tool.__name__ = tool.__qualname__ = f"{version}_focus_on_{axis}_with_{op}"
    tool.__doc__ = (
        f"ReFocus tool ({version}): {what} {axis[:-1].replace('_', ' ')} bbox; returns a new image.\n\n"
        f"Args: image (PIL), keys (list of labels), all_bboxes (label -> bbox dict)."
    )
    return tool


for _version in STYLES:
    for _axis in AXES:
        for _op in OPS:
            globals()[f"{_version}_focus_on_{_axis}_with_{_op}"] = _make(_axis, _op, _version)
            if _version == "v2":  # the plain names are the default (v2) tools
                globals()[f"focus_on_{_axis}_with_{_op}"] = globals()[f"v2_focus_on_{_axis}_with_{_op}"]


def tool_specs(version: str = "v2") -> dict[str, str]:
    """``{tool name: "iclr26.vtool_r1.tools:<version>_<name>"}`` for :func:`run_untrusted`'s ``tools``."""
    if version not in STYLES:
        raise ValueError(f"version must be 'v1' or 'v2', got {version!r}")
    return {name: f"{__name__}:{version}_{name}" for name in TOOL_NAMES}


def tool_functions(version: str = "v2") -> dict[str, Callable]:
    """The tool callables themselves (same names as :func:`tool_specs`), for the trusted fast path."""
    return {name: globals()[f"{version}_{name}"] for name in tool_specs(version)}


V1_TOOLS = tool_specs("v1")
V2_TOOLS = tool_specs("v2")
