"""The rules of 0.1.0 and 0.2: every set of several heads walked best first through backward elimination, heads
admitted on discovery (0.1.0: ``same``, all of it; 0.2: ``admission``, its check half alone). find no longer runs
them; the counts-only simulation compares them with find's rule through the same search code
(``headprune.search.simulation``), and ``report.md`` shows the files they wrote as they were.

The search half proposed (``headprune.search.folds`` says why the halves). Walking the evaluated sets best first
by their search-half rank, each set of several heads went through backward elimination on the check half: every
head tested against the set without it (``headprune.search.parsimony``: b, c counted on the check half, the
exact one-sided test, Holm over the set's heads); if all earned their place the set was admitted; if none did,
nothing of it was; otherwise the weakest head that did not earn (largest adjusted p, then smallest b - c) left
and the smaller set was tested again. Single heads were ranked on all of discovery
(:func:`headprune.search.stages.single_order`); where the walk met a single head, or a set none of whose heads
earned, the best single head not yet a finalist took its place. The first set admitted was the primary; the walk
stopped at F distinct finalists. ``--extend`` grew the best set from the first screen's best ``2 x nominees``
heads. Its guarantee held (a passenger in at most 1.8% of primary sets), its power did not: the check half alone
(75 examples at the README's sizes) could not show any head's place, so no set of several heads could ship there,
and at 2,000 discovery examples two real heads of +0.6 points each were both kept in about 10% of runs. 0.1.0
proposed and admitted on the same examples, all of discovery, and ranked single heads by find's key alone: its
passengers rode in 18-44% of primary sets (``headprune.search.folds``).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from headprune.core.devices import dtype_name
from headprune.evaluation.contract import tolerance
from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.search.conditions import condition_key
from headprune.search.folds import Folds
from headprune.search.paired import compare
from headprune.search.parsimony import HeadContribution, HeadSet, contributions, drop_one
from headprune.search.rules.base import Ran, SelectionRule, ThroughFind, register
from headprune.search.stages import Evaluated, Stages, single_order

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


def choose_by_admission(stages: Stages, *, singles: str | None = None) -> tuple[list[HeadSet], Evaluated]:
    """The discovery side of the rule of 0.2 on ``stages`` (baseline in): its finalists, primary first, and every set
    evaluated. ``singles``: how single heads are ranked (:func:`headprune.search.stages.single_order`; ``"key"``:
    find's ranking key alone, as before 0.2)."""
    settings, rank = stages.settings, stages.search_rank
    stages.split_discovery()
    screened, _ = stages.screen()
    admission = Admission(stages, {}, "margin" if settings.rank_by == "margin" else "accuracy", settings.alpha,
                          tolerance(dtype_name(stages.lm.dtype)))
    ranked = sorted((head for head, _, _ in screened), key=lambda head: rank((head,)))
    nominees = ranked[: settings.nominees]
    subsets = [tuple(sorted(c)) for size in range(2, settings.max_heads + 1)
               for c in itertools.combinations(nominees, size)]
    evaluated = admission.evaluated
    evaluated.update({(head,): paired for head, paired, _ in screened if head in nominees})
    evaluated.update(stages.evaluate(subsets, "joint"))
    best = min([(h,) for h in nominees] + subsets, key=rank)
    for _ in range(settings.extend):  # grown from the first screen's best heads
        grown = [tuple(sorted((*best, h))) for h in ranked[: 2 * settings.nominees] if h not in best]
        if not grown:
            break
        evaluated.update(stages.evaluate(grown, "extend"))
        candidate = min(grown, key=rank)
        if not admission.adds(candidate, best, next(h for h in candidate if h not in best)):
            break
        best = candidate
    order = sorted(admission.evaluated, key=stages.search_rank)
    frozen, _ = admission.finalists(order, single_order(screened, stages.rank, singles or settings.rank_by),
                                    settings.finalists)
    return frozen, evaluated




class AdmissionRule(SelectionRule):
    """0.2's rule (``halves``: heads admitted on the check half) or 0.1.0's (on all of discovery, single heads by
    find's ranking key alone): the module docstring."""

    runs = True

    def __init__(self, name: str, journal: str, *, halves: bool) -> None:
        self.name, self.journal, self.halves = name, journal, halves

    def run(self, stages: Stages, through_find: ThroughFind) -> Ran:
        if not self.halves:  # propose and admit on the same examples
            stages.folds = Folds.same(stages.base["discovery"].n)
        frozen, evaluated = choose_by_admission(stages, singles=None if self.halves else "key")
        (finalist,) = stages.finalists([frozen[0]], evaluated)
        return Ran(frozen[0], finalist.heldout.confirmed)

    def section(self, result) -> list[str]:  # noqa: ANN001 (a FindResult)
        """The primary set head by head against the set without it on discovery's check half (the test that let it
        stay), and the same drop-one comparison on held-out, exploratory (measured after the verdict)."""
        primary, rule = result.finalists[0], result.parsimony
        if rule is None or not primary.contributions:
            return []
        measure = "answers" if rule.measure == "accuracy" else "margins (up / down beyond float tolerance)"
        against = "the intact model" if len(primary.heads) == 1 else "the set without it"
        where = ("the check half of discovery, which chose nothing" if rule.check is not None
                 else "discovery (the rule of files before 0.2)")
        short = "check-half" if rule.check is not None else "discovery"
        lines = ["## Each head of the primary set", "",
                 f"Each head against {against}, on {measure}, on {where} (n={rule.check or result.split.discovery}): "
                 f"b = better with the head removed, c = worse; p is the one-sided exact binomial test of b against c, "
                 f"Holm-adjusted over the set's heads. A head stays in a set only when b - c >= 1 and its adjusted p <= "
                 f"{rule.level:g} ({rule.examined} multi-head sets tested, {rule.dropped} lost a head or were refused, "
                 f"{rule.conditions} extra discovery conditions).", "",
                 f"| head | {short} b | {short} c | p | p (Holm) | held-out b (exploratory) | held-out c (exploratory) "
                 "| held-out p (exploratory) |", "|---|---|---|---|---|---|---|---|"]
        for c in primary.contributions:
            held = ("| n/a | n/a | n/a |" if c.heldout_rescued is None else
                    f"| {c.heldout_rescued} | {c.heldout_damaged} | {c.heldout_p:.3g} |")
            lines.append(f"| `{c.head}` | {c.rescued} | {c.damaged} | {c.p_value:.3g} | {c.adjusted_p:.3g} {held}")
        if len(primary.heads) > 1:
            lines += ["", "The held-out columns compare the primary set with the set without each head on held-out "
                      "data after the verdict; they are exploratory and were never used to choose anything."]
        return lines + [""]


ADMISSION = register(AdmissionRule("admission", "admission on the check half", halves=True))
SAME = register(AdmissionRule("same", "admission on discovery", halves=False))

__all__ = ["ADMISSION", "SAME", "Admission", "AdmissionRule", "choose_by_admission"]
