"""Parsimony: a head stays in a set only if it earns its place, on data that did not choose the set.

Why: ranking sets by their discovery gain alone lets a head ride along that adds nothing the data supports
(it flips a few examples by chance, or only nudges margins), and a shipped set should contain no such passenger.

The rule. For a set S and each head h of S, pair S's results with those of S without h, on the check half of
discovery (``headprune.search.folds``: the half that proposed nothing): ``b`` = examples right with S removed
and wrong with h kept (S without h), ``c`` = the reverse. If h adds nothing, each of the b + c discordant
examples goes either way with probability 1/2, so ``p`` = P(X >= b) for X ~ Binomial(b + c, 1/2) is an exact
one-sided test (the one-sided McNemar / sign test); Holm's step-down over S's heads keeps the chance that a set
keeps any passenger at the level, which is find's ``alpha`` (default 0.05). h **earns its place** when
b - c >= 1 and its Holm-adjusted p <= the level. A single head is compared with the intact model the same way,
for the record; its test is the held-out verdict.

With ``rank_by=margin`` the user has chosen the margin as what improves, so b and c count the examples whose
margin the head's removal raises or lowers (beyond the evaluation's float tolerance) instead of answers: the
same exact sign test on the per-example margin change. A head whose removal consistently raises margins
earns its place there even when it flips no answer; under ``rank_by=gain`` it does not.

This module holds the rule and its records; 0.2's find walked find's sets with it (the selection rule
``headprune.search.rules.admission`` keeps that walk: backward elimination on the check half, finalists), and
``--extend`` uses it on the search half to decide whether a step is worth proposing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.search.binomial import upper_tail
from headprune.search.stats import holm

HeadSet = tuple[Head, ...]


@dataclass(frozen=True)
class HeadContribution:
    """One head of a set against the set without it: b = ``rescued``, c = ``damaged``, the one-sided exact
    binomial p and its adjustment over the set's heads, and whether the head earned its place.

    Under find's rule (``headprune.search.membership``, ``rank`` set): b and c count the check half and held-out
    together (``check_*`` and ``heldout_*`` are the two parts), the heads are tested in a fixed order (``rank`` is
    the position) by a fallback procedure, each at its ``level``, and ``adjusted_p`` is its p scaled to the whole
    level. In files of 0.2 (``rank`` absent): b and c count the check half, ``adjusted_p`` is Holm's over the set's
    heads, and ``heldout_*`` are the primary set's exploratory drop-one numbers, measured after the verdict."""

    head: str
    rescued: int
    damaged: int
    p_value: float
    adjusted_p: float
    earned: bool
    heldout_rescued: int | None = None
    heldout_damaged: int | None = None
    heldout_p: float | None = None
    check_rescued: int | None = None
    check_damaged: int | None = None
    rank: int | None = None  # find's rule after 0.2: the position in the fixed test order
    level: float | None = None  # find's rule after 0.2: the level the head was tested at


@dataclass(frozen=True)
class Parsimony:
    """The admission of heads before the finalists are frozen: its test and what it cost in conditions.

    ``search``/``check`` are the sizes of discovery's halves; files written before 0.2 have neither (their rule
    tested each head on all of discovery, the data that had chosen the set)."""

    level: float  # level of each head's test, Holm over a set's heads
    measure: str  # "accuracy" (b, c count answers) or "margin" (b, c count margins up / down)
    examined: int  # multi-head sets tested head by head
    dropped: int  # of those, sets with a head that did not earn its place
    conditions: int  # discovery conditions the admission evaluated (not evaluated by the search)
    heldout_conditions: int = 0  # the primary set's held-out drop-one conditions (exploratory)
    search: int | None = None  # examples in the search half (proposes sets)
    check: int | None = None  # examples in the check half (admits heads)


def counts(with_set: EvalResult, without: EvalResult, measure: str, tolerance: float,
           mask: np.ndarray | None = None) -> tuple[int, int]:
    """(b, c): examples the head's removal helps and hurts, given the rest of the set removed either way; only
    the examples of ``mask`` (bool) when given."""
    keep = slice(None) if mask is None else mask
    if measure == "margin":
        change = (with_set.margins - without.margins)[keep]
        allowed = tolerance * np.maximum(1.0, np.abs(without.margins[keep]))
        return int((change > allowed).sum()), int((change < -allowed).sum())
    right, right_without = with_set.correct[keep], without.correct[keep]
    return int((right & ~right_without).sum()), int((~right & right_without).sum())


def contributions(heads: HeadSet, with_set: EvalResult, withouts: Sequence[EvalResult], *, measure: str,
                  level: float, tolerance: float, mask: np.ndarray | None = None) -> tuple[HeadContribution, ...]:
    """Each head's b, c (on the examples of ``mask``), one-sided exact p, Holm-adjusted p over the set's heads,
    and whether it earned its place."""
    pairs = [counts(with_set, without, measure, tolerance, mask) for without in withouts]
    p_values = [upper_tail(b, b + c) for b, c in pairs]
    return tuple(HeadContribution(str(h), b, c, p, adjusted, b - c >= 1 and adjusted <= level)
                 for h, (b, c), p, adjusted in zip(heads, pairs, p_values, holm(p_values)))


def drop_one(heads: HeadSet) -> list[HeadSet]:
    return [tuple(x for x in heads if x != h) for h in heads]


__all__ = ["HeadContribution", "HeadSet", "Parsimony", "contributions", "counts", "drop_one"]
