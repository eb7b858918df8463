"""``choice``: ``{"prompt", "choices", "answer"}``, pick the most likely continuation (causal LMs) or the choice whose
embedding is closest to the prompt's (encoders)."""

from __future__ import annotations

from headprune.errors import TaskError
from headprune.tasks.example import Example
from headprune.tasks.kinds.spec import TaskKindSpec, register, text_field

PROMPT_WHY = " (a causal model scores what follows it)"


def read(row: dict, example_id: str, path: str, line: int) -> Example:
    prompt = text_field(row, "prompt", path, line, PROMPT_WHY)
    choices, answer = row["choices"], row["answer"]
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) and c for c in choices):
        raise TaskError('"choices" must be a list of at least two non-empty strings', path=path, line=line)
    if len(set(choices)) < len(choices):
        raise TaskError('"choices" must differ from each other (two identical choices cannot be told apart)',
                        path=path, line=line)
    if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(choices):
        raise TaskError(f'"answer" must be an index into "choices" (0..{len(choices) - 1})', path=path, line=line)
    return Example(example_id, prompt=prompt, choices=tuple(choices), answer=answer)


def write(example: Example) -> dict:
    return {"prompt": example.prompt, "choices": list(example.choices), "answer": example.answer}


CHOICE = register(TaskKindSpec(
    "choice", (("prompt",), ("choices",), ("answer",)), read, write,
    layout='{"prompt": str, "choices": [str, ...], "answer": int}', listing="options: length_normalize=true",
    file_options=("length_normalize",)))
