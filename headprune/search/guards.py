"""Guards: tasks the shipped set must not hurt (``find --guard TASK[:margin=M]``), and the claim that they held.

Removing heads that carry a conflicting feature helps one task and hurts another (the theory find builds on), so a
user names what must not break. A guard differs from a control (``--control``, which only measures) in two ways:

- **It takes part in the search.** Its examples are split like the task's: a third for discovery (the search reads
  them), the rest held out (only the verdict reads them). Candidate sets are checked on the guard's discovery
  examples in the order the search ranks them, and the first that keeps every guard (:func:`keeps`: its discovery
  change, judged at the held-out size, passes the held-out test) is proposed ahead of better sets that break one;
  the same for the best single head (``headprune.search.improve``). Where none of the ``GUARD_TRIES`` best sets
  keeps the guards, the set that breaks them least is the *best trade*, and the run says so and confirms nothing.
- **It is part of the claim.** The primary set's claim is "the task improves (its exact test at its level) **and**
  each guard is non-inferior at its margin on guard examples the search never saw". That claim is an
  intersection-union test (Berger 1982): it is false when any one of its parts is false, and then it is made only if
  that part's own test rejected wrongly, which happens with at most that test's level. So each part is tested at the
  full level, with no split of alpha: the task at its own (one-sided at most ``alpha / 2``), each guard one-sided
  at ``alpha / 2``. The primary set is chosen without reading the guards' held-out examples (they are read only
  after it is fixed), so their test holds after selection.

The guard tests:

- an **accuracy** guard (margin ``M`` points): Tango's score test of ``H0: p_after - p_before <= -M`` for paired
  proportions, continuity-corrected (:func:`headprune.search.score.non_inferior`, the compress verdict's test,
  whose exact size ``tests/test_stats.py`` checks); the interval is Tango's score interval, whose lower end lies
  above ``-M`` exactly when the test accepts;
- a **text** guard (margin ``M`` nats of mean token NLL, e.g. ``general``): a one-sided test of ``H0: the mean
  increase of the per-example NLL >= M`` by the paired t statistic with Hall's (1992) skewness correction, made
  conservative for the long upper tail such changes have (:mod:`headprune.search.skewed_mean` says how, and what it
  costs); the interval's upper end lies below ``M`` exactly when the test accepts. Its size, measured by
  ``scripts/guard_size.py`` on skewed and heavy-tailed changes at the boundary of the null, stays within the level
  from :data:`~headprune.search.skewed_mean.MIN_TEXTS` held-out texts, the least a text guard takes.

A margin is at most what the metric can measure: an accuracy change lies within 100 points, so a larger margin
would be a guard that cannot fail; a text guard's is at most :data:`MAX_NLL_MARGIN` nats.

Every other finalist's guard changes are exploratory (chosen after held-out was read), with intervals simultaneous
over the finalists (Bonferroni), as its task verdict's are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headprune.errors import SearchSettingsError
from headprune.search.score import NON_INFERIORITY_TEST, non_inferior, score_interval
from headprune.search.skewed_mean import MIN_TEXTS, NLL_TEST, mean_interval, skewness
from headprune.tasks import Task

GENERAL = "general"  # the built-in general-text guard (headprune.tasks.builtin)
DEFAULT_ACCURACY_MARGIN = 5.0  # accuracy points: about two standard errors of a 0-point change at 400 examples
DEFAULT_NLL_MARGIN = 0.05  # nats per token: perplexity up by at most 5.1% (exp(0.05))
GUARD_DISCOVERY_SHARE = 1 / 3  # of a guard's examples, read by the search; the rest are held out
GUARD_TRIES = 10  # candidate sets checked on a guard's discovery examples, best first, per choice
MAX_ACCURACY_MARGIN = 100.0  # points: an accuracy change cannot be larger
# nats: perplexity up 22,026-fold, more than the whole way from a model that predicts ordinary text (2-4 nats a
# token) to a uniform guess over a vocabulary of 50,000 tokens (10.8 nats): a wider margin accepts a model that
# predicts nothing, a guard that cannot fail
MAX_NLL_MARGIN = 10.0


@dataclass(frozen=True)
class GuardSpec:
    """A guard as the user named it: the task spec (without ``margin``) and the margin given (None: the default
    of the task's kind, points for accuracy tasks, nats for text tasks)."""

    task: str
    margin: float | None = None


def parse_guard(text: str) -> GuardSpec:
    """``TASK[:key=value,...,margin=M]`` -> the task spec and the margin (the other options stay the task's).

    Raises:
        SearchSettingsError: a margin that is not a positive finite number, or more than 100 (points; a text task's
            own bound, 10 nats, is checked when it is loaded).
    """
    head, sep, options = str(text).rpartition(":")
    if not sep or "=" not in options:
        return GuardSpec(str(text))
    items = [item for item in options.split(",")]
    margins = [item for item in items if item.strip().partition("=")[0].strip() == "margin"]
    if not margins:
        return GuardSpec(str(text))
    if len(margins) > 1:
        raise SearchSettingsError(f"guard {text!r}: margin is given twice", settings=("guard",))
    raw = margins[0].partition("=")[2].strip()
    try:
        margin = float(raw)
    except ValueError:
        raise SearchSettingsError(f"guard {text!r}: margin={raw[:40]!r} is not a number", settings=("guard",)) from None
    margin_for("accuracy", margin, owner=f"guard {text!r}: ")  # positive, finite, at most the largest any metric takes
    rest = [item for item in items if item not in margins]
    return GuardSpec(head + (":" + ",".join(rest) if any(item.strip() for item in rest) else ""), margin)


def _beyond(given: float) -> str:
    return (f"margin {given:g} is beyond what the task can measure (an accuracy change is at most "
            f"{MAX_ACCURACY_MARGIN:g} points; a text task's margin is at most {MAX_NLL_MARGIN:g} nats of mean NLL): "
            "a test against it could never fail")


def margin_for(metric: str, given: float | None, *, owner: str = "", settings: tuple[str, ...] = ("guard",)
               ) -> float:
    """The margin in the metric's own unit (an accuracy fraction, or nats) from the margin given (points or nats).

    Raises:
        SearchSettingsError: a margin that is not positive and finite, or beyond what the metric can measure;
            ``owner`` starts the message and ``settings`` are the options it names.
    """
    if given is not None and not (math.isfinite(given) and given > 0):
        raise SearchSettingsError(f"{owner}margin must be a positive number, got {given:g}", settings=settings)
    if given is not None and given > (MAX_ACCURACY_MARGIN if metric == "accuracy" else MAX_NLL_MARGIN):
        raise SearchSettingsError(owner + _beyond(given), settings=settings)
    if metric == "accuracy":
        return (DEFAULT_ACCURACY_MARGIN if given is None else given) / 100
    return DEFAULT_NLL_MARGIN if given is None else given


def check_guard_sample(task: Task, given: float | None, *, settings: tuple[str, ...]) -> None:
    """Refuse a margin the task's metric cannot measure, and a text task too small for the text test
    (``headprune eval --margin``; find's guards are checked as they are split, ``headprune.search.split``).

    Raises:
        SearchSettingsError
    """
    metric = "accuracy" if task.has_accuracy else "mean_nll"
    margin_for(metric, given, settings=settings)
    if metric == "mean_nll" and len(task) < MIN_TEXTS:
        raise SearchSettingsError(f"{task.name} has {len(task)} texts; the test of a text task needs at least "
                                  f"{MIN_TEXTS}: below that its level is not shown to hold (docs/find.md)",
                                  settings=settings)


@dataclass(frozen=True)
class Guard:
    """One guard of a run, as the search sees it: its name, metric (``accuracy`` or ``mean_nll``) and margin
    (an accuracy fraction, or nats), and the condition names of its discovery and held-out examples."""

    name: str
    metric: str
    margin: float
    index: int

    @property
    def discovery(self) -> str:
        return f"guard-discovery:{self.index}"

    @property
    def heldout(self) -> str:
        return f"guard-heldout:{self.index}"

    def margin_text(self) -> str:
        return f"{100 * self.margin:g} points" if self.metric == "accuracy" else f"{self.margin:g} nats"


@dataclass(frozen=True)
class GuardEffect:
    """What a head set does to a guard: the metric before and after, the counts (accuracy) or the spread of the
    per-example change (text), and the non-inferiority test at ``margin``.

    ``role``: ``primary`` (the primary set on held-out guard examples: the claim), ``exploratory`` (another
    finalist: its interval simultaneous over ``family`` finalists, never a claim) or ``discovery`` (what the
    search read)."""

    task: str
    metric: str  # "accuracy" or "mean_nll"
    margin: float  # accuracy: a fraction (0.05 = 5 points); mean_nll: nats per token
    n: int
    before: float
    after: float
    rescued: int | None = None
    damaged: int | None = None
    spread: float | None = None  # mean_nll: standard deviation of the per-example change
    alpha: float = 0.05
    role: str = "primary"
    family: int = 1
    skewness: float | None = None  # mean_nll: the per-example change's sample skewness (Hall's correction)

    _derived = ("difference", "test", "level", "interval", "within", "held")

    @property
    def difference(self) -> float:
        """After minus before: accuracy (higher is better) or mean NLL (lower is better)."""
        return self.after - self.before

    @property
    def test(self) -> str:
        return NON_INFERIORITY_TEST if self.metric == "accuracy" else NLL_TEST

    @property
    def level(self) -> float:
        """The confidence level of ``interval``; the test is one-sided at half of one minus it."""
        return 1 - self.alpha / self.family

    @property
    def interval(self) -> tuple[float, float]:
        alpha = self.alpha / self.family
        if self.metric == "accuracy":
            return score_interval(self.rescued or 0, self.damaged or 0, self.n, alpha=alpha)
        if self.n < 2 or self.spread is None:
            return -math.inf, math.inf
        return mean_interval(self.difference, self.spread, self.skewness or 0.0, self.n, alpha=alpha)

    @property
    def within(self) -> bool:
        """The interval shows the change within the margin (the non-inferiority test rejects at its level)."""
        if self.metric == "accuracy":
            return bool(non_inferior(self.rescued or 0, self.damaged or 0, self.n, margin=self.margin,
                                     alpha=self.alpha / self.family))
        return self.interval[1] < self.margin

    @property
    def held(self) -> bool:
        """The claim: the primary set's guard is non-inferior on held-out guard examples."""
        return self.role == "primary" and self.within

    @property
    def shortfall(self) -> float:
        """How far the estimate lies beyond the margin, in margins (<= 0: within it): ranks the best trade."""
        harm = -self.difference if self.metric == "accuracy" else self.difference
        return harm / self.margin - 1

    @classmethod
    def measure(cls, guard: Guard, before: object, after: object, *, alpha: float, role: str = "primary",
                family: int = 1) -> GuardEffect:
        """The effect from the intact and ablated results of one set of guard examples (``EvalResult``-like)."""
        if guard.metric == "accuracy":
            b = np.asarray(before.correct, dtype=bool)  # type: ignore[attr-defined]
            a = np.asarray(after.correct, dtype=bool)  # type: ignore[attr-defined]
            return cls(guard.name, "accuracy", guard.margin, len(b), float(b.mean()), float(a.mean()),
                       int((~b & a).sum()), int((b & ~a).sum()), alpha=alpha, role=role, family=family)
        change = -(np.asarray(after.margins) - np.asarray(before.margins))  # type: ignore[attr-defined]
        spread = float(np.std(change, ddof=1)) if len(change) > 1 else 0.0
        nll_before = float(-np.mean(before.margins))  # type: ignore[attr-defined]
        return cls(guard.name, "mean_nll", guard.margin, len(change), nll_before, nll_before + float(change.mean()),
                   spread=spread, alpha=alpha, role=role, family=family, skewness=skewness(change))


def keeps(effect: GuardEffect, size: int) -> bool:
    """Whether a discovery effect keeps its guard as the held-out test at ``size`` examples would judge it: the
    discovery counts (or spread) scaled to ``size`` pass that test. The search's safety margin is the one the
    verdict will need, as the compress objective's budget is (``headprune.search.growth.Budget``)."""
    if effect.n == 0:
        return True
    if effect.metric == "accuracy":
        scale = size / effect.n
        return bool(non_inferior((effect.rescued or 0) * scale, (effect.damaged or 0) * scale, size,
                                 margin=effect.margin, alpha=effect.alpha))
    bound = mean_interval(effect.difference, effect.spread or 0.0, effect.skewness or 0.0, max(size, 2),
                          alpha=effect.alpha)[1]
    return bound < effect.margin


@dataclass(frozen=True)
class TriedSet:
    """A candidate set checked on the guards' discovery examples: its heads, what it did to each guard, whether it
    keeps them all (:func:`keeps`), and what it was tried for (``proposal`` or ``single``)."""

    heads: tuple[str, ...]
    effects: tuple[GuardEffect, ...]
    kept: bool
    candidate: str


@dataclass(frozen=True)
class Guarding:
    """How the guards steered the search: every set checked on their discovery examples, in the order checked,
    and whether a candidate that keeps them all was found (``kept``); otherwise ``best_trade`` names the set that
    breaks them least, which the run ships unconfirmed."""

    tried: tuple[TriedSet, ...]
    kept: bool
    best_trade: tuple[str, ...] = ()
    discovery: tuple[int, ...] = ()  # guard examples the search read, per guard
    heldout: tuple[int, ...] = ()  # guard examples held out for the verdict, per guard


def claim_holds(task_confirmed: bool, kept: bool, effects: Sequence[GuardEffect]) -> bool:
    """find's claim with guards: the task's gain confirmed, a candidate kept the guards on discovery, and every guard
    of the primary set held on its held-out examples (the intersection-union test above)."""
    return task_confirmed and kept and all(effect.held for effect in effects)


def non_dominated(points: Sequence[tuple[float, ...]]) -> list[bool]:
    """Which points no other point dominates (each coordinate higher is better; at least as good in all and
    better in one)."""
    marks = []
    for i, p in enumerate(points):
        dominated = any(all(q[k] >= p[k] for k in range(len(p))) and any(q[k] > p[k] for k in range(len(p)))
                        for j, q in enumerate(points) if j != i)
        marks.append(not dominated)
    return marks


__all__ = ["DEFAULT_ACCURACY_MARGIN", "DEFAULT_NLL_MARGIN", "GENERAL", "GUARD_DISCOVERY_SHARE", "GUARD_TRIES",
           "MAX_ACCURACY_MARGIN", "MAX_NLL_MARGIN", "MIN_TEXTS", "NLL_TEST", "Guard", "GuardEffect", "GuardSpec",
           "Guarding", "TriedSet", "check_guard_sample", "claim_holds", "keeps", "margin_for", "mean_interval",
           "non_dominated", "parse_guard", "skewness"]
