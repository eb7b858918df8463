"""The text guard's test: a one-sided bound for the mean of per-example changes with a long upper tail.

A text guard (``find --guard general``, mean token NLL) claims that the mean per-example NLL increase is below its
margin ``M``: it tests ``H0: mean >= M`` one-sided at ``alpha / 2`` and accepts when the upper end of the interval
lies below ``M``. Per-example changes are right-skewed (a few texts move a lot), and there a mean's t statistic has a
long lower tail: a sample that missed the large changes has both a low mean and a low spread, so the plain t test
accepts too often (3-12% at a stated 2.5% for gamma, lognormal and Pareto-tailed changes at n = 100-400).

**The test.** The paired t statistic ``T = sqrt(n) (mean - M) / spread`` through Hall's (1992, J R Stat Soc B
54:221) monotone cubic ``g(T) = T + a (1 + 2 T^2) + (4 a^2 / 3) T^3`` with ``a = w max(skew, 0) / (6 sqrt(n))``,
accepted when ``g(T)`` lies below the t quantile's negative: Hall's skewness correction with three changes that
make it conservative where it ran hot, measured by ``scripts/guard_size.py`` (the tables are in ``docs/find.md``):

- **one-sided**: the skewness counts only in the direction that threatens the bound (its upper end uses the positive
  part, its lower end the negative part). Hall's correction with the signed estimate accepted 2.5-3.8% for
  symmetric heavy tails (t with 3 degrees of freedom), where a chance negative sample skewness made the bound lower;
  the plain t test is conservative there, and so is this test.
- **weight** ``w = 2``: the sample skewness of a long-tailed sample is biased low, most in the samples that missed
  the tail, which are the ones a test wrongly accepts. Hall's correction (``w = 1``, headprune 0.3's test) accepted
  up to 3.2% for gamma changes and up to 6.3% for lognormal and Pareto-tailed ones at n = 100-3,000.
- **capped**: Hall's cubic serves small ``a``; for a large one its inverse, the critical value of ``T``, turns back
  (at a 2.5% level it falls to about -8.2 near ``a = 0.09``, then rises again to -3.8 at ``a = 1/3``, the most the
  bounded sample skewness allows), so a sample that looked more skewed would be judged more leniently. ``a`` is
  capped where the critical value is lowest (:func:`steepest`): the test never gets easier as the skewness grows.

Measured at the null's boundary, 20,000 draws a cell: no family exceeds 2.5% by more than the simulation's error
(0.11 points) at any n from 30 to 3,000 (gamma, lognormal up to skewness 13, Pareto tails of index 2.5-4, t with 3
degrees of freedom, normal, left-skewed). Pareto tails of index 2.5, whose third moment is infinite, come closest
at large n, as the correction fades: 2.34% at n = 3,000 and 2.47% at 10,000 (100,000 and 40,000 draws). What it
costs in power, beside 0.3's test: nothing for symmetric changes; for skewed ones (a gamma of skewness 2) 17 points
at n = 100 where the true change is 0.8 of the margin and the spread one margin, 3 points at 400.

**What no test of a mean can do.** A change carried by a few texts that the sample happens not to hold cannot be
seen: where 2% of texts move by ten spreads, a sample of 160 holds fewer than 4 of them in 60% of draws, and every
test of the mean from the sample (this one, Hall's, the plain t, a studentized bootstrap) accepts 3-16% at the
boundary until n reaches about 5 / share. Hence a text guard needs :data:`MIN_TEXTS` held-out texts (a harm carried
by 5% of texts is then seen), and ``general`` holds out 400 at the default ``--guard-limit`` (1.25%).

The two ends of :func:`mean_bounds` are mirror images (the lower end of a sample's bound is the upper end of its
negation's, negated), so each is a one-sided test at ``alpha / 2`` and the interval has level ``1 - alpha``.
"""

from __future__ import annotations

import math

import numpy as np

