"""What a task is: a named list of examples of one kind, scored example by example.

The kinds (``choice``, ``generate``, ``text``, ``classify``, ``code``) are registered specs in
:mod:`headprune.tasks.kinds`, one module each: their rows, how they are read and written, their options.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from headprune.core.choices import TASK_KINDS
from headprune.core.limits import limit
from headprune.errors import TaskError
from headprune.tasks.answers import LINE, AnswerRule, rule_to_json
from headprune.tasks.example import Example
from headprune.tasks.kinds import kind_spec

TaskKind = str  # a registered kind's name (headprune.tasks.kinds; listed in core.choices.TASK_KINDS)


def parse_options(text: str) -> dict[str, str]:
    """``key=value,...`` -> a dict (the options part of a task spec). An ``answer=regex:PATTERN`` option must come
    last and takes the rest of the text, commas included (a pattern may contain them). An option given twice is
    refused (which of its values counts would be a guess)."""
    options: dict[str, str] = {}
    head, marker, pattern = text.partition("answer=regex:")
    if marker:
        if head.strip() and not head.rstrip().endswith(","):
            raise TaskError(f"task option {text!r} is not key=value,...")
        text, options["answer"] = head, "regex:" + pattern
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TaskError(f"task option {item!r} is not key=value")
        if key.strip() in options:
            raise TaskError(f"task option {key.strip()} is given twice ({key.strip()}={options[key.strip()][:40]}, "
                            f"{key.strip()}={value.strip()[:40]}): give it once")
        options[key.strip()] = value.strip()
    return options


def has_accuracy(kind: str) -> bool:
    """Whether examples of this kind are right or wrong (``text`` tasks only have a mean NLL)."""
    return kind_spec(kind).accuracy


@dataclass(frozen=True)
class Task:
    """A task: examples of one kind plus how to score them.

    Attributes:
        name: how the task was named (built-in spec or file path).
        kind: a registered kind (``headprune.tasks.kinds``): ``choice``, ``generate``, ``text``, ...
        examples: the examples, in a fixed order.
        length_normalize: choice tasks: compare log-likelihood per byte of the continuation
            (lm-evaluation-harness ``acc_norm`` style) instead of the sum.
        max_new_tokens: generate and code tasks: decoding budget.
        description: one line for ``headprune tasks`` and reports.
        length_unit: choice tasks with ``length_normalize``: divide by the choice's length in ``bytes``
            (UTF-8) or in ``chars`` (lm-evaluation-harness's ``acc_norm`` divides by characters, its
            ``acc_bytes`` by bytes).
        strip_context: choice tasks: which trailing characters of the prompt are moved to the front of
            each continuation before tokenising: ``spaces``, or all ``whitespace`` as lm-evaluation-harness
            does.
        until: generate tasks: the answer ends before the first of these strings (none: the first newline).
        strip_answers: generate tasks: compare answer and target with surrounding whitespace trimmed
            (lm-evaluation-harness's ``exact_match`` compares them as they are).
        answer: generate tasks: how the answer is read out of the generated text and matched with the target
            (``headprune.tasks.answers``: ``line``, ``first-number``, ``regex:PATTERN`` or an lm-eval filter).
    """

    name: str
    kind: TaskKind
    examples: tuple[Example, ...]
    length_normalize: bool = False
    max_new_tokens: int = 16
    description: str = ""
    settings: dict = field(default_factory=dict, compare=False)
    length_unit: Literal["bytes", "chars"] = "bytes"
    strip_context: Literal["spaces", "whitespace"] = "spaces"
    until: tuple[str, ...] = ()
    strip_answers: bool = True
    answer: AnswerRule = LINE

    def __post_init__(self) -> None:
        if self.kind not in TASK_KINDS:
            raise TaskError(f"unknown task kind {self.kind!r}; expected one of {', '.join(TASK_KINDS)}")
        if not self.examples:
            raise TaskError(f"task {self.name!r} has no examples")
        most = limit("HEADPRUNE_MAX_NEW_TOKENS")
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or not (
                1 <= self.max_new_tokens <= most):
            raise TaskError(f"task {self.name!r}: max_new_tokens must be a whole number from 1 to {most:,} (raise the "
                            f"limit with HEADPRUNE_MAX_NEW_TOKENS=N), not {self.max_new_tokens!r}",
                            settings=("max_new_tokens",))
        if self.length_unit not in ("bytes", "chars") or self.strip_context not in ("spaces", "whitespace"):
            raise TaskError(f"task {self.name!r}: length_unit must be bytes or chars, strip_context spaces or "
                            "whitespace")

    def __len__(self) -> int:
        return len(self.examples)

    @property
    def has_accuracy(self) -> bool:
        return has_accuracy(self.kind)

    def content_hash(self) -> str:
        """sha256 over the kind, scoring settings and every example's content, in order."""
        digest = hashlib.sha256()
        scoring: list = [self.kind, self.length_normalize, self.max_new_tokens]
        # Settings added later enter the hash only when they differ from their defaults, so tasks that do
        # not use them keep their hashes.
        extra = {key: value for key, value, default in (
            ("length_unit", self.length_unit, "bytes"), ("strip_context", self.strip_context, "spaces"),
            ("until", list(self.until), []), ("strip_answers", self.strip_answers, True),
            ("answer", rule_to_json(self.answer), rule_to_json(LINE))) if value != default}
        digest.update(json.dumps(scoring + ([extra] if extra else [])).encode())
        for example in self.examples:
            digest.update(example.content_key().encode())
        return "sha256:" + digest.hexdigest()

    def subset(self, indices: Sequence[int], *, suffix: str = "") -> Task:
        """The task restricted to ``indices`` (in that order)."""
        if not indices:
            raise TaskError(f"task {self.name!r}: the selection is empty")
        return replace(self, name=self.name + suffix, examples=tuple(self.examples[i] for i in indices))

    def first(self, limit: int | None) -> Task:
        """The first ``limit`` examples (all when ``None``)."""
        if limit is None or limit >= len(self.examples):
            return self
        if limit < 1:
            raise TaskError(f"limit must be at least 1, got {limit}")
        return replace(self, examples=self.examples[:limit])
