"""``text``: ``{"text"}``, mean token negative log-likelihood, a continuous control metric (no accuracy)."""

from __future__ import annotations

from headprune.tasks.example import Example
from headprune.tasks.kinds.spec import TaskKindSpec, register, text_field


def read(row: dict, example_id: str, path: str, line: int) -> Example:
    return Example(example_id, text=text_field(row, "text", path, line))


def write(example: Example) -> dict:
    return {"text": example.text}


TEXT = register(TaskKindSpec("text", (("text",),), read, write, layout='{"text": str}', accuracy=False))
