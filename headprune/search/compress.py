"""``find --objective compress``: a large head set whose removal the task does not notice (the search is greedy
or a beam: the largest such set is not guaranteed).

The mirror image of the protocol: instead of the few heads whose removal helps, the many whose removal does
not hurt. The screen orders heads from least to most harmful alone; the search grows a set from the front
of that queue (single heads, or with ``prefer="groups"`` whole key/value groups, the unit a sliced export
can actually drop) and keeps it while discovery accuracy stays within ``max_drop`` points of the intact
model.

The search is greedy with backtracking and a galloping step. Each round evaluates, in one batch, the
current set plus the next ``step // 2``, ``step`` and ``2 * step`` units of the queue; it grows the set by
the largest prefix that stays within budget and makes that the next step (so a run of harmless heads costs
a logarithmic number of rounds). When no prefix fits, the step shrinks; when even the next single unit
breaks the budget, that unit is rejected (left in place) and the search moves on to the following one;
``patience`` rejections in a row end it. It also ends once it has evaluated ``SETS_PER_UNIT * (patience +
units taken)`` distinct sets: a long tail where units are taken only now and then between rejections (a budget
that noise keeps just open) costs several sets per unit, and the cap bounds the whole search at about two sets
per unit removed plus the patience tail (measured: ``scripts/bench_compress.py``; the cap did not bind on any
measured case). The search therefore always ends with an empty queue, a rejected set one unit larger than its
answer, or the cost cap (``GrowResult.stopped`` says which).

``search="beam"`` keeps instead the ``width`` best sets (most heads, then fewest net losses, then the largest
margin change) and walks the queue one unit per round: every kept set is tried with the unit added, all in
one batch; a set within budget may go on with it or without it (a unit skipped by choice), a set over
budget goes on without it. A set is finished once ``patience`` units in a row have not joined it; the
search ends when every kept set is. Width 1 is the plain greedy without backtracking (one set per round);
a round costs at most ``width`` evaluated sets, so a beam costs about ``width`` times the plain greedy,
where the galloping greedy pays a few sets per doubling of its step.

The set is fixed on discovery. Held-out data only gives the verdict, a non-inferiority test
(:class:`headprune.search.stats.NonInferiority`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from headprune.heads import Head, HeadGrid
from headprune.models import LoadedModel
from headprune.search.paired import Paired
from headprune.search.result import Compression, CurvePoint, FindResult, Prescreen, Savings
from headprune.search.split import Inputs
from headprune.search.stages import Evaluated, Screened, Stages
from headprune.search.stats import NonInferiority, non_inferiority

log = logging.getLogger("headprune")

SETS_PER_UNIT = 2  # the greedy's cost cap: distinct sets per (patience + units taken)
Unit = tuple[Head, ...]  # a single head, or every query head of one key/value group
Evaluate = Callable[[list[tuple[Head, ...]], str], dict[tuple[Head, ...], Paired]]


def head_queue(screened: Sequence[tuple[Head, Paired, float | None]], prescreen: Prescreen | None,
               grid: HeadGrid, rank: Callable[[Paired, tuple[Head, ...]], tuple]) -> list[Head]:
    """Every head, least harmful first: those screened exactly by find's ranking key, then the rest by the
    pre-screen (attribution estimate, or the later halving round and its ranking)."""
    exact = [head for head, _, _ in sorted(screened, key=lambda row: rank(row[1], (row[0],)))]
    rest = [h for h in grid.all_heads() if h not in set(exact)]
    if prescreen is not None and prescreen.estimates:
        rest.sort(key=lambda h: (-prescreen.estimates[str(h)], h))
    elif prescreen is not None and prescreen.rounds:
        rounds = prescreen.rounds
        rest.sort(key=lambda h: (-rounds[str(h)].round, rank(rounds[str(h)].paired, (h,))))
    return exact + rest


def units_of(queue: Sequence[Head], grid: HeadGrid, prefer: str) -> list[Unit]:
    """The queue in units: single heads, or whole key/value groups ordered by their heads' mean place."""
    if prefer == "heads":
        return [(h,) for h in queue]
    size = grid.num_heads // grid.num_kv_heads
    place = {h: i for i, h in enumerate(queue)}
    groups = [tuple(Head(layer, kv * size + q) for q in range(size)) for layer in range(grid.num_layers)
              for kv in range(grid.num_kv_heads)]
    return sorted(groups, key=lambda g: (sum(place[h] for h in g) / len(g), g))


