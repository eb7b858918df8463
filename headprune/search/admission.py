"""Admission: which heads of the proposed sets stay, decided on discovery's check half, and the finalists.

The search half proposes (``headprune.search.folds`` says why the halves). Walking the evaluated sets best first
by their search-half rank, each set of several heads goes through backward elimination on the check half: every
head is tested against the set without it (``headprune.search.parsimony``: b, c counted on the check half, the
exact one-sided test, Holm over the set's heads); if all earn their place the set is admitted; if none does,
nothing of it is; otherwise the weakest head that did not earn (largest adjusted p, then smallest b - c) leaves
and the smaller set is tested again. A set cut down to one head is admitted as that single head (it earned its
place beside the head that left). Single heads are ranked on all of discovery (:func:`single_order`): where
the walk meets a single head, or a set none of whose heads earn, the best single head not yet a finalist takes
its place. The first
set admitted is the primary; the walk stops at F distinct finalists.

Why a passenger cannot ride along at more than the stated rate: a head with no effect flips check-half answers
as a fair coin whatever the search half did, so it passes its test with probability at most ``alpha`` (Holm
keeps that for the set's heads together); the primary's set is the first proposed one, tested by elimination
on nested subsets of it. ``tests/test_passengers.py`` measures the rate through this code on counts-only models.

Cost, in conditions. Every subset of the nominees of size 1..K is already evaluated by the exhaustive stage,
so their elimination costs nothing new; a set grown by ``--extend`` may need its drop-one subsets (at most
|S| - 1 new discovery conditions each, journalled, so ``--resume`` recomputes nothing). The primary set's
held-out drop-one numbers (exploratory, after the verdict) cost |S| held-out conditions when it has two heads
or more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.search.binomial import upper_tail
from headprune.search.conditions import condition_key
from headprune.search.paired import Paired, compare
from headprune.search.parsimony import HeadContribution, HeadSet, Parsimony, contributions, counts, drop_one
from headprune.search.score import score_intervals
from headprune.search.stages import Evaluated, Stages

log = logging.getLogger("headprune")


@dataclass
class Admission:
    """Admits heads on the check half through find's conditions (journalled), counting what it costs."""

    stages: Stages  # its folds (made by Stages.split_discovery), conditions and search-half numbers
    evaluated: Evaluated  # every set evaluated on discovery; gains the drop-one subsets this walk needs
    measure: str  # "accuracy" or "margin"
    level: float
    tolerance: float
    examined: int = 0  # multi-head sets tested head by head
    dropped: int = 0  # of those, sets with a head that did not earn its place
    evaluated_here: int = 0  # drop-one discovery sets the search itself had not evaluated

    @property
    def search(self) -> np.ndarray:
        assert self.stages.folds is not None, "Stages.split_discovery comes first"
        return self.stages.folds.search

    @property
    def check(self) -> np.ndarray:
        assert self.stages.folds is not None, "Stages.split_discovery comes first"
        return self.stages.folds.check

    def _results(self, split: str, sets: list[HeadSet]) -> list[EvalResult]:
        """The conditions, in one batch: the missing ones evaluated (and journalled), the rest read back; a
        discovery set the search had not evaluated joins ``evaluated`` (and the search-half numbers)."""
        conditions = self.stages.conditions
        missing = any(not conditions.journal.has(condition_key(split, s)) for s in sets)
        results = conditions.many(split, sets, f"{split} drop-one", quiet=not missing)
        if split == "discovery":
            base, known = self.stages.base["discovery"], self.stages.search_half  # every set the search evaluated
            for heads, result in zip(sets, results):
                if heads and heads not in known:  # counted whether computed now or read back on resume
                    self.evaluated_here += 1
                    known[heads] = compare(base, result, self.search)
                if heads and heads not in self.evaluated:
                    self.evaluated[heads] = compare(base, result)
        return results

    def _contributions(self, heads: HeadSet, mask: np.ndarray) -> tuple[HeadContribution, ...]:
        with_set, *withouts = self._results("discovery", [heads, *drop_one(heads)])
        return contributions(heads, with_set, withouts, measure=self.measure, level=self.level,
                             tolerance=self.tolerance, mask=mask)

    def adds(self, grown: HeadSet, before: HeadSet, head: Head) -> bool:
        """``--extend`` (proposing, so on the search half): does ``head`` earn its place in ``grown``?"""
        with_set, without = self._results("discovery", [grown, before])
        return contributions((head,), with_set, [without], measure=self.measure, level=self.level,
                             tolerance=self.tolerance, mask=self.search)[0].earned

    def admit(self, heads: HeadSet) -> tuple[HeadSet | None, tuple[HeadContribution, ...]]:
        """Backward elimination of ``heads`` on the check half: the admitted set (None: no head earned its
        place) and the last test's numbers for its heads."""
        check, current = self.check, heads
        self.examined += 1
        while True:
            found = self._contributions(current, check)
            if all(c.earned for c in found):
                return current, found
            self.dropped += current == heads  # once per set: it lost a head, or none of its heads stays
            if not any(c.earned for c in found):
                return None, found
            worst = max((c for c in found if not c.earned), key=lambda c: (c.adjusted_p, c.damaged - c.rescued))
            current = tuple(h for h in current if str(h) != worst.head)
            if len(current) == 1:  # it earned its place beside the head that left; recorded against intact
                return current, self._contributions(current, check)

    def finalists(self, ranked: Sequence[HeadSet], singles: Sequence[Head], count: int
                  ) -> tuple[list[HeadSet], dict[HeadSet, tuple[HeadContribution, ...]]]:
        """The ``count`` finalists, primary first: ``ranked`` are the evaluated sets best first on the search half,
        ``singles`` the screened heads best first on all of discovery."""
        frozen: dict[HeadSet, tuple[HeadContribution, ...]] = {}
        spare = iter(singles)
        for heads in ranked:
            if len(frozen) >= count:
                break
            admitted, found = self.admit(heads) if len(heads) > 1 else (None, ())
            if admitted is None:
                admitted, found = self._next_single(spare, frozen)
            if admitted is not None and admitted not in frozen:
                frozen[admitted] = found
        while len(frozen) < count:  # fewer proposals than finalists: the remaining single heads
            admitted, found = self._next_single(spare, frozen)
            if admitted is None:
                break
            frozen[admitted] = found
        log.info("admission on the check half (%d examples): %d multi-head sets tested, %d lost a head or were "
                 "refused; %d new discovery conditions", int(self.check.sum()), self.examined, self.dropped,
                 self.evaluated_here)
        return list(frozen), frozen

    def _next_single(self, spare: Iterator[Head], frozen: dict
                     ) -> tuple[HeadSet | None, tuple[HeadContribution, ...]]:
        """The best single head not yet a finalist, with its check-half numbers against the intact model."""
        for head in spare:
            if (head,) not in frozen:
                return (head,), self._contributions((head,), self.check)
        return None, ()

    def heldout(self, heads: HeadSet, found: tuple[HeadContribution, ...]) -> tuple[HeadContribution, ...]:
        """The primary set's drop-one numbers on held-out: exploratory, measured after its verdict."""
        if len(heads) < 2:
            return found
        with_set, *withouts = self._results("heldout", [heads, *drop_one(heads)])
        pairs = [counts(with_set, without, self.measure, self.tolerance) for without in withouts]
        return tuple(replace(c, heldout_rescued=b, heldout_damaged=d, heldout_p=upper_tail(b, b + d))
                     for c, (b, d) in zip(found, pairs))

    def record(self, primary_size: int) -> Parsimony:
        search, check = int(self.search.sum()), int(self.check.sum())
        return Parsimony(self.level, self.measure, self.examined, self.dropped, self.evaluated_here,
                         primary_size if primary_size > 1 else 0, search=search, check=check)


