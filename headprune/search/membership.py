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

find's selection rule (``headprune.search.rules``) makes the claim for a set of several heads; these tests confirm
nothing. Where nothing is confirmed, the kept set (two heads or more) is the primary set shown, unconfirmed, and its
passengers stay within ``alpha``; elsewhere they are a diagnostic, kept in ``result.json``.
"""

from __future__ import annotations

from collections.abc import Sequence

from headprune.evaluation.results import EvalResult
from headprune.search.binomial import upper_tail
from headprune.search.parsimony import HeadContribution, HeadSet, counts
from headprune.search.proposal import Counts, Proposal
from headprune.search.stats import test_size

FIRST_SHARE = 0.8  # of alpha, for the first head tested; the others share the rest


def heldout_counts(proposal: Proposal, heldout: Sequence[EvalResult], *, measure: str,
                   tolerance: float) -> tuple[Counts, ...]:
    """Each head's drop-one counts on held-out, in the proposal's test order: ``heldout`` holds S, then each ``S
    without h`` (in :func:`headprune.search.proposal.needed` order)."""
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


__all__ = ["FIRST_SHARE", "contributions", "heldout_counts", "kept"]
