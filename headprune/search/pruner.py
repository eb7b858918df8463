"""The parsimony rule (``headprune.search.parsimony``) applied to find's sets: each set tested head by head
through find's conditions (journalled), the best sets whose heads all earn their place frozen as finalists, and
the cost counted.

Apart from the rule and its records because the records are part of the ``FindResult``, whose settings the
conditions read: the rule imports neither, this driver both.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.search.conditions import Conditions, condition_key
from headprune.search.paired import Paired, compare
from headprune.search.parsimony import HeadContribution, HeadSet, Parsimony, contributions, counts, drop_one
from headprune.search.stats import upper_tail

log = logging.getLogger("headprune")


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
