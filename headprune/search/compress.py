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
from dataclasses import replace

from headprune.heads import Head
from headprune.search.find_result import Compression, FindResult, Prescreen
from headprune.search.growth import Budget, GrowResult, Unit, beam, grow
from headprune.search.split import Inputs
from headprune.search.stages import Evaluated, Screened, Stages
from headprune.search.stats import NonInferiority, non_inferiority
from headprune.search.units import head_queue, savings, units_of

log = logging.getLogger("headprune")


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
