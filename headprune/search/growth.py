"""How ``find --objective compress`` grows its set: the greedy and the beam, and when a set is within budget.

The search is greedy with backtracking and a galloping step. Each round evaluates, in one batch, the
current set plus the next ``step // 2``, ``step`` and ``2 * step`` units of the queue; it grows the set by
the largest prefix that stays within budget and makes that the next step (so a run of harmless heads costs
a logarithmic number of rounds). When no prefix fits, the step shrinks; when even the next single unit
breaks the budget, that unit is rejected (left in place) and the search moves on to the following one;
``patience`` rejections in a row end it. It also ends once it has evaluated ``SETS_PER_UNIT * (patience +
units taken)`` distinct sets: a long tail where units are taken only now and then between rejections (a budget
that noise keeps just open) costs several sets per unit, and the cap bounds the whole search at about two sets
per unit removed plus the patience tail (measured: ``scripts/bench/compress.py``; the cap did not bind on any
measured case). The search therefore always ends with an empty queue, a rejected set one unit larger than its
answer, or the cost cap (``GrowResult.stopped`` says which).

``search="beam"`` keeps instead the ``width`` best sets (most heads, then fewest net losses, then the largest
margin change) and walks the queue one unit per round: every kept set is tried with the unit added, all in
one batch; a set within budget may go on with it or without it (a unit skipped by choice), a set over
budget goes on without it. A set is finished once ``patience`` units in a row have not joined it; the
search ends when every kept set is. Width 1 is the plain greedy without backtracking (one set per round);
a round costs at most ``width`` evaluated sets, so a beam costs about ``width`` times the plain greedy,
where the galloping greedy pays a few sets per doubling of its step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from headprune.heads import Head, HeadGrid
from headprune.search.find_result import CurvePoint
from headprune.search.paired import Paired
from headprune.search.score import non_inferior

SETS_PER_UNIT = 2  # the greedy's cost cap: distinct sets per (patience + units taken)
Unit = tuple[Head, ...]  # a single head, or every query head of one key/value group
Evaluate = Callable[[list[tuple[Head, ...]], str], dict[tuple[Head, ...], Paired]]


@dataclass
class GrowResult:
    """What :func:`grow` found: the chosen units, every set it evaluated, and the units it rejected."""

    chosen: list[Unit]
    curve: list[CurvePoint]
    rejected: list[Unit]
    evaluated: dict[tuple[Head, ...], Paired]
    rounds: int = 0  # batches evaluated
    stopped: str = "queue"  # why the search ended: "queue" (empty), "patience" or "cost" (the greedy's cap)


@dataclass(frozen=True)
class Budget:
    """When a set is within ``max_drop`` accuracy points of the intact model, on discovery.

    find's rule (``size`` given): the set's discovery counts, judged at ``size`` examples (the held-out set's
    size when that is smaller), pass the held-out verdict's own test, Tango's score test of non-inferiority at
    ``alpha`` (:func:`headprune.search.score.non_inferior`). The search grows a set only while the held-out
    test can be expected to accept it: the margin the verdict will need is the search's safety margin. Why:
    judged by its discovery estimate alone, the chosen set is the largest of many tried and its estimate the
    luckiest; counted on counts-only models through this code (``headprune.search.simulation``, 0.5 points,
    discovery 2,000, held-out 1,000), 86% of the sets so chosen were truly over budget and 1% passed held-out.

    ``size=None``: the discovery estimate alone (net losses ``damaged - rescued <= max_drop% of n``, counted
    in examples so that float rounding cannot decide), the rule before 0.2; kept for the comparisons of the
    simulation and ``scripts/bench/compress.py``.
    """

    max_drop: float  # accuracy points
    size: int | None = None
    alpha: float = 0.05

    def __call__(self, paired: Paired) -> bool:
        if self.size is None or paired.n == 0:
            return paired.damaged - paired.rescued <= self.max_drop / 100 * paired.n + 1e-9
        scale = min(1.0, self.size / paired.n)
        return bool(non_inferior(paired.rescued * scale, paired.damaged * scale, round(paired.n * scale),
                                 margin=self.max_drop / 100, alpha=self.alpha))


def grow(units: Sequence[Unit], grid: HeadGrid, evaluate: Evaluate, *, budget: Budget,
         patience: int, sets_per_unit: int | None = SETS_PER_UNIT, removed: Sequence[Head] = (),
         admit: Callable[[tuple[Head, ...]], bool] | None = None) -> GrowResult:
    """The galloping greedy search with backtracking described in the module docstring.

    Args:
        units: the queue, least harmful first.
        grid: the model's heads (no layer may lose every head: the export could not express it).
        evaluate: discovery results of a batch of head sets (``find``'s conditions, paired).
        budget: when a set is within the accuracy points discovery may lose.
        patience: consecutive single-unit rejections that end the search (and, with the units taken, the
            cost cap).
        sets_per_unit: the cost cap's distinct sets per (patience + units taken); ``None``: no cap (the rule
            before the cap, which ``scripts/bench/compress.py`` compares against).
        removed: heads already removed, outside the sets grown (``find --shrink`` grows from the improving set;
            ``evaluate`` adds them): they count against their layers' last head.
        admit: a further test of a set within budget, after it (``find --shrink``: the guards' search parts).
    """
    chosen: list[Unit] = []
    queue = list(units)
    curve: list[CurvePoint] = []
    rejected: list[Unit] = []
    evaluated: dict[tuple[Head, ...], Paired] = {}
    left = {index: layer.heads - sum(h.layer == index for h in removed)  # heads each layer still has
            for index, layer in enumerate(grid.layers)}
    step, streak, rounds, stopped = 1, 0, 0, "queue"
    while True:
        capped = sets_per_unit is not None and len(evaluated) >= sets_per_unit * (patience + len(chosen))
        if streak >= patience or capped:
            stopped = "patience" if streak >= patience else "cost"
            break
        prefix = _feasible_prefix(queue, left, 2 * step)
        if not prefix:
            break
        sizes = sorted({m for m in (max(1, step // 2), step, 2 * step) if m <= len(prefix)} | {len(prefix)})
        base = tuple(h for unit in chosen for h in unit)
        sets = [tuple(sorted(base + tuple(h for unit in prefix[:m] for h in unit))) for m in sizes]
        results = evaluate(sets, "compress")
        evaluated.update(results)
        rounds += 1
        fits = [m for m, heads in zip(sizes, sets) if budget(results[heads]) and (admit is None or admit(heads))]
        best = max(fits, default=0)
        for m, heads in zip(sizes, sets):
            curve.append(CurvePoint(len(heads), results[heads].accuracy_after, m in fits, m == best))
        if best:
            taken = prefix[:best]
            chosen += taken
            for unit in taken:
                queue.remove(unit)
                left[unit[0].layer] -= len(unit)
            step, streak = best, 0
        elif step > 1:
            step = max(1, step // 4)  # backtrack: retry from a smaller step before rejecting anything
        else:
            unit = prefix[0]
            queue.remove(unit)
            rejected.append(unit)
            streak += 1
    return GrowResult(chosen, curve, rejected, evaluated, rounds, stopped)


@dataclass(frozen=True)
class _Kept:
    """One set a beam keeps: its units, its discovery result, and how it got there."""

    heads: tuple[Head, ...]  # sorted
    paired: Paired
    streak: int  # units in a row that have not joined it
    rejected: tuple[Unit, ...]  # units that broke the budget when added to it
    path: tuple[tuple[Head, ...], ...]  # the sets it grew through, itself last


def _beam_key(kept: _Kept) -> tuple:
    """Best first: most heads, then fewest net losses (the most budget left), then margin change, then names."""
    p = kept.paired
    return (-len(kept.heads), p.damaged - p.rescued, -p.margin_change, tuple(str(h) for h in kept.heads))


def beam(units: Sequence[Unit], grid: HeadGrid, evaluate: Evaluate, intact: Paired, *, budget: Budget,
         patience: int, width: int) -> GrowResult:
    """The beam search described in the module docstring.

    Args:
        units: the queue, least harmful first.
        grid: the model's heads (no layer may lose every head).
        evaluate: discovery results of a batch of head sets (``find``'s conditions, paired).
        intact: the intact model paired with itself (the empty set the beam starts from).
        budget: when a set is within the accuracy points discovery may lose.
        patience: units in a row that may fail to join a kept set before it is finished.
        width: sets kept per round.
    """
    kept = [_Kept((), intact, 0, (), ())]
    finished: list[_Kept] = []
    order: list[tuple[tuple[Head, ...], Paired]] = []  # every set evaluated, in order, for the curve
    evaluated: dict[tuple[Head, ...], Paired] = {}
    rounds = 0
    for unit in units:
        if not kept:
            break
        layer = unit[0].layer
        # A unit that would take a layer's last head cannot join that set; it is passed over, not rejected.
        grows = {id(k): tuple(sorted(k.heads + unit)) for k in kept
                 if grid.layers[layer].heads - sum(h.layer == layer for h in k.heads) - len(unit) >= 1}
        sets = list(dict.fromkeys(grows.values()))
        if sets:
            results = evaluate(sets, "compress")
            evaluated.update(results)
            rounds += 1
            order += [(heads, results[heads]) for heads in sets]
        children: list[_Kept] = []
        for k in kept:
            heads = grows.get(id(k))
            if heads is None:
                children.append(k)
            elif budget(evaluated[heads]):
                children += [_Kept(heads, evaluated[heads], 0, k.rejected, k.path + (heads,)),
                             replace(k, streak=k.streak + 1)]  # the alternative: skip this unit by choice
            else:
                children.append(replace(k, streak=k.streak + 1, rejected=k.rejected + (unit,)))
        children.sort(key=_beam_key)
        finished += [c for c in children if c.streak >= patience]
        kept = [c for c in children if c.streak < patience][:width]
    stopped = "patience" if not kept else "queue"
    best = min(finished + kept, key=_beam_key)
    taken = set(best.path)
    curve = [CurvePoint(len(heads), paired.accuracy_after, budget(paired), heads in taken)
             for heads, paired in order]
    return GrowResult(_units_in(best.heads, units), curve, list(best.rejected), evaluated, rounds, stopped)


def _units_in(heads: tuple[Head, ...], units: Sequence[Unit]) -> list[Unit]:
    """The units of the queue that ``heads`` is made of, in queue order."""
    inside = set(heads)
    return [unit for unit in units if unit[0] in inside]


def _feasible_prefix(queue: list[Unit], left: dict[int, int], limit: int) -> list[Unit]:
    """The first ``limit`` units that can go together without emptying a layer; units that never can (their
    layer would lose every head even on its own now) are dropped from ``queue``."""
    budget, prefix = dict(left), []
    for unit in list(queue):
        layer = unit[0].layer
        if left[layer] - len(unit) < 1:
            queue.remove(unit)  # the set only grows: this unit will never fit again
            continue
        if budget[layer] - len(unit) < 1:
            continue
        budget[layer] -= len(unit)
        prefix.append(unit)
        if len(prefix) == limit:
            break
    return prefix


__all__ = ["SETS_PER_UNIT", "Budget", "Evaluate", "GrowResult", "Unit", "beam", "grow"]