@dataclass
class GrowResult:
    """What :func:`grow` found: the chosen units, every set it evaluated, and the units it rejected."""

    chosen: list[Unit]
    curve: list[CurvePoint]
    rejected: list[Unit]
    evaluated: dict[tuple[Head, ...], Paired]
    rounds: int = 0  # batches evaluated
    stopped: str = "queue"  # why the search ended: "queue" (empty), "patience" or "cost" (the greedy's cap)


def within_budget(paired: Paired, max_drop: float) -> bool:
    """Discovery accuracy within ``max_drop`` points of the intact model (or above), counted in examples so
    that float rounding cannot decide: net losses ``damaged - rescued <= max_drop% of n``."""
    return paired.damaged - paired.rescued <= max_drop / 100 * paired.n + 1e-9


def grow(units: Sequence[Unit], grid: HeadGrid, evaluate: Evaluate, *, max_drop: float,
         patience: int, sets_per_unit: int | None = SETS_PER_UNIT) -> GrowResult:
    """The galloping greedy search with backtracking described in the module docstring.

    Args:
        units: the queue, least harmful first.
        grid: the model's heads (no layer may lose every head: the export could not express it).
        evaluate: discovery results of a batch of head sets (``find``'s conditions, paired).
        max_drop: accuracy points discovery may lose.
        patience: consecutive single-unit rejections that end the search (and, with the units taken, the
            cost cap).
        sets_per_unit: the cost cap's distinct sets per (patience + units taken); ``None``: no cap (the rule
            before the cap, which ``scripts/bench_compress.py`` compares against).
    """
    chosen: list[Unit] = []
    queue = list(units)
    curve: list[CurvePoint] = []
    rejected: list[Unit] = []
    evaluated: dict[tuple[Head, ...], Paired] = {}
    left = {layer: grid.num_heads for layer in range(grid.num_layers)}  # heads each layer still has
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
        fits = [m for m, heads in zip(sizes, sets) if within_budget(results[heads], max_drop)]
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


