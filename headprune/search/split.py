"""Discovery / held-out split: disjoint by input, not only by index. Selection only sees discovery.

Examples are told apart by what the model is given (``Example.input_key``: the prompt, choices or text,
without the answer). Of examples with the same input only the first (in task order) is used: exact
duplicates are dropped (``duplicates_dropped``), and so are later examples with the same input but another
answer (``conflicts_dropped``), so that no input is ever on both sides of the split, and both counts are
reported.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from headprune.errors import SearchSettingsError, TaskError
from headprune.search.fresh import fresh_examples
from headprune.tasks import Task, load_task, portable_spec

if TYPE_CHECKING:
    from headprune.search.find_result import FindSettings

TaskLike = str | Path | Task

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


@dataclass(frozen=True)
class GuardInput:
    """A guard of one find run (``headprune.search.guards``): its task, split into the examples the search reads
    and those held out for the verdict, its margin in the metric's unit, and how to load it again."""

    task: Task
    split: Split
    margin: float
    spec: str | None
    optional: bool = False  # find's default guard: left out, saying so, where the model cannot take it

    @property
    def metric(self) -> str:
        return "accuracy" if self.task.has_accuracy else "mean_nll"


@dataclass(frozen=True)
class Inputs:
    """The tasks of one find run, loaded and split."""

    task: Task
    split: Split
    controls: tuple[Task, ...]
    specs: dict[str, str | None]
    guards: tuple[GuardInput, ...] = ()
    fresh: Task | None = None  # find --shrink: examples on neither side of the split (headprune.search.fresh)


def load_inputs(task: TaskLike, heldout_task: TaskLike | None, control: TaskLike | Sequence[TaskLike] | None,
                settings: FindSettings, discovery: int, heldout: int, *, trust_remote_code: bool = False,
                guard: str | Sequence[str] | None = None, default_guard: bool = False) -> Inputs:
    """Load the task, its held-out source and controls (each capped at ``control_limit``), the guards (each
    ``TASK[:margin=M]``, capped at ``guard_limit``; with ``default_guard`` and none named, an improve run's is
    ``general``, optional: :func:`fit_guards`), and split.

    Raises:
        TaskError: the task has no accuracy; and the loading and splitting errors.
    """
    from headprune.search.guards import GENERAL

    held_spec = None if heldout_task is None or isinstance(heldout_task, Task) else portable_spec(heldout_task)
    specs = {"task": None if isinstance(task, Task) else portable_spec(task),  # loads from any working folder
             "heldout": held_spec}
    load = functools.partial(load_task, trust_remote_code=trust_remote_code)
    task = task if isinstance(task, Task) else load(task)
    if not task.has_accuracy:
        raise TaskError(f"find needs a task with an accuracy; {task.name} is a {task.kind} task "
                        "(such tasks can be a control)", settings=("task", "control"))
    held = heldout_task if heldout_task is None or isinstance(heldout_task, Task) else load(heldout_task)
    controls = () if control is None else (control,) if isinstance(control, (str, Path, Task)) else tuple(control)
    loaded = tuple((c if isinstance(c, Task) else load(c)).first(settings.control_limit) for c in controls)
    split = split_task(task, discovery=discovery, heldout=heldout, seed=settings.seed, heldout_task=held)
    guards = () if guard is None else (guard,) if isinstance(guard, str) else tuple(guard)
    if default_guard and not guards and settings.objective == "improve":
        guarded = (load_guard(GENERAL, task, settings, load, optional=True),)
    else:
        guarded = tuple(load_guard(g, task, settings, load) for g in guards)
    names = [g.task.name for g in guarded]
    if len(set(names)) < len(names):
        raise SearchSettingsError(f"guard {next(n for n in names if names.count(n) > 1)!r} is given twice",
                                  settings=("guard",))
    fresh = None
    if settings.shrink is not None:
        fresh = fresh_examples(task, (split.discovery, split.heldout), settings.shrink_examples or 0,
                               seed=settings.seed)
    return Inputs(task, split, loaded, specs, guarded, fresh)


