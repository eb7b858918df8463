"""``generate``: ``{"prompt", "target"}``, greedy decoding up to the first newline, the answer rule reads the answer,
exact match after trimming."""

from __future__ import annotations

from headprune.errors import TaskError
from headprune.tasks.example import Example
from headprune.tasks.kinds.choice import PROMPT_WHY
from headprune.tasks.kinds.spec import TaskKindSpec, register, text_field


def read(row: dict, example_id: str, path: str, line: int) -> Example:
    prompt = text_field(row, "prompt", path, line, PROMPT_WHY)
    if not isinstance(row["target"], str) or not row["target"].strip():
        raise TaskError('"target" must be a non-empty string', path=path, line=line)
    return Example(example_id, prompt=prompt, target=row["target"])


def write(example: Example) -> dict:
    return {"prompt": example.prompt, "target": example.target}


GENERATE = register(TaskKindSpec(
    "generate", (("prompt",), ("target",)), read, write, layout='{"prompt": str, "target": str}',
    listing="options: max_new_tokens=N, answer=line|first-number|regex:PATTERN",
    file_options=("max_new_tokens", "answer")))
