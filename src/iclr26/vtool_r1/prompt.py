"""The ReFocus-style tool prompt (paper section 3.4), paraphrased in our own words, and the round-2 messages.

Messages are OpenAI / Hugging Face chat dicts: ``{"role": ..., "content": [{"type": "image", "image": PIL},
{"type": "text", "text": ...}]}``, which ``AutoProcessor.apply_chat_template`` of Qwen2.5-VL accepts.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["OBSERVATION_FAIL", "OBSERVATION_OK", "TOOL_PROMPT", "round1_messages", "round2_messages", "user_text"]

TOOL_DOCS = """\
def focus_on_columns_with_mask(image, columns_to_focus_on, all_columns_bounding_boxes):
    # Paint every column NOT listed white, so only the chosen columns stay visible. Returns the new image.
def focus_on_columns_with_draw(image, columns_to_focus_on, all_columns_bounding_boxes):
    # Draw a red box around each chosen column. Returns the new image.
def focus_on_columns_with_highlight(image, columns_to_focus_on, all_columns_bounding_boxes):
    # Tint each chosen column with translucent red. Returns the new image.
def focus_on_rows_with_mask(image, rows_to_focus_on, all_rows_bounding_boxes):
    # Paint every row NOT listed white (the header row is always kept). Returns the new image.
def focus_on_rows_with_draw(image, rows_to_focus_on, all_rows_bounding_boxes):
    # Draw a red box around each chosen row. Returns the new image.
def focus_on_rows_with_highlight(image, rows_to_focus_on, all_rows_bounding_boxes):
    # Tint each chosen row with translucent red. Returns the new image."""

TOOL_PROMPT = f"""\
You can edit the image with these Python functions before you answer:
{TOOL_DOCS}
The bounding boxes are available as `columns_bbox` and `rows_bbox`; call display(image) to see an edited image.

GOAL: answer the user's question about the image correctly.

REQUIREMENTS:
1. Start with "THOUGHT 0:" (your reasoning) and then "ACTION 0:".
2. If no edit is needed, write "ACTION 0: No action needed." and then answer.
3. Otherwise write exactly one ```python code block that calls the functions above and display()s the result.
4. Only ONE action is allowed; you will see the edited image afterwards and then answer.
5. Use as few tools as possible.
6. If the edited image does not help, answer from the original image.
7. Answer as "ANSWER: <reasoning>. FINAL ANSWER: <answer>. TERMINATE".
8. Join several answers with "||".
9. Keep the final answer short (a number, a word or a short phrase).

EXAMPLE (no tool): THOUGHT 0: The title gives it. ACTION 0: No action needed. ANSWER: It reads 2019. \
FINAL ANSWER: 2019. TERMINATE
EXAMPLE (columns): THOUGHT 0: Only the 2020 bar matters. ACTION 0:
```python
image_with_focus = focus_on_columns_with_mask(image_1, ["2020"], columns_bbox)
display(image_with_focus)
```
EXAMPLE (rows): THOUGHT 0: Look at the row of Spain. ACTION 0:
```python
image_with_focus = focus_on_rows_with_highlight(image_1, ["Spain"], rows_bbox)
display(image_with_focus)
```
EXAMPLE (columns and rows): THOUGHT 0: Keep the Price column and the row of Spain. ACTION 0:
```python
image_1 = focus_on_columns_with_draw(image_1, ["Price"], columns_bbox)
image_with_focus = focus_on_rows_with_draw(image_1, ["Spain"], rows_bbox)
display(image_with_focus)
```"""

OBSERVATION_OK = "OBSERVATION: Execution success. The output is as follows:"
OBSERVATION_FAIL = "OBSERVATION: Execution failed. Please regenerate your final answer from the original image."


def user_text(question: str, metadata: Mapping) -> str:
    """``# USER REQUEST #`` line, the bbox key line(s) and the image note (charts: x values; tables: both)."""
    kind = metadata.get("type", "v_bar")
    cols = list(metadata.get("columns_bbox", metadata.get("x_values_bbox", {})))
    rows = list(metadata.get("rows_bbox", metadata.get("y_values_bbox", {})))
    if kind == "table":
        keys = f"The column headers are: {cols}. The first cells of the rows are: {rows}."
    elif kind == "h_bar":
        keys = f"The y values in the image are: {rows or cols}."
    else:
        keys = f"The x values in the image are: {cols or rows}."
    return f"# USER REQUEST #: {question}\n{keys}\nUSER IMAGE stored in image_1, as PIL image.\n\n{TOOL_PROMPT}"


def round1_messages(image, question: str, metadata: Mapping, tools: bool = True) -> list[dict]:
    """Round 1: ``[user: I + prompt]`` (``tools=False``: the pure run, question only)."""
    text = user_text(question, metadata) if tools else f"{question}\nAnswer as 'FINAL ANSWER: <answer>.'"
    return [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}]


def round2_messages(
    image, edited, question: str, metadata: Mapping, y1: str, ok: bool, version: str = "v2"
) -> list[dict]:
    """Round 2. v2: a true multi-turn chat [user: I + prompt][assistant: y'][user: I' + OBSERVATION].
    v1: one user turn with both images and the prompt, and y' (trimmed after its code) + OBSERVATION as an
    assistant prefix (returned as the last, unfinished assistant message)."""
    from .parser import trim_to_action_end

    if version == "v2":
        obs: list[dict] = [{"type": "text", "text": OBSERVATION_OK if ok else OBSERVATION_FAIL}]
        if ok:
            obs.append({"type": "image", "image": edited})
        return round1_messages(image, question, metadata) + [
            {"role": "assistant", "content": [{"type": "text", "text": y1}]},
            {"role": "user", "content": obs},
        ]
    if version != "v1":
        raise ValueError(f"version must be 'v1' or 'v2', got {version!r}")
    return [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": image},
                {"type": "image", "image": edited},
                {"type": "text", "text": user_text(question, metadata)},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {
                    "type": "text",
                    "text": trim_to_action_end(y1)
                    + "\n"
                    + OBSERVATION_OK
                    + "\n<the image outputs of the code is added as the second image>",
                }
            ],
        },
    ]
