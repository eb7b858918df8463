"""``find --objective compress``: the largest head set whose removal the task does not notice.

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
``patience`` rejections in a row end it. The search therefore always ends with either an empty queue or a
rejected set one unit larger than its answer.

The set is fixed on discovery. Held-out data only gives the verdict, a non-inferiority test
(:class:`headprune.search.stats.NonInferiority`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from headprune.errors import SearchSettingsError
from headprune.heads import Head, HeadGrid
from headprune.models import LoadedModel
from headprune.search.paired import Paired, compare
from headprune.search.result import (
    Compression,
    CurvePoint,
    Finalist,
    FindSettings,
    Prescreen,
    Savings,
)
from headprune.search.stats import NonInferiority, non_inferiority

if TYPE_CHECKING:
    from headprune.search.find import _Search

log = logging.getLogger("headprune")

OBJECTIVES = ("improve", "compress")
PREFER = ("heads", "groups")
DEFAULT_MAX_DROP = 0.5  # accuracy points
DEFAULT_PATIENCE = 3

Unit = tuple[Head, ...]  # a single head, or every query head of one key/value group
Evaluate = Callable[[list[tuple[Head, ...]], str], dict[tuple[Head, ...], Paired]]


def check_objective(settings: FindSettings) -> None:
    """Refuse compress options that cannot work, or that the improve objective would silently ignore.

    Raises:
        SearchSettingsError
    """
    if settings.objective not in OBJECTIVES:
        raise SearchSettingsError(f"objective must be one of {', '.join(OBJECTIVES)}, not {settings.objective!r}",
                                  settings=("objective",))
    given = [name for name in ("max_drop", "prefer", "patience") if getattr(settings, name) is not None]
    if settings.objective == "improve":
        if given:
            raise SearchSettingsError(f"{', '.join(given)}: only with objective compress", settings=(
                *given, "objective"))
        return
    if settings.max_drop is None or not settings.max_drop >= 0 or not math.isfinite(settings.max_drop):
        raise SearchSettingsError(f"max_drop must be a number of accuracy points >= 0, got {settings.max_drop}",
                                  settings=("max_drop",))
    if settings.prefer not in PREFER:
        raise SearchSettingsError(f"prefer must be one of {', '.join(PREFER)}, not {settings.prefer!r}",
                                  settings=("prefer",))
    if settings.patience is None or settings.patience < 1:
        raise SearchSettingsError(f"patience must be at least 1, got {settings.patience}", settings=("patience",))


def compress_fields(objective: str, max_drop: float | None, prefer: str | None, patience: int | None) -> dict:
    """The compress fields of FindSettings: defaults filled in for compress, left unset for improve."""
    if objective != "compress":
        return {"objective": objective, "max_drop": max_drop, "prefer": prefer, "patience": patience}
    return {"objective": objective, "max_drop": DEFAULT_MAX_DROP if max_drop is None else max_drop,
            "prefer": prefer or "heads", "patience": DEFAULT_PATIENCE if patience is None else patience}


def check_layout(grid: HeadGrid, prefer: str) -> None:
    """Refuse ``prefer="groups"`` where there are no groups of several query heads to prefer.

    Raises:
        SearchSettingsError
    """
    if prefer == "groups" and grid.num_kv_heads == grid.num_heads:
        raise SearchSettingsError(f"prefer groups needs grouped-query attention; this model has one key/value head "
                                  f"per query head ({grid.num_heads} per layer): use prefer heads",
                                  settings=("prefer",))


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


def within_budget(paired: Paired, max_drop: float) -> bool:
    """Discovery accuracy within ``max_drop`` points of the intact model (or above), counted in examples so
    that float rounding cannot decide: net losses ``damaged - rescued <= max_drop% of n``."""
    return paired.damaged - paired.rescued <= max_drop / 100 * paired.n + 1e-9


def grow(units: Sequence[Unit], grid: HeadGrid, evaluate: Evaluate, *, max_drop: float,
         patience: int) -> GrowResult:
    """The galloping greedy search with backtracking described in the module docstring.

    Args:
        units: the queue, least harmful first.
        grid: the model's heads (no layer may lose every head: the export could not express it).
        evaluate: discovery results of a batch of head sets (``find``'s conditions, paired).
        max_drop: accuracy points discovery may lose.
        patience: consecutive single-unit rejections that end the search.
    """
    chosen: list[Unit] = []
    queue = list(units)
    curve: list[CurvePoint] = []
    rejected: list[Unit] = []
    evaluated: dict[tuple[Head, ...], Paired] = {}
    left = {layer: grid.num_heads for layer in range(grid.num_layers)}  # heads each layer still has
    step, streak = 1, 0
    while streak < patience:
        prefix = _feasible_prefix(queue, left, 2 * step)
        if not prefix:
            break
        sizes = sorted({m for m in (max(1, step // 2), step, 2 * step) if m <= len(prefix)} | {len(prefix)})
        base = tuple(h for unit in chosen for h in unit)
        sets = [tuple(sorted(base + tuple(h for unit in prefix[:m] for h in unit))) for m in sizes]
        results = evaluate(sets, "compress")
        evaluated.update(results)
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
    return GrowResult(chosen, curve, rejected, evaluated)


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
    from headprune.exporter.pipeline import count_parameters
    from headprune.exporter.plan import plan_layers
    from headprune.exporter.slicing import slice_model

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


def verdict_for(before, after, *, max_drop: float, removed: int, seed: int) -> NonInferiority:  # noqa: ANN001
    """The held-out non-inferiority verdict of a compression (``max_drop`` in points)."""
    return non_inferiority(before.correct, after.correct, margin=max_drop / 100, removed=removed, seed=seed)


def unit_name(unit: Unit) -> str:
    return "+".join(str(h) for h in unit)


def run(search: _Search, screened: list[tuple[Head, Paired, float | None]], prescreen: Prescreen | None
        ) -> tuple[dict[tuple[Head, ...], Paired], list[Finalist], Compression]:
    """The compress stage of a find run: grow the set on discovery, then the held-out verdict and controls."""
    mark = time.perf_counter()
    lm, settings, conditions = search.lm, search.settings, search.conditions
    max_drop, patience = settings.max_drop, settings.patience
    units = units_of(head_queue(screened, prescreen, lm.grid, search._rank), lm.grid, settings.prefer)
    log.info("compress: growing from %d %s, least harmful first, within %.3g points of the intact discovery "
             "accuracy (%.1f%%); each round evaluates up to 3 sets", len(units), settings.prefer, max_drop,
             100 * search.base["discovery"].accuracy)
    grown = grow(units, lm.grid, search._paired, max_drop=max_drop, patience=patience)
    chosen = tuple(sorted(h for unit in grown.chosen for h in unit))
    evaluated = {(head,): paired for head, paired, _ in screened}
    evaluated.update(grown.evaluated)
    if chosen not in evaluated:  # nothing could go: the intact model is the answer
        evaluated[chosen] = compare(search.base["discovery"], search.base["discovery"])
    log.info("compress: %d heads within %.3g points on discovery (%d sets evaluated, %d units rejected)",
             len(chosen), max_drop, len(grown.curve), len(grown.rejected))
    search._timed("compress", mark)
    finalists = search._finalists([chosen], evaluated)
    after = conditions.many("heldout", [chosen], "held-out")[0]  # journalled by the finalist stage
    verdict = verdict_for(search.base["heldout"], after, max_drop=max_drop, removed=len(chosen), seed=settings.seed)
    compression = Compression(max_drop, settings.prefer, tuple(str(h) for h in chosen), evaluated[chosen], verdict,
                              savings(lm, chosen), tuple(grown.curve), tuple(unit_name(u) for u in grown.rejected),
                              len(units))
    return evaluated, finalists, compression


__all__ = ["DEFAULT_MAX_DROP", "DEFAULT_PATIENCE", "OBJECTIVES", "PREFER", "GrowResult", "check_layout",
           "check_objective", "compress_fields", "grow",
           "head_queue", "run", "savings", "units_of", "verdict_for", "within_budget"]
