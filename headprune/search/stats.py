"""Honest statistics for paired before/after results: bootstrap CI and exact McNemar test."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_RESAMPLES = 10_000


def mcnemar_exact(rescued: int, damaged: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of the discordant pairs against 1/2."""
    discordant = rescued + damaged
    if discordant == 0:
        return 1.0
    low = min(rescued, damaged)
    tail = sum(math.comb(discordant, k) for k in range(low + 1)) / 2.0**discordant
    return min(1.0, 2.0 * tail)


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


@dataclass(frozen=True)
class NonInferiority:
    """The held-out test of a compression: is accuracy after removal not worse than before by more than
    ``margin``?

    The test: the percentile bootstrap 95% CI (``BOOTSTRAP_RESAMPLES`` resamples of the held-out examples,
    pairs kept together) of ``mean(correct_after - correct_before)``; the set is ``accepted`` when the lower
    end of that interval lies above ``-margin`` (a one-sided test at 2.5%). ``margin`` is a fraction
    (0.005 = 0.5 accuracy points). An empty set removes nothing and is never accepted.
    """

    n: int
    accuracy_before: float
    accuracy_after: float
    rescued: int
    damaged: int
    ci95: tuple[float, float]
    margin: float
    removed: int  # heads in the set tested

    _derived = ("difference", "accepted")

    @property
    def difference(self) -> float:
        return self.accuracy_after - self.accuracy_before

    @property
    def accepted(self) -> bool:
        return self.removed > 0 and self.ci95[0] > -self.margin


def non_inferiority(before: np.ndarray, after: np.ndarray, *, margin: float, removed: int,
                    seed: int) -> NonInferiority:
    """Non-inferiority verdict from per-example correctness before and after (bool arrays)."""
    before, after = np.asarray(before, dtype=bool), np.asarray(after, dtype=bool)
    rescued, damaged = int((~before & after).sum()), int((before & ~after).sum())
    ci95 = paired_bootstrap_ci(before, after, seed=seed)
    return NonInferiority(len(before), float(before.mean()), float(after.mean()), rescued, damaged, ci95, margin,
                          removed)
