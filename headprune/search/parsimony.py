"""Parsimony: a head stays in a set only if it earns its place on discovery.

Why: ranking sets by their discovery gain alone lets a head ride along that adds nothing the data supports
(it flips one example by chance, or only nudges margins), and a shipped set should contain no such passenger.

The rule. For a set S and each head h of S, pair S's discovery results with those of S without h:
``b`` = examples right with S removed and wrong with h kept (S without h), ``c`` = the reverse. If h adds
nothing, each of the b + c discordant examples goes either way with probability 1/2, so ``p`` = P(X >= b)
for X ~ Binomial(b + c, 1/2) is an exact one-sided test (the one-sided McNemar / sign test); Holm's step-down
over S's heads keeps the chance that a set keeps any passenger at the level, which is find's ``alpha``
(default 0.05). h **earns its place** when b - c >= 1 and its Holm-adjusted p <= the level. A single-head set
is compared with the intact model the same way, for the record; its test is the held-out verdict.

With ``rank_by=margin`` the user has chosen the margin as what improves, so b and c count the examples whose
margin the head's removal raises or lowers (beyond the evaluation's float tolerance) instead of answers: the
same exact sign test on the per-example margin change. A head whose removal consistently raises margins
earns its place there even when it flips no answer; under ``rank_by=gain`` it does not.

Freezing. The evaluated sets are walked best first by find's ranking key. A set whose heads all earn their
place is frozen as a finalist; any other set is dropped and its drop-one subsets join the walk at their own
discovery rank (so a failing set is replaced by its subset, and the subset is tested in turn). The walk stops
at F distinct frozen sets. ``--extend`` obeys the same rule: a step is taken only when the added head earns
its place against the set it grows (which also needs a discovery gain of at least 1).

Cost, in conditions. Every subset of the nominees of size 1..K is already evaluated by the exhaustive stage,
so testing its sets costs no new condition (the journal holds them). Only sets grown by ``--extend`` have
drop-one subsets not yet evaluated: at most |S| - 1 new discovery conditions per such set reached by the walk,
evaluated in one batch through the journal (so ``--resume`` recomputes nothing and data-parallel processes
share them). The primary set's held-out drop-one numbers (exploratory, after the verdict) cost |S| held-out
conditions when it has two heads or more.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.search.paired import Paired, compare
from headprune.search.stats import holm, upper_tail

if TYPE_CHECKING:
    from headprune.search.conditions import Conditions

log = logging.getLogger("headprune")

HeadSet = tuple[Head, ...]


@dataclass(frozen=True)
class HeadContribution:
    """One head of a set against the set without it on discovery (this module says how): b = ``rescued``,
    c = ``damaged``, the one-sided exact binomial p and its Holm adjustment over the set's heads.
    ``heldout_*``: the primary set's exploratory drop-one numbers, measured after the verdict."""

    head: str
    rescued: int
    damaged: int
    p_value: float
    adjusted_p: float
    earned: bool
    heldout_rescued: int | None = None
    heldout_damaged: int | None = None
    heldout_p: float | None = None


@dataclass(frozen=True)
class Parsimony:
    """The pruning before the finalists are frozen: its test and what it cost in conditions."""

    level: float  # discovery level of each head's test, Holm over a set's heads
    measure: str  # "accuracy" (b, c count answers) or "margin" (b, c count margins up / down)
    examined: int  # multi-head sets tested head by head
    dropped: int  # of those, sets with a head that did not earn its place
    conditions: int  # discovery conditions the pruning evaluated (not already in the journal)
    heldout_conditions: int = 0  # the primary set's held-out drop-one conditions (exploratory)


def counts(with_set: EvalResult, without: EvalResult, measure: str, tolerance: float) -> tuple[int, int]:
    """(b, c): examples the head's removal helps and hurts, given the rest of the set removed either way."""
    if measure == "margin":
        change = with_set.margins - without.margins
        allowed = tolerance * np.maximum(1.0, np.abs(without.margins))
        return int((change > allowed).sum()), int((change < -allowed).sum())
    right, right_without = with_set.correct, without.correct
    return int((right & ~right_without).sum()), int((~right & right_without).sum())


def contributions(heads: HeadSet, with_set: EvalResult, withouts: Sequence[EvalResult], *, measure: str,
                  level: float, tolerance: float) -> tuple[HeadContribution, ...]:
    """Each head's b, c, one-sided exact p, Holm-adjusted p over the set's heads, and whether it earned."""
    pairs = [counts(with_set, without, measure, tolerance) for without in withouts]
    p_values = [upper_tail(b, b + c) for b, c in pairs]
    return tuple(HeadContribution(str(h), b, c, p, adjusted, b - c >= 1 and adjusted <= level)
                 for h, (b, c), p, adjusted in zip(heads, pairs, p_values, holm(p_values)))