SKEW_WEIGHT = 2.0  # w: the weight of the sample skewness in Hall's correction (see the module docstring)
MIN_TEXTS = 100  # held-out examples a text guard's test needs (the rare-movers bound above)
NLL_TEST = ("one-sided paired t test of the mean per-example NLL change, corrected for the skewness of its long "
            "tail (Hall 1992, weight 2)")


def skewness(values: np.ndarray) -> float:
    """The sample skewness (third standardised moment, by the plug-in moments); 0 without spread."""
    values = np.asarray(values, dtype=np.float64)
    deviation = values - values.mean()
    scale = float(np.sqrt(np.mean(deviation**2)))
    return float(np.mean(deviation**3)) / scale**3 if scale > 0 else 0.0


def hall_inverse(y: np.ndarray | float, a: np.ndarray | float) -> np.ndarray:
    """The ``T`` with ``g(T) = y`` for Hall's cubic ``g(T) = T + a (1 + 2 T^2) + (4 a^2 / 3) T^3``, vectorised.

    ``g(T) = a + ((1 + 2 a T)^3 - 1) / (6 a)``, so the inverse is ``(cbrt(1 + 6 a (y - a)) - 1) / (2 a)``; near
    ``a = 0`` (where that form cancels) its first-order expansion ``y - a (1 + 2 y^2)``, exact to ``a^2``.
    """
    y, a = np.broadcast_arrays(np.asarray(y, dtype=np.float64), np.asarray(a, dtype=np.float64))
    small = np.abs(a) < 1e-7
    safe = np.where(small, 1.0, a)
    exact = (np.cbrt(1 + 6 * safe * (y - safe)) - 1) / (2 * safe)
    return np.where(small, y - a * (1 + 2 * y * y), exact)


def steepest(z: float) -> float:
    """The ``a`` at which Hall's critical value ``hall_inverse(-z, a)`` is lowest (golden-section search: it falls,
    then rises, over ``0 < a <= 1``)."""
    low, high = 1e-6, 1.0
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(80):
        left, right = high - ratio * (high - low), low + ratio * (high - low)
        if float(hall_inverse(-z, left)) < float(hall_inverse(-z, right)):
            high = right
        else:
            low = left
    return (low + high) / 2


def mean_bounds(mean: np.ndarray | float, spread: np.ndarray | float, skew: np.ndarray | float, n: int, *,
                alpha: float, weight: float = SKEW_WEIGHT) -> tuple[np.ndarray, np.ndarray]:
    """The ``1 - alpha`` interval of a mean from ``n`` values of standard deviation ``spread`` and sample skewness
    ``skew`` (vectorised over those three), each end a one-sided test at ``alpha / 2``: the means ``mu`` whose
    ``g(sqrt(n) (mean - mu) / spread)`` lies within the t quantiles, the upper end's ``a`` from the positive part of
    the skewness and the lower end's from the negative part, times ``weight``, at most :func:`steepest` in size (the
    module docstring says why)."""
    from headprune.search.effects import t_quantile  # effects reads evaluation (torch): records import this module

    mean, spread, skew = (np.asarray(x, dtype=np.float64) for x in (mean, spread, skew))
    z = t_quantile(1 - alpha / 2, max(n - 1, 1))
    root = math.sqrt(max(n, 1))
    step = np.maximum(spread, 0.0) / root
    cap = steepest(z)
    upper = mean - hall_inverse(-z, np.minimum(weight * np.maximum(skew, 0.0) / (6 * root), cap)) * step
    lower = mean - hall_inverse(z, np.maximum(weight * np.minimum(skew, 0.0) / (6 * root), -cap)) * step
    return lower, upper


def mean_interval(mean: float, spread: float, skew: float, n: int, *, alpha: float) -> tuple[float, float]:
    """:func:`mean_bounds` for one sample; ``(mean, mean)`` without spread."""
    low, high = mean_bounds(mean, spread, skew, n, alpha=alpha)
    return float(low), float(high)


__all__ = ["MIN_TEXTS", "NLL_TEST", "SKEW_WEIGHT", "hall_inverse", "mean_bounds", "mean_interval", "skewness",
           "steepest"]
