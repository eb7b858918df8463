"""The intervals printed beside the verdicts: they agree with their tests, and they cover.

- Agreement: an improve verdict's interval (:func:`headprune.search.score.paired_interval`) excludes 0 exactly
  when the exact McNemar test rejects at the same alpha, and lies above 0 exactly when a gain is confirmed;
  exploratory finalists and controls keep that agreement after their Bonferroni adjustment.
- Coverage, computed exactly (every outcome of the paired counts enumerated with its probability, no Monte-Carlo
  error): at least 94.5% for a 95% interval over n 50-5,000, discordant rates 0-30% and every direction of
  change, including data where nothing changed, which never gives an interval of zero width.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from headprune.search.binomial import mcnemar_exact, upper_tail
from headprune.search.effects import ControlEffect
from headprune.search.score import mcnemar_critical, one_sided_z, paired_interval, paired_intervals
from headprune.search.stats import exploratory, verdict

ALPHA = 0.05


@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.1])
def test_the_interval_excludes_zero_exactly_when_the_exact_test_rejects(alpha: float) -> None:
    for n in (30, 300, 3_000):
        b, c = (x.ravel() for x in np.meshgrid(np.arange(80), np.arange(80), indexing="ij"))
        b, c = b[b + c <= min(n, 80)], c[b + c <= min(n, 80)]
        lows, highs = paired_intervals(b, c, n, alpha=alpha)
        for x, y, low, high in zip(b.tolist(), c.tolist(), lows.tolist(), highs.tolist()):
            rejected = mcnemar_exact(x, y) < alpha
            assert (low > 0 or high < 0) == rejected, (x, y, n)
            assert (low > 0) == (rejected and x > y), (x, y, n)
            assert high - low > 0 and low <= (x - y) / n <= high
        for x, y in ((0, 0), (4, 0), (6, 0), (12, 3), (15, 14)):  # the one-set form is the same interval
            assert paired_interval(x, y, n, alpha=alpha) == (lows[(b == x) & (c == y)][0], highs[(b == x) & (c == y)][0])


def test_where_the_exact_test_rejects_the_score_interval_already_excludes_zero() -> None:
    """So widening to 0 is the only change paired_interval makes to Tango's interval: at the exact test's
    critical count for every number of discordant pairs up to 3,000 (and a sample up to 10**6), the
    continuity-corrected score statistic at 0 already rejects, with room to spare."""
    rng = np.random.default_rng(0)
    counts = list(range(1, 3_001)) + sorted(int(x) for x in rng.integers(3_001, 1_000_000, size=40))
    for alpha in (0.01, 0.05, 0.1):
        z = one_sided_z(alpha)
        for discordant in counts:
            b = mcnemar_critical(discordant, alpha)
            if b > discordant:
                continue  # too few pairs for the exact test to reject at all
            assert 2 * upper_tail(b, discordant) < alpha <= 2 * upper_tail(b - 1, discordant) or b - 1 <= \
                discordant // 2
            assert (2 * b - discordant - 0.5) / math.sqrt(discordant) > z, (alpha, discordant)


def test_a_bootstrap_style_contradiction_cannot_happen() -> None:
    """The issue's case: 4 rescued, 0 damaged of 300 read "CI [+0.3%, +2.7%]" beside "p = 0.125, not
    confirmed". Now the interval reaches 0; with nothing changed it has width, not "[+0.0%, +0.0%]"."""
    before = np.zeros(300, dtype=bool)
    after = before.copy()
    after[:4] = True
    v = verdict(before, after, alpha=ALPHA)
    assert v.p_value == pytest.approx(0.125) and not v.confirmed and v.interval[0] <= 0 < v.interval[1]
    still = verdict(np.ones(500, dtype=bool), np.ones(500, dtype=bool), alpha=ALPHA)
    assert still.interval[0] < -0.004 and still.interval[1] > 0.004  # about [-0.8, +0.8] points


