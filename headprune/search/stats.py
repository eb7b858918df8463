"""Honest statistics for paired before/after results: the held-out verdicts (exact McNemar for an improvement,
Tango's score test for non-inferiority), their intervals, and the adjustments for several comparisons.

The tests and intervals themselves live in :mod:`headprune.search.binomial` (exact binomial tails) and
:mod:`headprune.search.score` (score tests and intervals); this module holds the verdict records built on them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headprune.search.binomial import mcnemar_exact
from headprune.search.score import NON_INFERIORITY_TEST, non_inferior, paired_interval, score_interval

IMPROVEMENT_TEST = "exact McNemar test (two-sided binomial test of rescued against damaged)"


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (average ranks for ties); NaN when either side is constant."""
    def ranks(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x), dtype=np.float64)
        for value in np.unique(x):  # average the ranks of ties
            tied = x == value
            r[tied] = r[tied].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control), in the input order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def test_size(alpha: float, share: float) -> float:
    """``alpha * share``, rounded to 12 digits (``0.05 * 0.9`` is 0.045, not 0.045000000000000005), the one value
    a test's p-value is compared with wherever it is computed."""
    return round(alpha * share, 12)


@dataclass(frozen=True)
class Gate:
    """Files of schema 3: the proposed set's own held-out test, which a set cut down from it had to pass as well
    (its heads, rescued, damaged and the exact McNemar p). find no longer writes it: a cut-down set is tested at its
    own part of alpha (``headprune.search.rules.parts``)."""

    heads: tuple[str, ...]
    rescued: int
    damaged: int
    p_value: float

    def passes(self, level: float) -> bool:
        return self.rescued > self.damaged and self.p_value < level


@dataclass(frozen=True)
class Step:
    """One increment of the proposal's fixed sequence (``headprune.search.sequence``): the prefix P_j against
    P_(j-1) (the intact model for j = 1), b and c counted on the check half and held-out, the one-sided exact sign
    test's p, and the level it was tested at; it rejects when ``b > c`` and ``p <= level``."""

    prefix: tuple[str, ...]
    added: str
    check_rescued: int
    check_damaged: int
    heldout_rescued: int
    heldout_damaged: int
    p_value: float
    level: float

    _derived = ("rescued", "damaged", "rejected")

    @property
    def rescued(self) -> int:
        return self.check_rescued + self.heldout_rescued

    @property
    def damaged(self) -> int:
        return self.check_damaged + self.heldout_damaged

    @property
    def rejected(self) -> bool:
        return self.rescued > self.damaged and self.p_value <= self.level


@dataclass(frozen=True)
class Verdict:
    """The held-out test of one head set: the paired accuracy change, the exact McNemar test and its interval.

    Only the primary set (fixed on discovery before held-out data was seen) can be ``confirmed``: it is tested
    alone at ``alpha`` (``family`` 1). Every other finalist is ``exploratory``: choosing among finalists after
    seeing their held-out numbers makes several comparisons, so each of those is one of a ``family`` of
    ``F`` finalists, Bonferroni-adjusted (``adjusted_p`` = F times its p, capped at 1) with a simultaneous
    interval at ``1 - alpha / F``, and is never called confirmed. Bonferroni rather than Holm so that each
    interval agrees with its own adjusted verdict: Holm's step-down has no interval that does.

    The primary set is one of at most two held-out tests fixed on discovery (``headprune.search.rules``): it is
    tested at ``alpha * share`` (``share`` 1 in files before the rule of two tests, and where only one candidate
    was tested; for the proposal's kept set, its branch's share times the set's part). In files of schema 3, a set
    cut down from the proposed one also had to pass the proposal's own test (``gate``).

    ``selected``: the set was cut down from the proposal by the membership tests, which read held-out. Its test
    is exact all the same (``share`` is its Bonferroni part among the subsets held-out could have kept, each fixed on
    discovery), and so is its interval (simultaneous over those subsets); but its point estimate reads the examples
    that chose it, so it runs high and is shown as exploratory.

    ``steps``: a set of several heads shipped by the steps of a selection rule (``rule``, ``headprune.search.rules``;
    files of schema 5: the proposal's fixed sequence): its claim is the rule's, confirmed exactly when every step
    rejected (each head adds to the heads before it), not the set's own McNemar test, which is shown beside it; its
    interval is simultaneous over the sets the rule could have shipped (``family``).

    ``interval`` is :func:`headprune.search.score.paired_interval` at ``alpha * share / family``: without
    ``steps``, it lies above 0 exactly when the set's own test rejects (or, for an exploratory set, it is significant after adjustment),
    contains 0 exactly when the test does not reject, and is recomputed from the counts, so a result file written
    with the percentile bootstrap interval of earlier versions is shown with this one when it is read.
    """

    n: int
    accuracy_before: float
    accuracy_after: float
    rescued: int
    damaged: int
    p_value: float
    alpha: float
    role: str = "primary"  # "primary" or "exploratory"
    adjusted_p: float | None = None  # exploratory: adjusted over the finalists (Holm in files before 0.2)
    family: int = 1  # comparisons the interval and adjusted_p account for (exploratory: the finalists)
    share: float = 1.0  # of alpha, for the primary set's test (headprune.search.rules)
    gate: Gate | None = None  # files of 0.3's first rule: the proposal's own test, which a cut-down set passed too
    selected: bool = False  # a set cut down from the proposal by held-out tests: its estimate is exploratory
    steps: tuple[Step, ...] = ()  # schema 5: the fixed sequence whose rejections are the claim (none: own test)
    rule: str = ""  # schema 6, with steps: the selection rule they are the tests of (schema 5 files: the sequence)

    _derived = ("difference", "confirmed", "test", "level", "interval")

    @property
    def difference(self) -> float:
        return self.accuracy_after - self.accuracy_before

    @property
    def size(self) -> float:
        """The level the set's own test is run at: ``alpha * share``."""
        return test_size(self.alpha, self.share)

    @property
    def confirmed(self) -> bool:
        if self.steps:  # the sequence's claim: every increment up to this set rejected
            return self.role == "primary" and all(step.rejected for step in self.steps)
        return (self.role == "primary" and self.rescued > self.damaged and self.p_value < self.size
                and (self.gate is None or self.gate.passes(self.size)))

    @property
    def test(self) -> str:
        return IMPROVEMENT_TEST

    @property
    def level(self) -> float:
        """The confidence level of ``interval``."""
        return 1 - self.size / self.family

    @property
    def interval(self) -> tuple[float, float]:
        return paired_interval(self.rescued, self.damaged, self.n, alpha=self.size / self.family)


