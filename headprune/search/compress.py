"""``find --objective compress``: a large head set whose removal the task does not notice (the search is greedy
or a beam: the largest such set is not guaranteed).

The mirror image of the protocol: instead of the few heads whose removal helps, the many whose removal does
not hurt. The screen orders heads from least to most harmful alone; the search grows a set from the front
of that queue (single heads, or with ``prefer="groups"`` whole key/value groups, the unit a sliced export
can actually drop) and keeps it while discovery shows accuracy within ``max_drop`` points of the intact
model, as the held-out test will need to see it (:class:`Budget` says why the estimate alone is not enough).

The search itself (greedy with backtracking and a galloping step, or a beam) and when a set is within budget:
``headprune.search.growth``.

The set is fixed on discovery. Held-out data only gives the verdict, a non-inferiority test
(:class:`headprune.search.stats.NonInferiority`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from headprune.heads import Head, HeadGrid
from headprune.loading.models import LoadedModel
from headprune.search.find_result import Compression, FindResult, Prescreen, Savings
from headprune.search.growth import Budget, GrowResult, Unit, beam, grow
from headprune.search.paired import Paired
from headprune.search.split import Inputs
from headprune.search.stages import Evaluated, Screened, Stages
from headprune.search.stats import NonInferiority, non_inferiority

log = logging.getLogger("headprune")


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


def savings(lm: LoadedModel, heads: Sequence[Head]) -> Savings:
    """Parameters and weight bytes of the sliced export of ``heads``, counted on the sliced model itself."""
    from headprune.core.devices import dtype_name
    from headprune.surgery.plan import plan_layers
    from headprune.surgery.slicing import count_parameters
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
        grown, units, evaluated, chosen = grow_on_discovery(stages, screened, prescreen)
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


def grow_on_discovery(stages: Stages, screened: Screened, prescreen: Prescreen | None, *,
                      budget: Budget | None = None) -> tuple[GrowResult, list[Unit], Evaluated, tuple[Head, ...]]:
    """The search on discovery: the queue, the grown set, and every set evaluated (the screen's singles too).
    ``budget``: find's (None) or another rule (the counts-only simulation compares them)."""
    lm, settings = stages.lm, stages.settings
    max_drop, patience = settings.max_drop, settings.patience
    if budget is None:
        budget = Budget(max_drop, min(stages.base["discovery"].n, stages.base["heldout"].n), settings.alpha)
    units = units_of(head_queue(screened, prescreen, lm.grid, stages.rank), lm.grid, settings.prefer)
    intact = stages.intact()
    width = settings.beam_width if settings.compress_search == "beam" else None
    log.info("compress: growing from %d %s, least harmful first, within %.3g points of the intact discovery "
             "accuracy (%.1f%%), as the held-out test at %d examples would judge it; %s", len(units),
             settings.prefer, max_drop, 100 * stages.base["discovery"].accuracy, budget.size,
             f"beam of width {width}: each round evaluates up to {width} sets" if width
             else "galloping greedy: each round evaluates up to 3 sets")
    if width:
        grown = beam(units, lm.grid, stages.evaluate, intact, budget=budget, patience=patience, width=width)
    else:
        grown = grow(units, lm.grid, stages.evaluate, budget=budget, patience=patience)
    chosen = tuple(sorted(h for unit in grown.chosen for h in unit))
    evaluated = {(head,): paired for head, paired, _ in screened}
    evaluated.update(grown.evaluated)
    if chosen not in evaluated:  # nothing could go: the intact model is the answer
        evaluated[chosen] = intact
    log.info("compress: %d heads within %.3g points on discovery (%d distinct sets evaluated in %d rounds, %s per "
             "head removed; %d units rejected)", len(chosen), max_drop, len(grown.evaluated), grown.rounds,
             f"{len(grown.evaluated) / len(chosen):.2f}" if chosen else "n/a", len(grown.rejected))
    return grown, units, evaluated, chosen


__all__ = ["compress", "grow_on_discovery", "head_queue", "savings", "units_of", "verdict_for"]