def test_exploratory_finalists_and_controls_keep_the_agreement_after_adjustment() -> None:
    rng = np.random.default_rng(1)
    for _ in range(300):
        n = int(rng.choice([100, 1_000]))
        b, c, _ = (int(x) for x in rng.multinomial(n, [0.03, 0.01, 0.96]))
        family = int(rng.integers(2, 11))
        before = np.zeros(n, dtype=bool)
        before[b: b + c] = True  # c right before, damaged below
        after = np.zeros(n, dtype=bool)
        after[:b] = True  # b rescued
        test = exploratory(verdict(before, after, alpha=ALPHA), family)
        assert test.level == pytest.approx(1 - ALPHA / family) and not test.confirmed
        low, high = test.interval
        assert (low > 0 or high < 0) == (test.adjusted_p < ALPHA), (b, c, n, family)
        control = ControlEffect("t", "accuracy", n, 0.5, 0.5 + (b - c) / n, b, c, family=family)
        low, high = control.interval
        assert (low > 0 or high < 0) == (control.adjusted_p < ALPHA), (b, c, n, family)


# ------------------------------------------------------------------ exact coverage

SIZES = (50, 300, 1_000, 5_000)
DISCORDANT = (0.0, 0.002, 0.01, 0.05, 0.3)
DIRECTIONS = (0.0, 0.25, 0.5, 1.0)  # the share of discordant pairs that are rescues (0.5: no change)


def _log_factorials(n: int) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])


def coverage(n: int, discordant: float, direction: float, *, alpha: float = ALPHA, mass: float = 1e-9) -> float:
    """The exact probability that the interval of the counts covers the true difference: every (b, c) with
    probability above ``mass`` (the rest, below 1e-6 in all, counted as a miss), b ~ rescues, c ~ damages of
    a trinomial with cell probabilities ``discordant * direction``, ``discordant * (1 - direction)``."""
    rescue, damage = discordant * direction, discordant * (1 - direction)
    truth = rescue - damage
    if discordant == 0:
        low, high = paired_interval(0, 0, n, alpha=alpha)
        return float(low <= truth <= high)
    logf = _log_factorials(n)

    def span(p: float) -> np.ndarray:  # the counts of one cell that can carry probability above ``mass``
        mean, sd = n * p, math.sqrt(n * p * (1 - p))
        return np.arange(max(0, int(mean - 9 * sd) - 10), min(n, int(mean + 9 * sd) + 10) + 1)

    b, c = (x.ravel() for x in np.meshgrid(span(rescue), span(damage), indexing="ij"))
    inside = b + c <= n
    b, c = b[inside], c[inside]

    def log_term(count: np.ndarray, p: float) -> np.ndarray:
        return count * math.log(p) if p > 0 else np.where(count == 0, 0.0, -np.inf)

    log_p = (logf[n] - logf[b] - logf[c] - logf[n - b - c] + log_term(b, rescue) + log_term(c, damage)
             + (n - b - c) * math.log1p(-discordant))
    keep = log_p > math.log(mass)
    b, c, weight = b[keep], c[keep], np.exp(log_p[keep])
    low, high = paired_intervals(b, c, n, alpha=alpha)
    return float((weight * ((low <= truth) & (truth <= high))).sum())


def test_the_coverage_computation_catches_a_short_interval() -> None:
    """The check has teeth: the same computation on the uncorrected Wald interval (b - c) / n +- z sd, which
    is what a normal approximation gives, finds it far short with rare changes."""
    n, rate = 300, 0.01
    z = one_sided_z(ALPHA)
    logf = _log_factorials(n)
    short = 0.0
    for b in range(0, 25):
        for c in range(0, 25 - b):
            p = math.exp(logf[n] - logf[b] - logf[c] - logf[n - b - c] + b * math.log(rate) + (n - b - c)
                         * math.log1p(-rate)) if c == 0 else 0.0
            d = (b - c) / n
            sd = math.sqrt(max((b + c) / n - d * d, 0.0) / n)
            short += p * (d - z * sd <= rate <= d + z * sd)
    assert short < 0.9  # all change one way, rare: Wald covers about 63%
    assert coverage(n, rate, 1.0) >= 0.95


@pytest.mark.parametrize("n", SIZES)
def test_the_interval_covers_at_its_level_computed_exactly(n: int) -> None:
    cells = {(rate, direction): coverage(n, rate, direction) for rate in DISCORDANT for direction in DIRECTIONS}
    worst = min(cells, key=cells.get)
    assert cells[worst] >= 0.945, f"coverage {cells[worst]:.4f} at n={n}, (rate, direction)={worst}"
