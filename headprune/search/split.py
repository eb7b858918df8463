"""Discovery / held-out split: disjoint by input, not only by index. Selection only sees discovery.

Examples are told apart by what the model is given (``Example.input_key``: the prompt, choices or text,
without the answer). Of examples with the same input only the first (in task order) is used: exact
duplicates are dropped (``duplicates_dropped``), and so are later examples with the same input but another
answer (``conflicts_dropped``), so that no input is ever on both sides of the split, and both counts are
reported.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from headprune.errors import SearchSettingsError
from headprune.tasks import Task

MIN_SPLIT_SIZE = 10


@dataclass(frozen=True)
class Split:
    discovery: Task
    heldout: Task
    duplicates_dropped: int  # examples dropped because their content appeared earlier (or in discovery)
    source: str = "split"  # "split": both from one task; "heldout-task": held-out from a second task
    conflicts_dropped: int = 0  # examples dropped because their input appeared earlier with another answer


def _unique(task: Task, seen: dict[str, str]) -> tuple[list[int], int, int]:
    """Indices of examples whose input is not in ``seen`` (input key -> content key), first one kept; and how
    many were dropped as exact duplicates and as same-input, other-answer conflicts."""
    keep, duplicates, conflicts = [], 0, 0
    for index, example in enumerate(task.examples):
        key, content = example.input_key(), example.content_key()
        if key not in seen:
            seen[key] = content
            keep.append(index)
        elif seen[key] == content:
            duplicates += 1
        else:
            conflicts += 1
    return keep, duplicates, conflicts


def split_task(task: Task, *, discovery: int, heldout: int, seed: int, heldout_task: Task | None = None) -> Split:
    """Draw ``discovery`` and ``heldout`` examples, disjoint by content.

    With ``heldout_task``, discovery comes from ``task`` and held-out from ``heldout_task`` (examples whose
    content is in discovery are dropped); otherwise both come from one seeded shuffle of ``task``.

    Raises:
        SearchSettingsError: too few distinct examples for the sizes asked.
    """
    if discovery < MIN_SPLIT_SIZE or heldout < MIN_SPLIT_SIZE:
        raise SearchSettingsError(f"discovery and heldout must each be at least {MIN_SPLIT_SIZE}",
                                  settings=("discovery", "heldout"))
    if heldout_task is not None and heldout_task.kind != task.kind:
        raise SearchSettingsError(f"held-out task is {heldout_task.kind} but the task is {task.kind}",
                                  settings=("heldout_task",))
    rng = random.Random(seed)
    pool, dropped, conflicts = _unique(task, {})
    rng.shuffle(pool)
    if heldout_task is None:
        if len(pool) < discovery + heldout:
            raise SearchSettingsError(
                f"task {task.name!r} has {len(pool)} distinct examples; discovery {discovery} + heldout {heldout} "
                f"need {discovery + heldout}", settings=("discovery", "heldout"))
        return Split(task.subset(pool[:discovery], suffix="[discovery]"),
                     task.subset(pool[discovery : discovery + heldout], suffix="[held-out]"), dropped,
                     conflicts_dropped=conflicts)
    if len(pool) < discovery:
        raise SearchSettingsError(f"task {task.name!r} has {len(pool)} distinct examples; discovery {discovery} "
                                  "needs more", settings=("discovery",))
    chosen = pool[:discovery]
    seen = {task.examples[i].input_key(): task.examples[i].content_key() for i in chosen}
    held_pool, held_duplicates, held_conflicts = _unique(heldout_task, seen)
    dropped, conflicts = dropped + held_duplicates, conflicts + held_conflicts
    rng.shuffle(held_pool)
    if len(held_pool) < heldout:
        raise SearchSettingsError(f"held-out task {heldout_task.name!r} has {len(held_pool)} examples not seen in "
                                  f"discovery; heldout {heldout} needs more", settings=("heldout",))
    return Split(task.subset(chosen, suffix="[discovery]"),
                 heldout_task.subset(held_pool[:heldout], suffix="[held-out]"), dropped, "heldout-task", conflicts)
