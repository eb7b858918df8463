"""One example of a task: which fields matter depends on its kind (``headprune.tasks.kinds``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    """One example; which fields matter depends on the task kind."""

    id: str
    prompt: str = ""
    choices: tuple[str, ...] = ()
    answer: int = -1
    target: str = ""
    text: str = ""
    text_pair: str = ""
    label: int | str | None = None  # classify: an index or a label name
    tests: str = ""  # code: test code run after the program (asserts, or a ``check(candidate)`` function)
    entry_point: str = ""  # code: the function ``check`` is called with (HumanEval style)

    def content(self) -> dict:
        """The fields that define the example (not its id), for hashing and disjointness checks."""
        content: dict = {"prompt": self.prompt, "choices": list(self.choices), "answer": self.answer,
                         "target": self.target, "text": self.text}
        if self.text_pair:  # fields of later kinds only when set, so earlier kinds keep their hashes
            content["text_pair"] = self.text_pair
        if self.label is not None:
            content["label"] = self.label
        if self.tests:
            content.update(tests=self.tests, entry_point=self.entry_point)
        return content

    def content_key(self) -> str:
        return hashlib.sha256(json.dumps(self.content(), sort_keys=True).encode()).hexdigest()

    def input_key(self) -> str:
        """A hash of what the model is given (the content without its answer, target or label): examples with
        the same input but different answers must stay on one side of a split."""
        given = {k: v for k, v in self.content().items() if k not in ("answer", "target", "label")}
        return hashlib.sha256(json.dumps(given, sort_keys=True).encode()).hexdigest()
