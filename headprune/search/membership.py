"""Membership: which heads of the proposed set stay, tested on the examples that did not propose it.

The search half of discovery proposes a set S (``headprune.search.improve``). Each head h of S is tested for its
**contribution**: S against S without h, on the check half of discovery and the held-out examples together
(neither proposed S). With ``b`` = examples right with S removed and wrong with h kept (S without h) and ``c`` the
reverse, a head that adds nothing sends each of the b + c discordant examples either way with probability at most
1/2, so ``p = P(X >= b)`` for ``X ~ Binomial(b + c, 1/2)`` is an exact one-sided test (the sign test of
``headprune.search.parsimony``; with ``rank_by=margin`` b and c count margins raised and lowered instead).

**A fallback procedure.** The heads are tested one after another in an order fixed on the search half before any
check or held-out number is read (strongest drop-one contribution there first). The first is tested at
``FIRST_SHARE`` (80%) of ``alpha``, the others at equal shares of the rest; a head that earns its place (``b - c
>= 1`` and ``p`` at most its level) passes its level on to the next head, one that does not passes nothing, and the
testing goes on either way. The heads that earn their place stay: the *kept* set T. Why the level holds after
selection: this is Wiens's fallback procedure (Wiens 2003; Wiens & Dmitrienko 2005), a closed test built on
weighted Bonferroni tests whose weights add up to 1, so the chance that any head with no contribution stays (a
*passenger*: a head that adds nothing to S rides in T) is at most ``alpha``, exactly, for any model and however the
tests depend on each other. Holm's step-down and a plain fixed sequence (each head at ``alpha``, stopping at the
first failure) hold it too, with less power: Holm tests the first head at ``alpha/|S|``, and the sequence loses every
real head behind a null one the search half happened to rank first. With each of the three swapped in here, on
counts-only models (``headprune.search.simulation``, 400 runs, two real heads of +0.6 points among null heads
flipping 0.3%, discovery/held-out 2,000/1,000), both real heads were kept in 35% of runs with this procedure, 32%
with the sequence and 26% with Holm; at the README's sizes 64%, 61% and 61%.

Why the check half and held-out together: at the README's sizes the check half alone (75 examples) cannot show a
head's place whatever its effect (a gain of 4 has p >= 1/16), and at 2,000 discovery examples two real heads of
+0.6 points each were both kept in 10% of runs; pooling doubles the examples each head is tested on.

Since the fixed sequence of the proposal's prefixes (``headprune.search.sequence``) makes find's claim for a set of
several heads, these tests no longer confirm anything: where nothing is confirmed, the kept set (two heads or more)
is the primary set shown, unconfirmed, and its passengers stay within ``alpha``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.search.binomial import upper_tail
from headprune.search.parsimony import HeadContribution, HeadSet, counts, drop_one
from headprune.search.sequence import block_size, gain_order, hypotheses, increments, prefixes, sets_read
from headprune.search.stats import test_size

FIRST_SHARE = 0.8  # of alpha, for the first head tested; the others share the rest
Counts = tuple[int, int]  # (b, c)


@dataclass(frozen=True)
class Proposal:
    """The proposed set as discovery leaves it for the held-out stage: its heads in the order their membership
    tests run (``order``, fixed on the search half) with each head's drop-one counts on the check half (same
    order); and the order of its fixed sequence (``sequence``: each head's gain on the search half, own or within S,
    ``headprune.search.sequence``), the size of the block it starts with, and each of its hypotheses' counts on the
    check half (``steps``, in the order tested)."""

    heads: HeadSet
    order: tuple[Head, ...]
    check: tuple[Counts, ...]
    sequence: tuple[Head, ...]
    steps: tuple[Counts, ...]
    block: int = 1


def propose(heads: HeadSet, discovery: Callable[[list[HeadSet]], list[EvalResult]], base: EvalResult, *,
            search: np.ndarray, check: np.ndarray, measure: str, tolerance: float) -> Proposal:
    """The :class:`Proposal` of ``heads``; ``discovery`` evaluates head sets on discovery (``base``: the intact
    model there): S and each S without one head (:func:`needed`), each head alone, the sequence's prefixes, then
    its block without each of its heads."""
    with_set, *withouts = discovery(needed(heads))
    on_search = [counts(with_set, without, measure, tolerance, search) for without in withouts]
    on_check = [counts(with_set, without, measure, tolerance, check) for without in withouts]
    # The largest search-half net gain first, then fewer damaged there, then the name: fixed before any check
    # or held-out number is read.
    order = sorted(range(len(heads)), key=lambda i: (-(on_search[i][0] - on_search[i][1]), on_search[i][1],
                                                     heads[i]))
    sequence = gain_order(heads, discovery([(h,) for h in heads]), base, search=search, measure=measure,
                          tolerance=tolerance, within=on_search)
    chain = prefixes(sequence)
    results = dict(zip(chain, discovery(chain)))
    block = block_size([results[p] for p in chain], base, search=search, measure=measure, tolerance=tolerance)
    more = [s for s in sets_read(sequence, block) if s not in results]  # the block without each of its heads
    results.update(zip(more, discovery(more)))
    steps = increments(hypotheses(sequence, block), results, base, measure=measure, tolerance=tolerance, mask=check)
    return Proposal(tuple(heads), tuple(heads[i] for i in order), tuple(on_check[i] for i in order), sequence,
                    steps, block)


def heldout_counts(proposal: Proposal, heldout: Sequence[EvalResult], *, measure: str,
                   tolerance: float) -> tuple[Counts, ...]:
    """Each head's drop-one counts on held-out, in the proposal's test order: ``heldout`` holds S, then each ``S
    without h`` (in :func:`needed` order)."""
    with_set, *withouts = heldout
    by_head = dict(zip(proposal.heads, withouts, strict=True))
    return tuple(counts(with_set, by_head[head], measure, tolerance) for head in proposal.order)


def contributions(proposal: Proposal, heldout: Sequence[Counts], *, level: float) -> tuple[HeadContribution, ...]:
    """Each head tested in the proposal's order on the check half and held-out together, by the fallback procedure
    above at ``level``; returned in the test order. ``level`` of a head is what it was tested at, and
    ``adjusted_p`` its p scaled to the whole ``level`` (``p * level / its level``, at most 1: a head stays exactly
    when that is at most ``level``)."""
    count = len(proposal.order)
    shares = [1.0] if count == 1 else [FIRST_SHARE] + [(1 - FIRST_SHARE) / (count - 1)] * (count - 1)
    out, carried = [], 0.0
    for rank, (head, share, (cb, cc), (hb, hc)) in enumerate(
            zip(proposal.order, shares, proposal.check, heldout, strict=True), start=1):
        b, c = cb + hb, cc + hc
        p = upper_tail(b, b + c)
        at = test_size(level, share) + carried
        earned = b - c >= 1 and p <= at
        carried = at if earned else 0.0
        out.append(HeadContribution(str(head), b, c, p, min(1.0, p * level / at), earned, hb, hc,
                                    upper_tail(hb, hb + hc), check_rescued=cb, check_damaged=cc, rank=rank,
                                    level=at))
    return tuple(out)


def kept(heads: HeadSet, found: Sequence[HeadContribution]) -> HeadSet:
    """The heads that earned their place, in the set's own (sorted) order."""
    stay = {c.head for c in found if c.earned}
    return tuple(h for h in heads if str(h) in stay)


def needed(heads: HeadSet) -> list[HeadSet]:
    """The conditions the tests read: S first, then each S without one head."""
    return [heads, *drop_one(heads)]


__all__ = ["FIRST_SHARE", "Counts", "Proposal", "contributions", "heldout_counts", "kept", "needed", "propose"]
