"""ReFocus-style image-editing tools (the tool set 𝒯 of VTool-R1, paper section 3 / ReFocus).

Twelve functions ``focus_on_{columns,rows,x_values,y_values}_with_{mask,draw,highlight}(image, keys,
all_bboxes)``. ``image`` is a PIL image, ``keys`` the labels to focus on (a list of str, used as the official
code uses it: ``len``, ``in`` and iteration), ``all_bboxes`` a dict ``label -> {"x1", "y1", "x2", "y2"}`` in
pixels (PIL convention: both corners inclusive). Every tool returns a NEW image; the input image is never
modified (the official tools draw on their input in place; see the README).

The pixels follow each official version (``tools_version``), as read from the official code (v1:
``verl/tooluse/tools.py`` of VTool-R1; v2: ``recipe/vtool/refocus_tools.py`` of training-v2):

=============  ===============================================  ===============================================
               v1                                               v2
=============  ===============================================  ===============================================
box            ``int(x1 + 2), int(y1 + 2), int(x2 - 2),         ``max(0, int(x1 - p)), max(0, int(y1 - p)),
               int(y2 - 2)`` (inset 2, truncated, no clip)      min(W, int(x2 + p)), min(H, int(y2 + p))``
box too small  inverted after the inset (under 5 px wide, e.g.  --
               a 4-px box): ``ValueError``, the step fails
mask           white over every non-focused box (inset 2)       white over every non-focused box (p = 1)
draw           red outline, width 5 (inset 2)                   red outline, width 3 (p = 2)
highlight      ``(255, 0, 0, 50)`` composited (inset 2); RGBA   ``(255, 0, 0, 50)`` composited (p = 2); RGBA
unknown label  draw / highlight: ``KeyError``, the step fails   dropped (nothing left: image unchanged)
               (x_values highlight and y_values draw skip it);
               mask: ignored
fuzzy keys     y_values draw: each key replaced by every box    y_values draw: the first box label that
               label it contains or is contained in, in turn    contains the key or is contained in it
=============  ===============================================  ===============================================

Both versions: no bboxes or no keys -> unchanged; mask returns the image unchanged when it would mask every
box (``rows``: every box but the first, the table header, which is never masked), so a rows mask whose only
key is the header changes nothing.

:data:`V1_TOOLS` / :data:`V2_TOOLS` map each tool name to the ``"module:attr"`` spec that
:func:`iclr26.core.sandbox.run_untrusted` imports in its child process; the module-level plain names are the
v2 tools. The prompt shows only the six column/row tools (:data:`PROMPT_TOOL_NAMES`).

This module imports only PIL (no torch), so a sandbox child that imports it starts fast.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from PIL import Image, ImageDraw

__all__ = [
    "PAD_DRAW",
    "PAD_HIGHLIGHT",
    "PAD_MASK",
    "PROMPT_TOOL_NAMES",
    "TOOL_NAMES",
    "V1_INSET",
    "V1_TOOLS",
    "V2_TOOLS",
    "apply_tool",
    "tool_specs",
]

WHITE = (255, 255, 255)
RED = (255, 0, 0)
HIGHLIGHT_RGBA = (255, 0, 0, 50)
V1_INSET = 2
"""v1 shrinks every box by 2 px on each side (mask, draw and highlight)."""
V1_DRAW_WIDTH = 5
PAD_MASK, PAD_DRAW, PAD_HIGHLIGHT = 1, 2, 2
"""v2 grows a box by these pads before masking / drawing / highlighting."""
V2_DRAW_WIDTH = 3
VERSIONS = ("v1", "v2")

AXES = ("columns", "rows", "x_values", "y_values")
OPS = ("mask", "draw", "highlight")
TOOL_NAMES = tuple(f"focus_on_{axis}_with_{op}" for axis in AXES for op in OPS)
PROMPT_TOOL_NAMES = tuple(f"focus_on_{axis}_with_{op}" for axis in ("columns", "rows") for op in OPS)

Box = tuple[int, int, int, int]


def _checked(x1: int, y1: int, x2: int, y2: int) -> Box:
    """PIL refuses an inverted rectangle; raise the same way whatever the Pillow version."""
    if x2 < x1 or y2 < y1:
        raise ValueError(f"box ({x1}, {y1}, {x2}, {y2}) is empty after the tool's inset / padding")
    return x1, y1, x2, y2


def _v1_box(b: Mapping) -> Box:
    return _checked(int(b["x1"] + V1_INSET), int(b["y1"] + V1_INSET), int(b["x2"] - V1_INSET), int(b["y2"] - V1_INSET))


def _v2_box(b: Mapping, pad: int, size: tuple[int, int]) -> Box:
    w, h = size
    return _checked(
        max(0, int(b["x1"] - pad)), max(0, int(b["y1"] - pad)), min(w, int(b["x2"] + pad)), min(h, int(b["y2"] + pad))
    )


def _mask_targets(keys, all_bboxes: Mapping, focus, axis: str) -> list | None:
    """Labels to paint white, or None when the image must come back unchanged (both versions)."""
    if len(all_bboxes) == 0 or len(keys) == 0:
        return None
    names = list(all_bboxes)
    candidates = names[1:] if axis == "rows" else names  # rows: the header row is never masked
    hide = [k for k in candidates if k not in focus]
    if not hide or len(hide) == len(candidates):  # nothing to mask, or everything: a mistake, keep the image
        return None
    return hide


def _paint(out: Image.Image, boxes: list[Box], fill=None, outline=None, width: int = 1) -> Image.Image:
    draw = ImageDraw.Draw(out, "RGBA")
    for box in boxes:
        draw.rectangle(box, fill=fill, outline=outline, width=width)
    return out


def _tint(out: Image.Image, boxes: list[Box]) -> Image.Image:
    """``(255, 0, 0, 50)`` rectangles on an RGBA copy, alpha-composited over the image (an RGBA result)."""
    base = out.convert("RGBA")
    overlay = base.copy()
    draw = ImageDraw.Draw(overlay, "RGBA")
    for box in boxes:
        draw.rectangle(box, fill=HIGHLIGHT_RGBA)
    return Image.alpha_composite(base, overlay)


def _v1_fuzzy(key, all_bboxes: Mapping):
    """v1 ``y_values`` draw: walk the labels, replacing the key by each label it contains or lies in."""
    for label in all_bboxes:
        if key in label or label in key:
            key = label
    return key


def _v1(out: Image.Image, keys, all_bboxes: Mapping, axis: str, op: str) -> Image.Image:
    if op == "mask":
        hide = _mask_targets(keys, all_bboxes, keys, axis)
        return out if hide is None else _paint(out, [_v1_box(all_bboxes[k]) for k in hide], fill="white")
    if len(all_bboxes) == 0 or len(keys) == 0:
        return out
    lenient = (axis, op) in (("y_values", "draw"), ("x_values", "highlight"))  # these two skip a bad key
    boxes = []
    for key in keys:
        if axis == "y_values" and op == "draw":
            key = _v1_fuzzy(key, all_bboxes)
        try:
            boxes.append(_v1_box(all_bboxes[key]))
        except Exception:
            if not lenient:
                raise
    if op == "draw":
        return _paint(out, boxes, outline="red", width=V1_DRAW_WIDTH)
    return _tint(out, boxes)


def _v2_resolve(keys, all_bboxes: Mapping, fuzzy: bool) -> list:
    """Known keys in order, without repeats; with ``fuzzy`` an unknown key maps to the first label that
    contains it or that it contains; other unknown keys are dropped."""
    found = []
    for key in keys:
        if key in all_bboxes:
            found.append(key)
        elif fuzzy:
            match = next((label for label in all_bboxes if key == label or key in label or label in key), None)
            found += [] if match is None else [match]
    return list(dict.fromkeys(found))


def _v2(out: Image.Image, keys, all_bboxes: Mapping, axis: str, op: str) -> Image.Image:
    fuzzy = axis == "y_values" and op == "draw"
    if not all_bboxes or not keys:
        return out
    if op == "mask":
        hide = _mask_targets(keys, all_bboxes, set(_v2_resolve(keys, all_bboxes, False)), axis)
        return out if hide is None else _paint(out, [_v2_box(all_bboxes[k], PAD_MASK, out.size) for k in hide], "white")
    chosen = _v2_resolve(keys, all_bboxes, fuzzy)
    if not chosen:
        return out
    if op == "draw":
        boxes = [_v2_box(all_bboxes[k], PAD_DRAW, out.size) for k in chosen]
        return _paint(out, boxes, outline="red", width=V2_DRAW_WIDTH)
    return _tint(out, [_v2_box(all_bboxes[k], PAD_HIGHLIGHT, out.size) for k in chosen])


def apply_tool(
    image: Image.Image, keys, all_bboxes: Mapping[str, Mapping], *, axis: str, op: str, tools_version: str = "v2"
) -> Image.Image:
    """Apply one ReFocus tool (``axis`` in :data:`AXES`, ``op`` in :data:`OPS`) with the pixels of the official
    ``tools_version``. Raises what the official tool raises on bad arguments (a failed tool step)."""
    if axis not in AXES or op not in OPS or tools_version not in VERSIONS:
        raise ValueError(f"unknown tool axis={axis!r} op={op!r} tools_version={tools_version!r}")
    if not isinstance(image, Image.Image):
        raise TypeError(f"image must be a PIL image, got {type(image).__name__}")
    if not isinstance(all_bboxes, Mapping):
        raise TypeError("all_bboxes must be a dict label -> {'x1','y1','x2','y2'}")
    impl = _v1 if tools_version == "v1" else _v2
    return impl(image.copy(), keys, all_bboxes, axis, op)


def _make(axis: str, op: str, tools_version: str) -> Callable:
    def tool(image, keys, all_bboxes):
        return apply_tool(image, keys, all_bboxes, axis=axis, op=op, tools_version=tools_version)

    what = {
        "mask": "masks (paints white) every other",
        "draw": "draws a red box around each chosen",
        "highlight": "highlights in translucent red each chosen",
    }[op]
    tool.__name__ = tool.__qualname__ = f"{tools_version}_focus_on_{axis}_with_{op}"
    tool.__doc__ = (
        f"ReFocus tool ({tools_version}): {what} {axis[:-1].replace('_', ' ')} bbox; returns a new image.\n\n"
        f"Args: image (PIL), keys (list of labels), all_bboxes (label -> bbox dict)."
    )
    return tool


for _version in VERSIONS:
    for _axis in AXES:
        for _op in OPS:
            globals()[f"{_version}_focus_on_{_axis}_with_{_op}"] = _make(_axis, _op, _version)
            if _version == "v2":  # the plain names are the default (v2) tools
                globals()[f"focus_on_{_axis}_with_{_op}"] = globals()[f"v2_focus_on_{_axis}_with_{_op}"]


def tool_specs(tools_version: str = "v2") -> dict[str, str]:
    """``{tool name: "iclr26.vtool_r1.tools:<version>_<name>"}`` for :func:`run_untrusted`'s ``tools``."""
    if tools_version not in VERSIONS:
        raise ValueError(f"tools_version must be 'v1' or 'v2', got {tools_version!r}")
    return {name: f"{__name__}:{tools_version}_{name}" for name in TOOL_NAMES}


def tool_functions(tools_version: str = "v2") -> dict[str, Callable]:
    """The tool callables themselves (same names as :func:`tool_specs`), for the trusted fast path."""
    return {name: globals()[f"{tools_version}_{name}"] for name in tool_specs(tools_version)}


V1_TOOLS = tool_specs("v1")
V2_TOOLS = tool_specs("v2")