def beam(units: Sequence[Unit], grid: HeadGrid, evaluate: Evaluate, intact: Paired, *, max_drop: float,
         patience: int, width: int) -> GrowResult:
    """The beam search described in the module docstring.

    Args:
        units: the queue, least harmful first.
        grid: the model's heads (no layer may lose every head).
        evaluate: discovery results of a batch of head sets (``find``'s conditions, paired).
        intact: the intact model paired with itself (the empty set the beam starts from).
        max_drop: accuracy points discovery may lose.
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
                 if grid.num_heads - sum(h.layer == layer for h in k.heads) - len(unit) >= 1}
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
            elif within_budget(evaluated[heads], max_drop):
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
    curve = [CurvePoint(len(heads), paired.accuracy_after, within_budget(paired, max_drop), heads in taken)
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


def savings(lm: LoadedModel, heads: Sequence[Head]) -> Savings:
    """Parameters and weight bytes of the sliced export of ``heads``, counted on the sliced model itself."""
    from headprune.devices import dtype_name
    from headprune.surgery.slicing import count_parameters
    from headprune.surgery.plan import plan_layers
    from headprune.surgery.slicing import slice_model

    grid, itemsize = lm.grid, lm.model.dtype.itemsize
    before = count_parameters(lm.model)
    kv_before = grid.num_layers * grid.num_kv_heads
    if not heads:
        return Savings(before, before, before * itemsize, before * itemsize, dtype_name(lm.dtype), kv_before,
                       kv_before)
    plans = plan_layers(grid, heads)
    sliced = slice_model(lm, plans, heads)  # a copy; shapes do not depend on the ablation's means
    after = count_parameters(sliced)
    del sliced
    return Savings(before, after, before * itemsize, after * itemsize, dtype_name(lm.dtype), kv_before,
                   sum(len(p.kv_heads) for p in plans))


def verdict_for(before, after, *, max_drop: float, removed: int, alpha: float) -> NonInferiority:  # noqa: ANN001
    """The held-out non-inferiority verdict of a compression (``max_drop`` in points), at one-sided ``alpha/2``."""
    return non_inferiority(before.correct, after.correct, margin=max_drop / 100, removed=removed, alpha=alpha)


def unit_name(unit: Unit) -> str:
    return "+".join(str(h) for h in unit)


def compress(stages: Stages, inputs: Inputs) -> FindResult:
    """The compress objective of a find run: baseline and screen, the set grown on discovery, then the held-out
    verdict and controls (timings aside)."""
    stages.baseline()
    screened, prescreen = stages.screen()
    with stages.timed("compress"):
        grown, units, evaluated, chosen = _grow_on_discovery(stages, screened, prescreen)
    finalists = stages.finalists([chosen], evaluated)
    settings, base = stages.settings, stages.base
    after = stages.conditions.many("heldout", [chosen], "held-out")[0]  # journalled by the finalist stage
    verdict = verdict_for(base["heldout"], after, max_drop=settings.max_drop, removed=len(chosen),
                          alpha=settings.alpha)
    width = settings.beam_width if settings.compress_search == "beam" else None
    searched = len(grown.evaluated)
    compression = Compression(settings.max_drop, settings.prefer, tuple(str(h) for h in chosen), evaluated[chosen],
                              verdict, savings(stages.lm, chosen), tuple(grown.curve),
                              tuple(unit_name(u) for u in grown.rejected), len(units), settings.compress_search,
                              width, searched, rounds=grown.rounds, stopped=grown.stopped,
                              sets_per_head=round(searched / len(chosen), 3) if chosen else None)
    return replace(stages.record(inputs, screened, prescreen, [], evaluated, finalists), compression=compression)


def _grow_on_discovery(stages: Stages, screened: Screened, prescreen: Prescreen | None
                       ) -> tuple[GrowResult, list[Unit], Evaluated, tuple[Head, ...]]:
    """The search on discovery: the queue, the grown set, and every set evaluated (the screen's singles too)."""
    lm, settings = stages.lm, stages.settings
    max_drop, patience = settings.max_drop, settings.patience
    units = units_of(head_queue(screened, prescreen, lm.grid, stages.rank), lm.grid, settings.prefer)
    intact = stages.intact()
    width = settings.beam_width if settings.compress_search == "beam" else None
    log.info("compress: growing from %d %s, least harmful first, within %.3g points of the intact discovery "
             "accuracy (%.1f%%); %s", len(units), settings.prefer, max_drop, 100 * stages.base["discovery"].accuracy,
             f"beam of width {width}: each round evaluates up to {width} sets" if width
             else "galloping greedy: each round evaluates up to 3 sets")
    if width:
        grown = beam(units, lm.grid, stages.evaluate, intact, max_drop=max_drop, patience=patience, width=width)
    else:
        grown = grow(units, lm.grid, stages.evaluate, max_drop=max_drop, patience=patience)
    chosen = tuple(sorted(h for unit in grown.chosen for h in unit))
    evaluated = {(head,): paired for head, paired, _ in screened}
    evaluated.update(grown.evaluated)
    if chosen not in evaluated:  # nothing could go: the intact model is the answer
        evaluated[chosen] = intact
    log.info("compress: %d heads within %.3g points on discovery (%d distinct sets evaluated in %d rounds, %s per "
             "head removed; %d units rejected)", len(chosen), max_drop, len(grown.evaluated), grown.rounds,
             f"{len(grown.evaluated) / len(chosen):.2f}" if chosen else "n/a", len(grown.rejected))
    return grown, units, evaluated, chosen


__all__ = ["SETS_PER_UNIT", "GrowResult", "beam", "compress", "grow", "head_queue", "savings", "units_of",
           "verdict_for", "within_budget"]