def drop_one(heads: HeadSet) -> list[HeadSet]:
    return [tuple(x for x in heads if x != h) for h in heads]


@dataclass
class Pruner:
    """Tests sets head by head through find's conditions (journalled), counting what it costs."""

    conditions: Conditions
    base: EvalResult  # the intact model on discovery
    rank: Callable[[Paired, HeadSet], tuple]
    measure: str  # "accuracy" or "margin"
    level: float
    tolerance: float
    examined: int = 0
    dropped: int = 0
    evaluated_here: int = 0  # drop-one discovery sets the search itself had not evaluated

    def _results(self, split: str, sets: list[HeadSet]) -> list[EvalResult]:
        """The conditions, in one batch: the missing ones evaluated (and journalled), the rest read back."""
        from headprune.search.conditions import condition_key

        missing = any(not self.conditions.journal.has(condition_key(split, s)) for s in sets)
        return self.conditions.many(split, sets, f"{split} drop-one", quiet=not missing)

    def test(self, heads: HeadSet) -> tuple[tuple[HeadContribution, ...], list[EvalResult]]:
        """Every head of ``heads`` against the set without it, and the drop-one subsets' results."""
        with_set, *withouts = self._results("discovery", [heads, *drop_one(heads)])
        found = contributions(heads, with_set, withouts, measure=self.measure, level=self.level,
                              tolerance=self.tolerance)
        return found, withouts

    def adds(self, grown: HeadSet, before: HeadSet, head: Head) -> bool:
        """``--extend``: does ``head`` earn its place in ``grown`` (= ``before`` plus ``head``)?"""
        with_set, without = self._results("discovery", [grown, before])
        return contributions((head,), with_set, [without], measure=self.measure, level=self.level,
                             tolerance=self.tolerance)[0].earned

    def freeze(self, evaluated: dict[HeadSet, Paired], count: int
               ) -> tuple[list[HeadSet], dict[HeadSet, tuple[HeadContribution, ...]]]:
        """The ``count`` best sets whose heads all earn their place, best first. ``evaluated`` gains the
        drop-one subsets the walk needed (evaluated sets like any other; their number is the pruning's cost,
        the same whether they were computed now or read back from a resumed journal)."""
        heap = [(self.rank(paired, heads), heads) for heads, paired in evaluated.items()]
        heapq.heapify(heap)
        frozen: dict[HeadSet, tuple[HeadContribution, ...]] = {}
        while heap and len(frozen) < count:
            _, heads = heapq.heappop(heap)
            found, withouts = self.test(heads)
            new = [(s, r) for s, r in zip(drop_one(heads), withouts) if s and s not in evaluated]
            self.evaluated_here += len(new)
            for subset, result in new:
                evaluated[subset] = compare(self.base, result)
            if len(heads) == 1 or all(c.earned for c in found):
                frozen[heads] = found
                continue
            self.examined, self.dropped = self.examined + 1, self.dropped + 1
            for subset, _ in new:  # the failing set's subsets compete at their own rank
                heapq.heappush(heap, (self.rank(evaluated[subset], subset), subset))
        self.examined += sum(len(heads) > 1 for heads in frozen)
        log.info("parsimony: %d multi-head sets tested head by head, %d dropped (a head did not earn its place); "
                 "%d new discovery conditions", self.examined, self.dropped, self.evaluated_here)
        order = sorted(frozen, key=lambda heads: self.rank(evaluated[heads], heads))
        return order, frozen

    def heldout(self, heads: HeadSet, found: tuple[HeadContribution, ...]) -> tuple[HeadContribution, ...]:
        """The primary set's drop-one numbers on held-out: exploratory, measured after its verdict."""
        if len(heads) < 2:
            return found
        with_set, *withouts = self._results("heldout", [heads, *drop_one(heads)])
        pairs = [counts(with_set, without, self.measure, self.tolerance) for without in withouts]
        return tuple(replace(c, heldout_rescued=b, heldout_damaged=d, heldout_p=upper_tail(b, b + d))
                     for c, (b, d) in zip(found, pairs))

    def record(self, primary_size: int) -> Parsimony:
        return Parsimony(self.level, self.measure, self.examined, self.dropped, self.evaluated_here,
                         primary_size if primary_size > 1 else 0)


__all__ = ["HeadContribution", "Parsimony", "Pruner", "contributions", "counts", "drop_one", "upper_tail"]