SINGLE_LEVEL = 0.7  # single heads are ranked by the lower end of this score interval of their discovery gain


def single_order(screened: Sequence[tuple[Head, Paired, object]], rank: Callable[..., tuple], rank_by: str
                 ) -> list[Head]:
    """The screened heads best first on all of discovery, as single-head finalists are taken.

    Under ``rank_by=gain``, by the lower end of the 70% score interval of the gain (about one standard error
    below it: the improvement the discovery data firmly support), then find's ranking key. A raw gain favours a
    head whose gain is the luck of many answers flipped at random over a head that rescues a few answers
    consistently; the held-out test then confirms the lucky one rarely. Measured through find's own code
    (scripts/passengers.py, one real head of +0.6 points among 17 null heads): the real head is taken about as
    often as by the raw gain where null heads flip 0.1-1% of answers, and 0.69 against 0.48 of the time where
    they flip 3%; the 95% bound takes it still more often there but less where null heads flip few answers.
    Under ``rank_by=margin`` (the user's chosen measure), find's ranking key alone (``"key"``: the same for
    gain, the rule before 0.2, which the simulation compares against)."""
    rows = list(screened)
    keys = [rank(paired, (head,)) for head, paired, _ in rows]
    if rank_by == "gain" and rows:
        lows, _ = score_intervals([p.rescued for _, p, _ in rows], [p.damaged for _, p, _ in rows],
                                  [p.n for _, p, _ in rows], alpha=1 - SINGLE_LEVEL)
        keys = [(-float(low), *key) for low, key in zip(lows, keys)]
    return [row[0] for _, row in sorted(zip(keys, rows), key=lambda item: item[0])]


__all__ = ["SINGLE_LEVEL", "Admission", "single_order"]
