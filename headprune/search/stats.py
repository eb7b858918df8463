"""Honest statistics for paired before/after results: exact McNemar test, bootstrap CI, Holm's adjustment and
Tango's score test of non-inferiority."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

BOOTSTRAP_RESAMPLES = 10_000
CONTINUITY = 0.5  # examples: the half-count continuity correction of the score test (see tango_statistic)
NON_INFERIORITY_TEST = "Tango's score test for paired proportions (continuity-corrected)"


def upper_tail(b: int, n: int) -> float:
    """P(X >= b) for X ~ Binomial(n, 1/2), exact at any n: the shorter side of the distribution is summed in
    integers, then divided once (``int / int`` is correctly rounded and never overflows, as ``2.0**n`` does from
    n = 1,024). 100,000 pairs take about half a second."""
    if b <= 0:
        return 1.0
    if b > n:
        return 0.0
    short = min(b - 1, n - b)  # sum C(n, 0..short): the lower tail below b, or by symmetry the upper tail from b
    term = total = 1  # C(n, 0)
    for k in range(short):  # C(n, k+1) = C(n, k) (n - k) / (k + 1), exact in integers
        term = term * (n - k) // (k + 1)
        total += term
    return (total if 2 * b > n else (1 << n) - total) / (1 << n)


def mcnemar_exact(rescued: int, damaged: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of the discordant pairs against 1/2.

    Computed in integers (the tail's binomial coefficients summed exactly, then one correctly rounded
    division by ``2**discordant``), so it is exact at any size: a float ``2.0**discordant`` overflows from 1,024
    discordant pairs. 100,000 discordant pairs take about half a second.
    """
    discordant = rescued + damaged
    if discordant == 0:
        return 1.0
    return min(1.0, 2 * upper_tail(max(rescued, damaged), discordant))  # the tails are symmetric


def paired_bootstrap_ci(
    before: np.ndarray, after: np.ndarray, *, seed: int, level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float]:
    """Percentile CI of ``mean(after - before)``, resampling examples (pairs kept together)."""
    diff = np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    for start in range(0, resamples, 1000):  # chunks keep memory flat for large n
        stop = min(start + 1000, resamples)
        idx = rng.integers(0, len(diff), size=(stop - start, len(diff)))
        means[start:stop] = diff[idx].mean(axis=1)
    tail = (1.0 - level) / 2.0
    return float(np.quantile(means, tail)), float(np.quantile(means, 1.0 - tail))


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


@dataclass(frozen=True)
class Verdict:
    """The held-out test of one head set: paired accuracy change, its bootstrap CI and exact McNemar p.

    Only the primary set (discovery rank 1, fixed before held-out data was seen) can be ``confirmed``: it is
    tested alone at ``alpha``. Every other finalist is ``exploratory``: anyone choosing among finalists after
    seeing their held-out numbers makes several comparisons, so those carry Holm-adjusted p-values over the
    finalists (``adjusted_p``) and are never called confirmed.
    """

    n: int
    accuracy_before: float
    accuracy_after: float
    rescued: int
    damaged: int
    ci95: tuple[float, float]
    p_value: float
    alpha: float
    role: str = "primary"  # "primary" or "exploratory"
    adjusted_p: float | None = None  # exploratory: Holm-adjusted over the finalists

    _derived = ("difference", "confirmed")

    @property
    def difference(self) -> float:
        return self.accuracy_after - self.accuracy_before

    @property
    def confirmed(self) -> bool:
        return self.role == "primary" and self.rescued > self.damaged and self.p_value < self.alpha


def verdict(before: np.ndarray, after: np.ndarray, *, alpha: float, seed: int) -> Verdict:
    """Paired verdict from per-example correctness before and after (bool arrays)."""
    before, after = np.asarray(before, dtype=bool), np.asarray(after, dtype=bool)
    rescued, damaged = int((~before & after).sum()), int((before & ~after).sum())
    ci95 = paired_bootstrap_ci(before, after, seed=seed)
    return Verdict(len(before), float(before.mean()), float(after.mean()), rescued, damaged, ci95,
                   mcnemar_exact(rescued, damaged), alpha)


