"""Discovery / held-out split: disjoint by content, not only by index. Selection only sees discovery."""

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


def _unique(task: Task, seen: set[str]) -> list[int]:
    keep = []
    for index, example in enumerate(task.examples):
        key = example.content_key()
        if key not in seen:
            seen.add(key)
            keep.append(index)
    return keep


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
    seen: set[str] = set()
    pool = _unique(task, seen)
    dropped = len(task) - len(pool)
    rng.shuffle(pool)
    if heldout_task is None:
        if len(pool) < discovery + heldout:
            raise SearchSettingsError(
                f"task {task.name!r} has {len(pool)} distinct examples; discovery {discovery} + heldout {heldout} "
                f"need {discovery + heldout}", settings=("discovery", "heldout"))
        return Split(task.subset(pool[:discovery], suffix="[discovery]"),
                     task.subset(pool[discovery : discovery + heldout], suffix="[held-out]"), dropped)
    if len(pool) < discovery:
        raise SearchSettingsError(f"task {task.name!r} has {len(pool)} distinct examples; discovery {discovery} "
                                  "needs more", settings=("discovery",))
    chosen = pool[:discovery]
    seen = {task.examples[i].content_key() for i in chosen}
    held_pool = _unique(heldout_task, seen)
    dropped += len(heldout_task) - len(held_pool)
    rng.shuffle(held_pool)
    if len(held_pool) < heldout:
        raise SearchSettingsError(f"held-out task {heldout_task.name!r} has {len(held_pool)} examples not seen in "
                                  f"discovery; heldout {heldout} needs more", settings=("heldout",))
    return Split(task.subset(chosen, suffix="[discovery]"),
                 heldout_task.subset(held_pool[:heldout], suffix="[held-out]"), dropped, "heldout-task")
