"""``find --shrink POINTS``: the improving set grown by whole key/value groups that neither the task nor the guards
need, and tested for non-inferiority against it on examples that chose neither.

The improving objective ships a few heads whose removal helps; a sliced export of a grouped-query model is
smaller only where whole key/value groups go (llama.cpp needs equal groups in a layer, so a query head removed
alone is zeroed, not sliced). After the primary set ``P`` is chosen, this grows it on discovery with units that
make it sliceable and smaller: every key/value group that does not touch ``P``, and for each group ``P`` touches,
the rest of that group. The units are taken in the screen's order (least harmful first) by the compress
objective's galloping greedy (``headprune.search.growth.grow``, its ``patience`` 3): a grown set ``G`` is kept
while its discovery counts against ``P`` pass the non-inferiority test the fresh examples will face
(``growth.Budget`` at the fresh size) and every guard's discovery part stays within its margin
(``headprune.search.guards.keeps``).

The test: ``G`` against ``P`` on the fresh examples (``headprune.search.fresh``: neither discovery, which grew
``G``, nor held-out, which chose ``P`` through the membership tests), Tango's score test of non-inferiority at
one-sided ``alpha / 2`` (``headprune.search.stats.NonInferiority``, the compress verdict's). The shipped claim is
the intersection of ``P``'s own held-out verdict, this test and each guard's held-out test for ``G``, each at its
full level (``headprune.search.shrink_record``). Where the data cannot show it (too few fresh examples, or a test
that cannot pass at this margin even with no answer changed), or ``P`` is not confirmed, one line says so and no
smaller set is claimed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from headprune.heads import Head, HeadGrid
from headprune.search.find_result import Prescreen
from headprune.search.growth import Budget, GrowResult, Unit, grow
from headprune.search.guard_search import GuardCheck, heldout_effects
from headprune.search.paired import Paired, compare
from headprune.search.score import non_inferior
from headprune.search.settings import DEFAULT_PATIENCE, MIN_FRESH
from headprune.search.shrink_record import Shrink, ShrinkSize, kv_cache_bytes
from headprune.search.stages import Screened, Stages
from headprune.search.stats import NonInferiority, non_inferiority
from headprune.search.units import head_queue, savings, units_of
from headprune.surgery.plan import plan_layers

log = logging.getLogger("headprune")

HeadSet = tuple[Head, ...]


def shrink_units(improving: Sequence[Head], queue: Sequence[Head], grid: HeadGrid) -> list[Unit]:
    """The units ``improving`` may grow by, least harmful first: every key/value group it does not touch, and the
    rest of each group it touches (none where it holds the whole group)."""
    inside = set(improving)
    units = []
    for group in units_of(queue, grid, "groups"):
        rest = tuple(h for h in group if h not in inside)
        if rest:
            units.append(rest)
    return units


def data_note(fresh: int, margin: float, alpha: float, discovery: int | None = None) -> str | None:
    """One line when ``fresh`` examples cannot show non-inferiority within ``margin`` points, or growth, which judges
    ``discovery`` at its own size where that is smaller (``growth.Budget``), could take nothing; else None."""
    if fresh < MIN_FRESH:
        return (f"shrink: {fresh} fresh examples (on neither side of the split); the test needs at least {MIN_FRESH}: "
                "no smaller set is claimed (give a task with more examples)")
    if not non_inferior(0, 0, fresh, margin=margin / 100, alpha=alpha):
        return (f"shrink: {fresh} fresh examples cannot show non-inferiority within {margin:g} points even with no "
                f"answer changed (Tango's score test, one-sided {100 * alpha / 2:g}%): no smaller set is claimed "
                "(give more with --shrink-examples and a task that has them, or a wider margin)")
    if discovery is not None and discovery < fresh and not non_inferior(0, 0, discovery, margin=margin / 100,
                                                                         alpha=alpha):
        return (f"shrink: growth judges discovery at its {discovery} examples, which cannot show non-inferiority "
                f"within {margin:g} points even with no answer changed: no smaller set is claimed (give more "
                "discovery examples or a wider margin)")
    return None


def grow_from(improving: HeadSet, units: Sequence[Unit], grid: HeadGrid,
              evaluate: Callable[[list[HeadSet]], list[Paired]], *, budget: Budget,
              admit: Callable[[HeadSet], bool] | None = None, patience: int = DEFAULT_PATIENCE) -> GrowResult:
    """The galloping greedy from ``improving``: ``evaluate`` pairs each whole set (``improving`` with the units) with
    ``improving`` on discovery; ``admit`` tests a whole set within budget further (the guards)."""
    def paired(sets: list[HeadSet], label: str) -> dict[HeadSet, Paired]:
        return dict(zip(sets, evaluate([whole(improving, s) for s in sets])))

    return grow(units, grid, paired, budget=budget, patience=patience, removed=improving,
                admit=None if admit is None else lambda s: admit(whole(improving, s)))


def whole(improving: HeadSet, grown: Sequence[Head]) -> HeadSet:
    return tuple(sorted({*improving, *grown}))


def fresh_verdict(improving: np.ndarray, grown: np.ndarray, *, margin: float, removed: int,
                  alpha: float) -> NonInferiority:
    """The grown set against the improving set on the fresh examples (per-example correctness of each)."""
    return non_inferiority(improving, grown, margin=margin / 100, removed=removed, alpha=alpha)


@dataclass
class Grown:
    """What the search grew on discovery, before the fresh examples are read."""

    improving: HeadSet
    heads: HeadSet
    result: GrowResult | None
    queue: int
    note: str | None


def grow_on_discovery(stages: Stages, screened: Screened, prescreen: Prescreen | None, improving: HeadSet,
                      confirmed: bool) -> Grown:
    """The grown set (``improving`` itself when nothing can go, the data cannot show it, or ``improving`` is not
    confirmed: then ``note`` says why)."""
    settings, grid = stages.settings, stages.lm.grid
    margin, alpha = float(settings.shrink or 0), settings.alpha
    fresh = stages.base["fresh"].n if "fresh" in stages.base else 0
    note = data_note(fresh, margin, alpha, stages.base["discovery"].n)
    if note is None and not confirmed:
        note = "shrink: the improving set is not confirmed on held-out data: no smaller set is claimed"
    if note is not None:
        log.info("%s", note)
        return Grown(improving, improving, None, 0, note)
    units = shrink_units(improving, head_queue(screened, prescreen, grid, stages.rank), grid)
    base = stages.conditions.many("discovery", [improving], "shrink", quiet=True)[0]
    check = GuardCheck(stages) if stages.guards else None

    def evaluate(sets: list[HeadSet]) -> list[Paired]:
        return [compare(base, r) for r in stages.results(sets, "shrink")]

    log.info("shrink: growing the improving set (%d heads) by %d key/value groups, least harmful first, within %g "
             "points of it on discovery as the test on %d fresh examples would judge it", len(improving), len(units),
             margin, fresh)
    with stages.timed("shrink"):
        grown = grow_from(improving, units, grid, evaluate, budget=Budget(margin, fresh, alpha),
                          admit=None if check is None else lambda heads: check.effects(heads, "shrink").kept)
    heads = whole(improving, [h for unit in grown.chosen for h in unit])
    note = None if heads != improving else "shrink: no key/value group could go within the margin on discovery"
    log.info("shrink: %d of %d units taken on discovery (%d rejected, %d sets evaluated, ended by %s): %d heads",
             len(grown.chosen), len(units), len(grown.rejected), len(grown.evaluated), grown.stopped, len(heads))
    return Grown(improving, heads, grown, len(units), note)


def size_of(stages: Stages, heads: HeadSet) -> ShrinkSize:
    s, grid = savings(stages.lm, heads), stages.lm.grid
    kept = [len(plan.kv_heads) for plan in plan_layers(grid, heads)]
    return ShrinkSize(s.parameters_after, s.parameters_before, s.kv_heads_after, s.kv_heads_before,
                      kv_cache_bytes(grid.cache_width(kept)), kv_cache_bytes(grid.cache_width()))


def judge_on_fresh(stages: Stages, grown: Grown, rank: int | None) -> Shrink:
    """The record: the fresh examples' test of the grown set against the improving one, the grown set's guards
    on their held-out examples, and both sets' sizes."""
    settings = stages.settings
    margin, alpha = float(settings.shrink or 0), settings.alpha
    improving, heads = grown.improving, grown.heads
    verdict, discovery, guards = None, None, ()
    if grown.note is None:
        with stages.timed("shrink"):
            before, after = stages.conditions.many("fresh", [improving, heads], "shrink test")
            verdict = fresh_verdict(before.correct, after.correct, margin=margin, removed=len(heads) - len(improving),
                                    alpha=alpha)
            discovery = grown.result.evaluated[tuple(h for h in heads if h not in set(improving))]  # type: ignore[union-attr]
            guards = heldout_effects(stages, [heads])[0]
    result = grown.result
    names = lambda units: tuple("+".join(map(str, u)) for u in units)  # noqa: E731
    return Shrink(margin, tuple(map(str, improving)), tuple(map(str, heads)),
                  names(result.chosen) if result else (), names(result.rejected) if result else (), grown.queue,
                  len(result.evaluated) if result else 0, stages.base["fresh"].n if "fresh" in stages.base else 0,
                  settings.shrink_examples or 0, discovery, verdict, size_of(stages, heads),
                  size_of(stages, improving), guards, rank if heads != improving else None, grown.note,
                  stages.base["fresh"].accuracy if "fresh" in stages.base and verdict is not None else None)


__all__ = ["Grown", "data_note", "fresh_verdict", "grow_from", "grow_on_discovery", "shrink_units", "judge_on_fresh",
           "whole"]