def tango_statistic(rescued: np.ndarray | int, damaged: np.ndarray | int, n: np.ndarray | int,
                    delta: float) -> np.ndarray:
    """Tango's score statistic for ``H0: p_after - p_before = delta`` from paired correctness, vectorised.

    With ``b`` rescued (wrong before, right after) and ``c`` damaged of ``n`` pairs, the statistic is
    ``(b - c - n delta) / sqrt(n (2 q + delta (1 - delta)))`` where ``q`` is the maximum-likelihood
    probability of a damaged pair under ``H0`` (Tango 1998, Stat Med 17:891, eq. 3-4; the root of
    ``2n q^2 + W q - c delta (1 - delta) = 0`` with ``W = -b - c + (2n - b + c) delta``). It only ever sees the
    discordant counts, as McNemar's test does (at ``delta = 0``, uncorrected, it is McNemar's statistic).

    The numerator is moved half a count towards zero (a continuity correction, as Yates's for McNemar's test),
    because the uncorrected test exceeds its level on few discordant pairs: computed exactly by enumerating
    every (b, c), its one-sided size at the non-inferiority boundary reaches 2.98% at a nominal 2.5% (n = 50,
    margin 0.5 points) and 1.38 times the level at n = 20. Corrected, the exact size stays at or below the level
    over n = 10..700, margins 0.5..20 points, one-sided levels 0.5%, 2.5% and 5%, and discordant rates up to
    90% (above that, where nearly every answer flips, it can exceed it: up to 1.3 times at n = 20);
    ``tests/test_stats.py`` simulates the grid that matters here. The cost in power at a true difference of 0:
    0.42 -> 0.30 at n = 1,000 in the hardest cell (margin 0.5 points, 0.5% discordant), at most about 0.05
    where the uncorrected power exceeds 0.5.
    """
    b, c, n = (np.asarray(x, dtype=np.float64) for x in (rescued, damaged, n))
    w = -b - c + (2 * n - b + c) * delta
    q = (np.sqrt(np.maximum(w * w + 8 * n * c * delta * (1 - delta), 0.0)) - w) / (4 * n)
    variance = n * (2 * q + delta * (1 - delta))
    excess = b - c - n * delta
    excess = np.sign(excess) * np.maximum(np.abs(excess) - CONTINUITY, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = excess / np.sqrt(variance)
    signed = np.where(excess > 0, np.inf, np.where(excess < 0, -np.inf, 0.0))  # no variance: only the sign speaks
    return np.where(variance > 0, z, signed)


def one_sided_z(alpha: float) -> float:
    """The normal quantile of a one-sided test at ``alpha / 2`` (the half of a two-sided ``alpha``)."""
    return NormalDist().inv_cdf(1 - alpha / 2)


def non_inferior(rescued: np.ndarray | int, damaged: np.ndarray | int, n: np.ndarray | int, *, margin: float,
                 alpha: float) -> np.ndarray:
    """Reject ``H0: p_after - p_before <= -margin`` by Tango's score test at one-sided ``alpha / 2``
    (vectorised over the counts: the size simulation calls it on thousands of draws at once)."""
    return tango_statistic(rescued, damaged, n, -margin) > one_sided_z(alpha)


def score_interval(rescued: int, damaged: int, n: int, *, alpha: float) -> tuple[float, float]:
    """Tango's score interval of ``p_after - p_before`` at confidence ``1 - alpha``: the differences the
    two one-sided score tests at ``alpha / 2`` do not reject, found by bisection (the statistic falls as
    ``delta`` grows). Its lower end lies above ``-margin`` exactly when :func:`non_inferior` accepts."""
    if n <= 0:
        return (-1.0, 1.0)
    z, centre = one_sided_z(alpha), (rescued - damaged) / n

    def bound(lo: float, hi: float, outside_at_lo: bool) -> float:
        for _ in range(60):  # 2**-60 of the range: far below any printed digit
            mid = (lo + hi) / 2
            stat = float(tango_statistic(rescued, damaged, n, mid))
            outside = stat > z if outside_at_lo else stat < -z
            lo, hi = (mid, hi) if outside == outside_at_lo else (lo, mid)
        return (lo + hi) / 2

    return bound(-1.0, centre, True), bound(centre, 1.0, False)


@dataclass(frozen=True)
class NonInferiority:
    """The held-out test of a compression: is accuracy after removal not worse than before by more than
    ``margin``?

    The test: Tango's score test for the difference of paired proportions (Tango 1998, Stat Med 17:891), with
    a half-count continuity correction (:func:`tango_statistic` says why), of ``H0: p_after - p_before <=
    -margin`` at one-sided ``alpha / 2``; equivalently, the set is ``accepted`` when the lower end of Tango's
    ``1 - alpha`` score interval (``interval``) lies above ``-margin``. A percentile bootstrap, the test of
    earlier versions, is far more lenient than its stated 2.5% with few discordant pairs (the normal case for
    harmless heads): with none it accepts at any n, and at n = 300 it accepted about 22% of sets whose true
    drop was exactly 0.5 points. The score test uses the counts alone and reaches its level only where the
    data can: with no discordant pair of 10 examples its 95% interval is [-34%, +34%]; of 1,000, [-0.48%, +0.48%].
    A statistician's alternatives were an exact unconditional test (costly at n in the thousands) or a
    conditional exact bound (which cannot test a non-zero difference: the discordant split then depends on a
    nuisance rate). Tango's is the standard score interval for this difference, evaluated against the others by
    Agresti & Min (2005, Stat Med 24:729) and Fagerland, Lydersen & Laake (2014, Stat Med 33:2850); the
    continuity correction removes the small excess over the level it shows on few pairs.

    ``margin`` is a fraction (0.005 = 0.5 accuracy points). An empty set removes nothing and is never accepted.
    ``ci95`` is the 95% score interval (the test's interval when ``alpha`` is 0.05; result files written before
    this test hold a percentile bootstrap interval there). ``interval`` and ``accepted`` are recomputed from
    the counts, so an older file is judged by this test when it is read.
    """

    n: int
    accuracy_before: float
    accuracy_after: float
    rescued: int
    damaged: int
    ci95: tuple[float, float]
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
    n = len(before)
    return NonInferiority(n, float(before.mean()), float(after.mean()), rescued, damaged,
                          score_interval(rescued, damaged, n, alpha=0.05), margin, removed, alpha)