def load_guard(text: str, task: Task, settings: FindSettings, load: functools.partial, *,
               optional: bool = False) -> GuardInput:
    """One guard: its task loaded and capped at ``guard_limit`` examples, of which a third (the search's) and the
    rest (the verdict's) are split apart by content, as the task is (``optional``: find's default guard, which a
    model that cannot take it goes without, :func:`fit_guards`).

    Raises:
        SearchSettingsError: the guard is the task itself, or has too few examples, or a margin it cannot measure;
            TaskError: it cannot be loaded.
    """
    from headprune.search.guards import margin_for, parse_guard

    spec = parse_guard(text)
    guard = load(spec.task)
    own = {example.content_key() for example in task.examples}
    if any(example.content_key() in own for example in guard.examples):
        raise SearchSettingsError(f"guard {spec.task!r} holds examples of the task itself: a guard is another task "
                                  "the set must not hurt", settings=("guard",))
    metric = "accuracy" if guard.has_accuracy else "mean_nll"
    margin = margin_for(metric, spec.margin, owner=f"guard {text!r}: ")
    return GuardInput(guard, _split_guard(guard, settings), margin, portable_spec(spec.task), optional)


def _split_guard(guard: Task, settings: FindSettings, *, why: str = "") -> Split:
    """A guard's examples (at most ``guard_limit``) split a third for the search, the rest held out.

    Raises:
        SearchSettingsError: too few for the split, or, for a text guard, for its test (``why`` says what left
            examples out).
    """
    from headprune.search.guards import GUARD_DISCOVERY_SHARE, MIN_TEXTS

    pool = len(_unique(guard, {})[0])
    total = min(pool, settings.guard_limit)
    first = round(total * GUARD_DISCOVERY_SHARE)
    text = not guard.has_accuracy
    least = MIN_TEXTS if text else MIN_SPLIT_SIZE
    if min(first, total - first) < MIN_SPLIT_SIZE or total - first < least:
        needs = (f"its text test needs at least {MIN_TEXTS} held out ({math.ceil(MIN_TEXTS * 1.5)} in all)" if text
                 else f"it needs at least {3 * MIN_SPLIT_SIZE}")
        raise SearchSettingsError(f"guard {guard.name!r} has {pool} distinct examples{why} (guard_limit "
                                  f"{settings.guard_limit}); {needs}: a third for the search, the rest for the "
                                  "verdict", settings=("guard", "guard_limit"))
    return split_task(guard, discovery=first, heldout=total - first, seed=settings.seed)


def fit_guards(inputs: Inputs, lm: object, settings: FindSettings) -> tuple[Inputs, list[str]]:
    """The guards as the model can take them: examples longer than its positions left out and the rest split
    again, by their content and the model's declared positions alone, before anything is scored. An optional guard
    (find's default) that the model cannot take at all (text needs a causal language model), or too few of whose
    examples fit, is left out; a guard that was named is refused. Returns the inputs and a line for each guard
    changed, which find says once the run has passed its checks (a refused run says one line: the refusal).

    Raises:
        SearchSettingsError: a named guard too few of whose examples fit; TaskError: a named guard of a kind the
            model cannot be scored on.
    """
    from headprune.evaluation.guards import model_positions, too_long
    from headprune.scoring import scorer_for

    kept, notes = [], []
    for guard in inputs.guards:
        try:
            scorer = scorer_for(guard.task, lm)  # type: ignore[arg-type]
            items = [item for index, example in enumerate(guard.task.examples)
                     for item in scorer.items(index, example)]
            long = too_long(lm.model, guard.task, items, generates=scorer.generates)  # type: ignore[attr-defined]
            if long:
                positions = model_positions(lm.model)[0]  # type: ignore[attr-defined,index]
                fitting = guard.task.subset([i for i in range(len(guard.task)) if i not in long])
                split = _split_guard(fitting, settings, why=f" that fit the model's {positions} positions")
        except (SearchSettingsError, TaskError) as error:
            if not guard.optional:
                raise
            notes.append(f"find's default guard {guard.task.name} is left out: {error}")
            continue
        if guard.optional:
            notes.append(f"find's default guard: {guard.task.name}, margin {guard.margin:g} nats of mean NLL "
                         "(--guard none runs without it)")
        if long:
            notes.append(f"guard {guard.task.name}: {len(long)} of its {len(guard.task)} examples are longer than the "
                         f"model's {positions} positions and left out; it runs on {len(fitting)} of the rest "
                         f"({len(split.discovery)} searched, {len(split.heldout)} held out)")
            guard = replace(guard, task=fitting, split=split)
        kept.append(guard)
    return replace(inputs, guards=tuple(kept)), notes
