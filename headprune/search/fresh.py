"""Fresh examples for ``find --shrink``: examples of the task that neither discovery nor held-out holds.

The shrunk set's non-inferiority test against the improving set must read examples that chose neither: discovery
grew the shrunk set, and held-out chose the improving one (the membership tests read it). The fresh examples are
the task's own beyond those split off (every example whose input is on neither side, in a seeded order); a
generated built-in task (one whose settings record ``n``, such as ``arithmetic``) draws more of the same kind where
those run short, by drawing again with a larger ``n`` and keeping the examples beyond the first draw (the generator
draws in sequence, so the first draw is a prefix of the larger one; that is checked, not assumed). A task that can
make no more gives what it has, and the run says so when that cannot show non-inferiority.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import replace

from headprune.errors import TaskError
from headprune.tasks import Task, load_task

log = logging.getLogger("headprune")

FRESH_SEED_OFFSET = 7919  # the fresh examples' order: a seed of its own, apart from the split's


def fresh_examples(task: Task, sides: Sequence[Task], count: int, *, seed: int) -> Task | None:
    """Up to ``count`` examples of ``task`` whose inputs are in none of ``sides`` (None when there are none).

    Args:
        task: the task the split was drawn from (held-out from another task: its inputs are excluded too).
        sides: find's discovery and held-out examples.
        count: how many fresh examples are wanted.
        seed: the run's seed (the leftovers' order).
    """
    used = {e.input_key() for side in sides for e in side.examples}
    seen = set(used)
    leftovers = []
    for index, example in enumerate(task.examples):
        if example.input_key() not in seen:
            seen.add(example.input_key())
            leftovers.append(index)
    random.Random(seed + FRESH_SEED_OFFSET).shuffle(leftovers)
    fresh = [task.examples[i] for i in leftovers[:count]]
    if len(fresh) < count:
        fresh += [e for e in _drawn_beyond(task, count - len(fresh)) if e.input_key() not in seen][: count - len(fresh)]
    if len(fresh) < count:  # the test runs on what there is: said, never capped in silence
        log.warning("shrink: %s holds %s fresh example%s (on neither side of the split), not the %s asked for%s",
                    task.name, f"{len(fresh):,}", "" if len(fresh) == 1 else "s", f"{count:,}",
                    "; the shrunk set is tested on those" if fresh else "")
    if not fresh:
        return None
    return replace(task, name=task.name + "[fresh]", examples=tuple(fresh))


def _drawn_beyond(task: Task, more: int) -> list:
    """Examples a generated built-in task draws after its own (its settings' ``n`` raised by ``more`` and a
    margin for repeats), or none: a task that is not generated, or whose larger draw does not start with its own."""
    from headprune.tasks.builtin import BUILTIN_TASKS

    n = task.settings.get("n")
    if task.name not in BUILTIN_TASKS or not isinstance(n, int):
        return []
    options = {**task.settings, "n": n + 2 * more}
    spec = task.name + ":" + ",".join(f"{key}={value}" for key, value in options.items())
    try:
        larger = load_task(spec)
    except TaskError as error:  # the generator cannot make that many (its space of problems is too small)
        log.info("shrink: %s cannot draw %d more examples (%s)", task.name, more, error)
        return []
    if [e.content_key() for e in larger.examples[: len(task)]] != [e.content_key() for e in task.examples]:
        return []  # not a prefix: the larger draw is another task, not more of this one
    return list(larger.examples[len(task):])


__all__ = ["fresh_examples"]
