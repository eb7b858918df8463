"""Listings of task kinds come from the registries: ``headprune tasks`` and README's Tasks table name every kind a
task may have (``TASK_KINDS``) and every kind a scorer is registered for, so a new kind cannot be left out."""

from __future__ import annotations

import re
from pathlib import Path

from headprune.tasks import TASK_KINDS
from headprune.tasks.kinds import row_kind
from helpers.cli import invoke

README = Path(__file__).resolve().parent.parent / "README.md"


def registered_kinds() -> list[str]:
    """The task registry's kinds, then any kind only the scorer registry knows."""
    from headprune.scoring import _SCORERS

    return list(dict.fromkeys((*TASK_KINDS, *(scorer.kind for scorer in _SCORERS.values()))))


def listed_layouts() -> dict[str, str]:
    """``headprune tasks``'s task-file section: kind -> the rest of its line."""
    result = invoke("tasks")
    assert result.exit_code == 0, result.output
    section = result.output.split("\nTask files")[1].split("\nlm-evaluation-harness")[0]
    rows = [line.split(maxsplit=1) for line in section.splitlines()[1:] if line.strip()]
    return {kind: rest for kind, rest in rows}


def test_headprune_tasks_lists_every_registered_kind_with_its_row_layout() -> None:
    listed = listed_layouts()
    for kind in registered_kinds():
        assert kind in listed, f"`headprune tasks` does not list the {kind} kind"
        # The layout shown is one the task-file reader takes as this kind (its required keys are enough).
        required = re.findall(r'"(\w+)": ', listed[kind])
        assert required, f"`headprune tasks` shows no row layout for {kind}: {listed[kind]!r}"
        assert row_kind(dict.fromkeys(required, "")).name == kind, listed[kind]


def test_readme_tasks_table_has_a_row_for_every_registered_kind() -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Tasks"):text.index("\n## ", text.index("### Tasks"))]
    table = re.findall(r"^\| `(\w+)` \|", section, flags=re.MULTILINE)
    assert table, "README's Tasks section has a table of kinds"
    missing = [kind for kind in registered_kinds() if kind not in table]
    assert not missing, f"README's Tasks table has no row for {', '.join(missing)}"
    assert sorted(table) == sorted(registered_kinds()), "README's Tasks table names a kind no registry knows"
