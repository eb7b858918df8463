"""What a task kind is, in one registered object: the keys of its JSONL rows, how a row is read into an
:class:`~headprune.tasks.example.Example` and written back, what ``headprune tasks`` shows of it, the task-file
options it takes, and how it is scored (an accuracy or only a margin; whether its scorer runs generated code).

The loaders (``tasks.jsonl``), the writer, the listing (``headprune tasks``), the CLI's consent check and
``has_accuracy`` read these; none of them names a kind. Its scorers, one per kind of model, live in
``headprune.scoring`` (a higher layer) and are registered there under the kind's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from headprune.core.registry import Registry
from headprune.errors import TaskError
from headprune.tasks.example import Example

# A row reader: (row, example id, file path, line number) -> Example, raising TaskError naming the file and line.
RowReader = Callable[[dict, str, str, int], Example]


@dataclass(frozen=True)
class TaskKindSpec:
    """One task kind.

    Attributes:
        name: the kind (``Task.kind``).
        keys: the keys every row of this kind has, each as the names it may go by (code's tests: ``tests``,
            HumanEval's ``test``, MBPP's ``test_list``); the first name is the one written.
        read: a row (that has ``keys``) to an Example, checked.
        write: an Example to the row ``read`` takes back (without its ``id``).
        layout: what ``headprune tasks`` shows of a row (``?``: an optional key).
        listing: the rest of its line there: file options, what it needs.
        file_options: the task-file options it takes (``length_normalize``, ``max_new_tokens``, ``answer``).
        max_new_tokens: the decoding budget of its files when they give none.
        accuracy: whether its examples are right or wrong (``text`` has only a mean NLL).
        runs_code: whether scoring runs the model's generated code (the CLI asks for consent before loading).
        precedence: a row with the keys of several kinds is read as the one of highest precedence (then the one
            with most keys): a code row may also hold a target.
    """

    name: str
    keys: tuple[tuple[str, ...], ...]
    read: RowReader
    write: Callable[[Example], dict]
    layout: str
    listing: str = ""
    file_options: tuple[str, ...] = ()
    max_new_tokens: int = 16
    accuracy: bool = True
    runs_code: bool = False
    precedence: int = 0

    def matches(self, row: dict) -> bool:
        """Whether ``row`` has this kind's keys."""
        return all(any(name in row for name in names) for names in self.keys)

    @property
    def short_layout(self) -> str:
        """``{"prompt","choices","answer"}``: the keys, for messages."""
        return "{" + ",".join(f'"{names[0]}"' for names in self.keys) + "}"


KINDS: Registry[str, TaskKindSpec] = Registry("task kind")


def register(spec: TaskKindSpec) -> TaskKindSpec:
    """Make ``spec`` the kind named ``spec.name`` (a name registered twice is an error)."""
    return KINDS.add(spec.name, spec)


def text_field(row: dict, key: str, path: str, line: int, why: str = "") -> str:
    """``row[key]`` when it is a non-empty string.

    Raises:
        TaskError: naming the key (and ``why`` it must be set), the file and the line.
    """
    value = row[key]
    if not isinstance(value, str) or not value:
        raise TaskError(f'"{key}" must be a non-empty string{why}', path=path, line=line)
    return value
