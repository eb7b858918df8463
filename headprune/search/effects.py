"""What a head set does to a control task: the change, its interval, and how several controls are adjusted.

``find --control TASK`` (repeatable) measures every finalist on second tasks: removing heads that help one
capability often hurts another. Each control of a finalist is one of ``family`` comparisons (the number of
controls), so its interval is simultaneous by Bonferroni: at ``1 - alpha / family``, with the p-value
multiplied by ``family``. The interval is the one that goes with the test:

- an accuracy control: the exact McNemar test of its rescued against damaged answers, with
  :func:`headprune.search.score.paired_interval` (Tango's score interval, agreeing with the exact test), so
  the interval excludes 0 exactly when the adjusted test says the control moved; never of zero width, even
  when no answer changed;
- a text control (mean negative log-likelihood, no answers): the paired t interval of the mean change per
  example (its spread is stored with it), a normal-theory interval: the change in NLL is a mean of many
  continuous per-example changes, the case it was made for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from headprune.evaluation.results import EvalResult
from headprune.search.binomial import mcnemar_exact
from headprune.search.paired import compare
from headprune.search.score import paired_interval


def t_quantile(probability: float, freedom: int) -> float:
    """Student's t quantile by the Cornish-Fisher expansion in ``1 / freedom`` (Abramowitz & Stegun 26.7.5):
    within 1e-4 of the exact value from 10 degrees of freedom (it is used with tens to thousands)."""
    z = NormalDist().inv_cdf(probability)
    if freedom <= 0:
        return math.inf
    v = float(freedom)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / v + g2 / v**2 + g3 / v**3 + g4 / v**4


@dataclass(frozen=True)
class ControlEffect:
    """How a head set moves a control task: accuracy (or mean NLL) before and after, and the interval of the
    change at ``level`` (simultaneous over the ``family`` controls of the finalist).

    ``rescued``/``damaged`` (accuracy) or ``spread`` (NLL: the standard deviation of the per-example change)
    are what the interval is computed from; ``ci95`` is only in files written before 0.2 (a percentile
    bootstrap interval), which show it when they lack the counts or the spread."""

    task: str
    metric: str  # "accuracy" or "mean_nll"
    n: int
    before: float
    after: float
    rescued: int | None = None
    damaged: int | None = None
    spread: float | None = None  # mean_nll: standard deviation of the per-example change
    alpha: float = 0.05
    family: int = 1  # controls adjusted together (Bonferroni)
    ci95: tuple[float, float] | None = None  # files before 0.2 only

    _derived = ("difference", "level", "interval", "p_value", "adjusted_p")

    @property
    def difference(self) -> float:
        return self.after - self.before

    @property
    def level(self) -> float:
        return 1 - self.alpha / self.family

    @property
    def p_value(self) -> float | None:
        """The exact McNemar p-value of an accuracy control (None for a text control)."""
        if self.metric != "accuracy" or self.rescued is None or self.damaged is None:
            return None
        return mcnemar_exact(self.rescued, self.damaged)

    @property
    def adjusted_p(self) -> float | None:
        p = self.p_value
        return None if p is None else min(1.0, self.family * p)

    @property
    def interval(self) -> tuple[float, float]:
        alpha = self.alpha / self.family
        if self.metric == "accuracy" and self.rescued is not None and self.damaged is not None:
            return paired_interval(self.rescued, self.damaged, self.n, alpha=alpha)
        if self.spread is not None and self.n > 1:
            half = t_quantile(1 - alpha / 2, self.n - 1) * self.spread / math.sqrt(self.n)
            return self.difference - half, self.difference + half
        return self.ci95 if self.ci95 is not None else (-math.inf, math.inf)

    @classmethod
    def measure(cls, baseline: EvalResult, after: EvalResult, *, alpha: float, family: int) -> ControlEffect:
        """Accuracy (or mean NLL for a text task) before and after, as one of ``family`` controls."""
        if not baseline.has_accuracy:
            change = -(after.margins - baseline.margins)  # per-example change of the NLL
            spread = float(np.std(change, ddof=1)) if baseline.n > 1 else 0.0
            return cls(baseline.task, "mean_nll", baseline.n, baseline.mean_nll, after.mean_nll, spread=spread,
                       alpha=alpha, family=family)
        paired = compare(baseline, after)
        return cls(baseline.task, "accuracy", paired.n, paired.accuracy_before, paired.accuracy_after,
                   paired.rescued, paired.damaged, alpha=alpha, family=family)


__all__ = ["ControlEffect", "t_quantile"]