def verdict(before: np.ndarray, after: np.ndarray, *, alpha: float) -> Verdict:
    """Paired verdict from per-example correctness before and after (bool arrays)."""
    before, after = np.asarray(before, dtype=bool), np.asarray(after, dtype=bool)
    rescued, damaged = int((~before & after).sum()), int((before & ~after).sum())
    return Verdict(len(before), float(before.mean()), float(after.mean()), rescued, damaged,
                   mcnemar_exact(rescued, damaged), alpha)


def exploratory(test: Verdict, family: int) -> Verdict:
    """``test`` as one of ``family`` exploratory comparisons (Bonferroni: p and interval adjusted)."""
    return Verdict(test.n, test.accuracy_before, test.accuracy_after, test.rescued, test.damaged, test.p_value,
                   test.alpha, "exploratory", min(1.0, family * test.p_value), family)


@dataclass(frozen=True)
class NonInferiority:
    """The held-out test of a compression: is accuracy after removal not worse than before by more than
    ``margin``?

    The test: Tango's score test for the difference of paired proportions (Tango 1998, Stat Med 17:891), with
    a half-count continuity correction (:func:`headprune.search.score.tango_statistic` says why), of
    ``H0: p_after - p_before <= -margin`` at one-sided ``alpha / 2``; equivalently, the set is ``accepted``
    when the lower end of Tango's ``1 - alpha`` score interval (``interval``) lies above ``-margin``. A
    percentile bootstrap, the test of earlier versions, is far more lenient than its stated 2.5% with few
    discordant pairs (the normal case for harmless heads): with none it accepts at any n, and at n = 300 it
    accepted about 22% of sets whose true drop was exactly 0.5 points. The score test uses the counts alone and
    reaches its level only where the data can: with no discordant pair of 10 examples its 95% interval is
    [-34%, +34%]; of 1,000, [-0.48%, +0.48%]. A statistician's alternatives were an exact unconditional test
    (costly at n in the thousands) or a conditional exact bound (which cannot test a non-zero difference: the
    discordant split then depends on a nuisance rate). Tango's is the standard score interval for this
    difference, evaluated against the others by Agresti & Min (2005, Stat Med 24:729) and Fagerland, Lydersen
    & Laake (2014, Stat Med 33:2850); the continuity correction removes the small excess over the level it
    shows on few pairs.

    ``margin`` is a fraction (0.005 = 0.5 accuracy points). An empty set removes nothing and is never accepted.
    ``interval`` and ``accepted`` are recomputed from the counts, so an older file is judged by this test when
    it is read (files written before 0.2 also hold a ``ci95``, ignored).
    """

    n: int
    accuracy_before: float
    accuracy_after: float
    rescued: int
    damaged: int
    margin: float
    removed: int  # heads in the set tested
    alpha: float = 0.05  # two-sided: the test is one-sided at alpha / 2, the interval at 1 - alpha

    _derived = ("difference", "test", "level", "interval", "accepted")

    @property
    def difference(self) -> float:
        return self.accuracy_after - self.accuracy_before

    @property
    def test(self) -> str:
        return NON_INFERIORITY_TEST

    @property
    def level(self) -> float:
        """The confidence level of ``interval`` (1 - alpha)."""
        return 1 - self.alpha

    @property
    def interval(self) -> tuple[float, float]:
        return score_interval(self.rescued, self.damaged, self.n, alpha=self.alpha)

    @property
    def accepted(self) -> bool:
        return self.removed > 0 and bool(non_inferior(self.rescued, self.damaged, self.n, margin=self.margin,
                                                      alpha=self.alpha))


def non_inferiority(before: np.ndarray, after: np.ndarray, *, margin: float, removed: int,
                    alpha: float = 0.05) -> NonInferiority:
    """Non-inferiority verdict from per-example correctness before and after (bool arrays)."""
    before, after = np.asarray(before, dtype=bool), np.asarray(after, dtype=bool)
    rescued, damaged = int((~before & after).sum()), int((before & ~after).sum())
    return NonInferiority(len(before), float(before.mean()), float(after.mean()), rescued, damaged, margin,
                          removed, alpha)


__all__ = ["IMPROVEMENT_TEST", "Gate", "NonInferiority", "Step", "Verdict", "exploratory", "holm",
           "non_inferiority", "spearman", "test_size", "verdict"]
