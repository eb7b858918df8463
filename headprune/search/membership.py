"""Membership: which heads of the proposed set stay, tested on the examples that did not propose it.

The search half of discovery proposes a set S (``headprune.search.improve``). Each head h of S is tested for its
**contribution**: S against S without h, on the check half of discovery and the held-out examples together
(neither proposed S). With ``b`` = examples right with S removed and wrong with h kept (S without h) and ``c`` the
reverse, a head that adds nothing sends each of the b + c discordant examples either way with probability at most
1/2, so ``p = P(X >= b)`` for ``X ~ Binomial(b + c, 1/2)`` is an exact one-sided test (the sign test of
``headprune.search.parsimony``; with ``rank_by=margin`` b and c count margins raised and lowered instead).

**Fixed sequence.** The heads are tested one after another in an order fixed on the search half before any check
or held-out number is read (strongest drop-one contribution there first), each at level ``alpha``; the sequence
stops at the first head that does not earn its place (``b - c >= 1`` and ``p <= alpha``), and the heads before it
stay: the *kept* set T. Why the level holds after selection: a head with no contribution can stay only if the
first such head in the order rejects its own test, which happens with probability at most ``alpha`` whatever the
other tests do and however they depend on each other (fixed-sequence testing: Maurer, Hothorn & Lehmacher 1995;
Westfall & Krishen 2001). So a *passenger* (a head that adds nothing to S rides in T) has probability at most
``alpha``, exactly, for any model. Holm's step-down would also hold it; the sequence is more powerful here
because the search half usually puts the real heads first, and each of them is then tested at ``alpha`` instead
of ``alpha/|S|`` (``scripts/passengers.py`` measures both through this code).

Why the check half and held-out together: at the README's sizes the check half alone (75 examples) cannot show a
head's place whatever its effect (a gain of 4 has p >= 1/16), and at 2,000 discovery examples two real heads of
+0.6 points each were both kept in 10% of runs; pooling doubles the examples each head is tested on.

**Support** (:func:`support`) is a look at the check half alone: how many heads of S each help there (drop-one,
``b > c`` and ``p <= SUPPORT_P``). It only decides which held-out verdict is tested first and with which share
of ``alpha`` (``headprune.search.selection``), never which heads stay, so it costs the tests above nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.search.binomial import upper_tail
from headprune.search.parsimony import HeadContribution, HeadSet, counts, drop_one

SUPPORT_P = 0.3  # a head "helps on the check half" when its one-sided drop-one p there is at most this
Counts = tuple[int, int]  # (b, c)


@dataclass(frozen=True)
class Proposal:
    """The proposed set as discovery leaves it for the held-out stage: its heads in the order their contributions
    will be tested (fixed on the search half), each head's drop-one counts on the check half (same order), and
    how many of them help there (:func:`support`)."""

    heads: HeadSet
    order: tuple[Head, ...]
    check: tuple[Counts, ...]
    support: int


def propose(heads: HeadSet, discovery: Sequence[EvalResult], *, search: np.ndarray, check: np.ndarray,
            measure: str, tolerance: float) -> Proposal:
    """The :class:`Proposal` of ``heads`` from its discovery results: S, then each ``S without h`` (in
    :func:`needed` order)."""
    with_set, *withouts = discovery
    on_search = [counts(with_set, without, measure, tolerance, search) for without in withouts]
    on_check = [counts(with_set, without, measure, tolerance, check) for without in withouts]
    # The largest search-half net gain first, then fewer damaged there, then the name: fixed before any check
    # or held-out number is read.
    order = sorted(range(len(heads)), key=lambda i: (-(on_search[i][0] - on_search[i][1]), on_search[i][1],
                                                     heads[i]))
    return Proposal(tuple(heads), tuple(heads[i] for i in order), tuple(on_check[i] for i in order),
                    support(on_check))


def support(check: Sequence[Counts]) -> int:
    """How many heads help on the check half alone: drop-one ``b > c`` and one-sided ``p <= SUPPORT_P``."""
    return sum(b > c and upper_tail(b, b + c) <= SUPPORT_P for b, c in check)


def heldout_counts(proposal: Proposal, heldout: Sequence[EvalResult], *, measure: str,
                   tolerance: float) -> tuple[Counts, ...]:
    """Each head's drop-one counts on held-out, in the proposal's test order: ``heldout`` holds S, then each ``S
    without h`` (in :func:`needed` order)."""
    with_set, *withouts = heldout
    by_head = dict(zip(proposal.heads, withouts, strict=True))
    return tuple(counts(with_set, by_head[head], measure, tolerance) for head in proposal.order)


def contributions(proposal: Proposal, heldout: Sequence[Counts], *, level: float) -> tuple[HeadContribution, ...]:
    """Each head tested in the proposal's order, at ``level`` each, on the check half and held-out together, until
    the first that does not earn its place; returned in the test order. ``adjusted_p`` is the fixed-sequence
    adjusted p-value (the largest p so far: a head stays exactly when it is at most ``level``); heads after the
    first failure are reported, not kept."""
    out, running, going = [], 0.0, True
    for rank, (head, (cb, cc), (hb, hc)) in enumerate(zip(proposal.order, proposal.check, heldout, strict=True),
                                                      start=1):
        b, c = cb + hb, cc + hc
        p = upper_tail(b, b + c)
        running = max(running, p)
        going = earned = going and b - c >= 1 and running <= level
        out.append(HeadContribution(str(head), b, c, p, running, earned, hb, hc, upper_tail(hb, hb + hc),
                                    check_rescued=cb, check_damaged=cc, rank=rank))
    return tuple(out)


def kept(heads: HeadSet, found: Sequence[HeadContribution]) -> HeadSet:
    """The heads that earned their place, in the set's own (sorted) order."""
    stay = {c.head for c in found if c.earned}
    return tuple(h for h in heads if str(h) in stay)


def needed(heads: HeadSet) -> list[HeadSet]:
    """The conditions the tests read: S first, then each S without one head."""
    return [heads, *drop_one(heads)]


__all__ = ["SUPPORT_P", "Counts", "Proposal", "contributions", "heldout_counts", "kept", "needed", "propose",
           "support"]
