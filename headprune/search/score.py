"""Score tests and intervals for the difference of paired proportions, and the interval printed beside a verdict.

Every held-out number headprune reports is a paired change of accuracy, ``p_after - p_before``, seen through
the counts of rescued (``b``: wrong before, right after) and damaged (``c``) examples of ``n``. Two tests use
them: the exact McNemar test of "no change" (the improve verdict, :func:`headprune.search.stats.mcnemar_exact`)
and Tango's score test of "the change is ``delta``" (the compress verdict, any ``delta``). This module holds the
second, its interval, and :func:`paired_interval`, the interval that goes with the first.

Why one interval per test. An interval printed beside a verdict is read as the verdict's evidence; if it comes
from another method, the two can disagree (a percentile bootstrap beside McNemar read "[+0.3%, +2.7%]" beside
"not confirmed" for 4 rescued and 0 damaged of 300), and a bootstrap of rare changes under-covers (77% at
n = 300 with 0.5% damage) and has zero width when nothing changed. Tango's score interval covers at its level
where changes are rare and is never of zero width from finite data; :func:`paired_interval` widens it just
enough to agree with the exact test.
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from headprune.search.binomial import upper_tail

CONTINUITY = 0.5  # examples: the half-count continuity correction of the score test (see tango_statistic)
NON_INFERIORITY_TEST = "Tango's score test for paired proportions (continuity-corrected)"
INTERVAL_NAME = "Tango score interval, agreeing with the exact McNemar test"
_BISECTIONS = 60  # 2**-60 of the range: far below any printed digit


def tango_statistic(rescued: np.ndarray | int, damaged: np.ndarray | int, n: np.ndarray | int,
                    delta: np.ndarray | float) -> np.ndarray:
    """Tango's score statistic for ``H0: p_after - p_before = delta`` from paired correctness, vectorised.

    With ``b`` rescued and ``c`` damaged of ``n`` pairs, the statistic is
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
    ``tests/test_stats.py`` checks the grid that matters here. The cost in power at a true difference of 0:
    0.42 -> 0.30 at n = 1,000 in the hardest cell (margin 0.5 points, 0.5% discordant), at most about 0.05
    where the uncorrected power exceeds 0.5.
    """
    b, c, n, delta = (np.asarray(x, dtype=np.float64) for x in (rescued, damaged, n, delta))
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


def score_intervals(rescued: np.ndarray | int, damaged: np.ndarray | int, n: np.ndarray | int, *,
                    alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Tango's score interval of ``p_after - p_before`` at confidence ``1 - alpha``, vectorised: the differences
    the two one-sided score tests at ``alpha / 2`` do not reject, found by bisection (the statistic falls as
    ``delta`` grows). Its lower end lies above ``-margin`` exactly when :func:`non_inferior` accepts."""
    b, c, n = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (rescued, damaged, n)))
    z = one_sided_z(alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        centre = np.where(n > 0, (b - c) / np.maximum(n, 1), 0.0)

    def bound(lo: np.ndarray, hi: np.ndarray, lower: bool) -> np.ndarray:
        for _ in range(_BISECTIONS):
            mid = (lo + hi) / 2
            stat = tango_statistic(b, c, np.maximum(n, 1), mid)
            outside = stat > z if lower else stat < -z  # rejected: the bound lies beyond mid
            lo, hi = (np.where(outside, mid, lo), np.where(outside, hi, mid)) if lower else \
                (np.where(outside, lo, mid), np.where(outside, mid, hi))
        return (lo + hi) / 2

    low = bound(np.full(b.shape, -1.0), centre.copy(), True)
    high = bound(centre.copy(), np.full(b.shape, 1.0), False)
    empty = n <= 0
    return np.where(empty, -1.0, low), np.where(empty, 1.0, high)


def score_interval(rescued: int, damaged: int, n: int, *, alpha: float) -> tuple[float, float]:
    """:func:`score_intervals` for one set of counts."""
    low, high = score_intervals(rescued, damaged, n, alpha=alpha)
    return float(low), float(high)


def mcnemar_critical(discordant: int, alpha: float) -> int:
    """The smallest ``max(b, c)`` of ``discordant`` pairs that the two-sided exact McNemar test rejects at
    ``alpha`` (``discordant + 1`` when no split is rejected): the test's rejection region in one number."""
    low, high = discordant // 2 + 1, discordant + 1  # a split b = c (or one off) is never rejected
    while low < high:  # the p-value falls as max(b, c) grows
        mid = (low + high) // 2
        low, high = (low, mid) if 2 * upper_tail(mid, discordant) < alpha else (mid + 1, high)
    return low


def paired_intervals(rescued: np.ndarray | int, damaged: np.ndarray | int, n: np.ndarray | int, *,
                     alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The ``1 - alpha`` interval of ``p_after - p_before`` printed beside an exact McNemar verdict at ``alpha``
    (vectorised; :func:`paired_interval` for one set of counts).

    It is Tango's score interval, widened to reach 0 when the exact test does not reject: so it excludes 0
    exactly when the test rejects, and lies above 0 exactly when an improvement is confirmed (the two-sided test
    at ``alpha`` is one-sided at ``alpha / 2`` in each direction, as each end of the interval is). When the exact
    test rejects, the score interval already excludes 0: at ``delta = 0`` the continuity-corrected score
    statistic is ``(|b - c| - 1/2) / sqrt(b + c)``, the exact test's normal approximation with half its
    continuity correction, so it rejects wherever the exact test does (checked at every count of up to 3,000
    discordant pairs and a sample up to 10**6, at alpha 0.01, 0.05 and 0.1, in tests/test_intervals.py; the
    slack grows with the count). Widening only adds differences, so its coverage is at least the score
    interval's: computed exactly in tests/test_intervals.py, at least 95% for a 95% interval over n 50-5,000,
    discordant rates 0-30% and every direction of change.
    """
    b, c = np.broadcast_arrays(np.asarray(rescued, dtype=np.int64), np.asarray(damaged, dtype=np.int64))
    low, high = score_intervals(b, c, n, alpha=alpha)
    total, larger = b + c, np.maximum(b, c)
    critical = {int(d): mcnemar_critical(int(d), alpha) for d in np.unique(total)}
    rejected = (larger >= np.vectorize(critical.__getitem__, otypes=[np.int64])(total)) & (b != c) & (total > 0)
    return np.where(rejected, low, np.minimum(low, 0.0)), np.where(rejected, high, np.maximum(high, 0.0))


def paired_interval(rescued: int, damaged: int, n: int, *, alpha: float) -> tuple[float, float]:
    """:func:`paired_intervals` for one set of counts."""
    low, high = paired_intervals(rescued, damaged, n, alpha=alpha)
    return float(low), float(high)


__all__ = ["CONTINUITY", "INTERVAL_NAME", "NON_INFERIORITY_TEST", "mcnemar_critical", "non_inferior",
           "one_sided_z", "paired_interval", "paired_intervals", "score_interval", "score_intervals", "tango_statistic"]
