"""``classify``: ``{"text", "label"}`` (``"text_pair"`` for pairs), the model's own classification head must pick the
label (an index, or a name from the model's ``id2label``)."""

from __future__ import annotations

from headprune.errors import TaskError
from headprune.tasks.example import Example
from headprune.tasks.kinds.spec import TaskKindSpec, register, text_field


def read(row: dict, example_id: str, path: str, line: int) -> Example:
    text, pair, label = text_field(row, "text", path, line), row.get("text_pair", ""), row["label"]
    if not isinstance(pair, str):
        raise TaskError('"text_pair" must be a string', path=path, line=line)
    if isinstance(label, bool) or not (isinstance(label, int) and label >= 0 or isinstance(label, str) and label):
        raise TaskError('"label" must be a class index (0, 1, ...) or a label name', path=path, line=line)
    return Example(example_id, text=text, text_pair=pair, label=label)


def write(example: Example) -> dict:
    return {"text": example.text, "label": example.label, **({"text_pair": example.text_pair}
                                                             if example.text_pair else {})}


CLASSIFY = register(TaskKindSpec(
    "classify", (("text",), ("label",)), read, write, layout='{"text": str, "label": int | str, "text_pair"?: str}',
    listing="needs a sequence-classification head"))
