"""Task kinds, one registered :class:`TaskKindSpec` each (a module per kind); ``core.choices.TASK_KINDS`` lists
their names in the order people see them (``tests/test_choices.py`` ties the two together).

Adding a kind: its module here (the spec: keys, reader, writer, listing, file options), its import below, its
name in ``TASK_KINDS``, and its scorers in ``headprune.scoring``.
"""

from __future__ import annotations

from headprune.core.choices import TASK_KINDS
from headprune.errors import TaskError
from headprune.tasks.kinds import choice, classify, code, generate, text  # noqa: F401 - each registers its kind
from headprune.tasks.kinds.spec import KINDS, TaskKindSpec


def shown_order() -> list[TaskKindSpec]:
    """The kinds in the order people see them (``TASK_KINDS``'s; a kind it lacks last)."""
    return sorted(KINDS.values(), key=lambda spec: (TASK_KINDS + (spec.name,)).index(spec.name))


def detection_order() -> tuple[TaskKindSpec, ...]:
    """The order a row's kind is looked for in: the highest precedence, then the most keys (a classify row has the
    text row's key too, a choice row the generate row's), then the order shown."""
    return tuple(sorted(shown_order(), key=lambda spec: (-spec.precedence, -len(spec.keys))))


def kind_spec(name: str) -> TaskKindSpec:
    """The kind called ``name``.

    Raises:
        TaskError: no such kind (listing the kinds).
    """
    if name not in KINDS:
        raise TaskError(f"unknown task kind {name!r}; expected one of {', '.join(s.name for s in shown_order())}")
    return KINDS[name]


def row_kind(row: dict, order: tuple[TaskKindSpec, ...] | None = None) -> TaskKindSpec | None:
    """The kind a JSONL row is (by its keys), or None when it has no kind's keys (``order``: a
    :func:`detection_order` computed once for many rows)."""
    return next((spec for spec in order or detection_order() if spec.matches(row)), None)


def taking(option: str) -> list[str]:
    """The kinds whose task files take ``option``, in the order shown."""
    return [spec.name for spec in shown_order() if option in spec.file_options]


__all__ = ["KINDS", "TaskKindSpec", "detection_order", "kind_spec", "row_kind", "shown_order", "taking"]
