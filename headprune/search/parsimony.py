"""Parsimony: a head stays in a set only if it earns its place on discovery.

Why: ranking sets by their discovery gain alone lets a head ride along that adds nothing the data supports
(it flips one example by chance, or only nudges margins), and a shipped set should contain no such passenger.

The rule. For a set S and each head h of S, pair S's discovery results with those of S without h:
``b`` = examples right with S removed and wrong with h kept (S without h), ``c`` = the reverse. If h adds
nothing, each of the b + c discordant examples goes either way with probability 1/2, so ``p`` = P(X >= b)
for X ~ Binomial(b + c, 1/2) is an exact one-sided test (the one-sided McNemar / sign test); Holm's step-down
over S's heads keeps the chance that a set keeps any passenger at the level, which is find's ``alpha``
(default 0.05). h **earns its place** when b - c >= 1 and its Holm-adjusted p <= the level. A single-head set
is compared with the intact model the same way, for the record; its test is the held-out verdict.

With ``rank_by=margin`` the user has chosen the margin as what improves, so b and c count the examples whose
margin the head's removal raises or lowers (beyond the evaluation's float tolerance) instead of answers: the
same exact sign test on the per-example margin change. A head whose removal consistently raises margins
earns its place there even when it flips no answer; under ``rank_by=gain`` it does not.

Freezing. The evaluated sets are walked best first by find's ranking key. A set whose heads all earn their
place is frozen as a finalist; any other set is dropped and its drop-one subsets join the walk at their own
discovery rank (so a failing set is replaced by its subset, and the subset is tested in turn). The walk stops
at F distinct frozen sets. ``--extend`` obeys the same rule: a step is taken only when the added head earns
its place against the set it grows (which also needs a discovery gain of at least 1).

Cost, in conditions. Every subset of the nominees of size 1..K is already evaluated by the exhaustive stage,
so testing its sets costs no new condition (the journal holds them). Only sets grown by ``--extend`` have
drop-one subsets not yet evaluated: at most |S| - 1 new discovery conditions per such set reached by the walk,
evaluated in one batch through the journal (so ``--resume`` recomputes nothing and data-parallel processes
share them). The primary set's held-out drop-one numbers (exploratory, after the verdict) cost |S| held-out
conditions when it has two heads or more.

This module holds the rule and its records; ``headprune.search.pruner`` walks find's sets with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.search.stats import holm, upper_tail

HeadSet = tuple[Head, ...]


@dataclass(frozen=True)
class HeadContribution:
    """One head of a set against the set without it on discovery (this module says how): b = ``rescued``,
    c = ``damaged``, the one-sided exact binomial p and its Holm adjustment over the set's heads.
    ``heldout_*``: the primary set's exploratory drop-one numbers, measured after the verdict."""

    head: str
    rescued: int
    damaged: int
    p_value: float
    adjusted_p: float
    earned: bool
    heldout_rescued: int | None = None
    heldout_damaged: int | None = None
    heldout_p: float | None = None


@dataclass(frozen=True)
class Parsimony:
    """The pruning before the finalists are frozen: its test and what it cost in conditions."""

    level: float  # discovery level of each head's test, Holm over a set's heads
    measure: str  # "accuracy" (b, c count answers) or "margin" (b, c count margins up / down)
    examined: int  # multi-head sets tested head by head
    dropped: int  # of those, sets with a head that did not earn its place
    conditions: int  # discovery conditions the pruning evaluated (not already in the journal)
    heldout_conditions: int = 0  # the primary set's held-out drop-one conditions (exploratory)


def counts(with_set: EvalResult, without: EvalResult, measure: str, tolerance: float) -> tuple[int, int]:
    """(b, c): examples the head's removal helps and hurts, given the rest of the set removed either way."""
    if measure == "margin":
        change = with_set.margins - without.margins
        allowed = tolerance * np.maximum(1.0, np.abs(without.margins))
        return int((change > allowed).sum()), int((change < -allowed).sum())
    right, right_without = with_set.correct, without.correct
    return int((right & ~right_without).sum()), int((~right & right_without).sum())


def contributions(heads: HeadSet, with_set: EvalResult, withouts: Sequence[EvalResult], *, measure: str,
                  level: float, tolerance: float) -> tuple[HeadContribution, ...]:
    """Each head's b, c, one-sided exact p, Holm-adjusted p over the set's heads, and whether it earned."""
    pairs = [counts(with_set, without, measure, tolerance) for without in withouts]
    p_values = [upper_tail(b, b + c) for b, c in pairs]
    return tuple(HeadContribution(str(h), b, c, p, adjusted, b - c >= 1 and adjusted <= level)
                 for h, (b, c), p, adjusted in zip(heads, pairs, p_values, holm(p_values)))


def drop_one(heads: HeadSet) -> list[HeadSet]:
    return [tuple(x for x in heads if x != h) for h in heads]


__all__ = ["HeadContribution", "Parsimony", "contributions", "counts", "drop_one", "upper_tail"]
