"""Selection: the primary set, chosen among candidates fixed on discovery by held-out tests at level alpha.

Discovery fixes, before any held-out number is read (``headprune.search.improve``):

- the **proposal** S: the best set of several heads on the search half, with the order in which its heads'
  contributions will be tested (``headprune.search.membership``);
- the **single** s: the best single head on all of discovery (``headprune.search.stages.single_order``);
- which of the two is **favoured**: the proposal when at least two of its heads help on the check half
  (``membership.support``), else the single. The favoured candidate is tested first with ``FAVOURED_SHARE``
  (90%) of ``alpha``, the other with the rest.

On held-out (this module):

1. **Membership**: each head of S against S without it on the check half and held-out together, in the fixed
   sequence (``headprune.search.membership``); the heads that earn their place form the kept set T.
2. **Verdicts**, as a fallback procedure (Wiens 2003) between two branches whose shares of ``alpha`` are fixed on
   discovery: the first branch's test at ``alpha * share``; the second's at its own share, plus the first's when
   the first rejected (the level that test had: for the proposal's, its kept set's part of the share). The
   single's branch is s's exact McNemar test. The proposal's branch is the exact McNemar
   test of its kept set T at a **part** of the branch's share (:func:`part`): every subset of S of two heads or
   more has a part, fixed on discovery, and the parts add up to 1 (the prefixes of the test order share
   ``PREFIX_PART``, 80%, the other subsets the rest). A kept set of fewer than two heads is a branch that does
   not reject (its one head's claim is the single's).
3. The **primary set**: T when its test rejected; else s when its test rejected; else nothing is confirmed and the
   primary set is T where the proposal was favoured and T was tested (two heads or more), s otherwise.

Why the level holds after selection. s and every subset of S are fixed before held-out data is read, and each is
tested exactly on held-out; the proposal's branch rejects only when the subset held-out kept rejects at its part,
so the chance that it confirms a subset that does not improve is at most the sum of the parts of those subsets
times the branch's share (weighted Bonferroni, any dependence: it does not matter that held-out chose which
subset is tested). With the single's test, this is a weighted Bonferroni-based graphical procedure (Bretz et al.
2009; Wiens's fallback is its two-node case) whose weights add up to 1, and a test that rejects passes on its own
weight alone; a closed test, so the chance
of confirming a set that does not improve is at most ``alpha`` two-sided, ``alpha / 2`` for an improvement, for
any model. No level serves two claims: a branch's share is spent on its own test, and passes on only when that
test rejected. A head with no contribution to S enters T only when its own membership test rejects: at most
``alpha`` (``membership``).

What held-out cannot give a cut-down set: an unbiased estimate. T's held-out change reads the examples that chose
T, so it runs high; its verdict is marked ``selected`` and shown as exploratory. Its test stays exact, and so does
its interval: printed at the part's level, it is one of the subsets' intervals that hold together with probability
at least ``1 - alpha * share``. T's test is not on fresh
data; the designs that would make it so are measured through this code by ``scripts/selection_designs.py``
(docs/find.md, "Designs measured for a fresh test"): a part of held-out reserved for T's own test kept both real
heads in at most 44% of runs at 150/300 and 28% at 2,000/1,000 (63% and 36% with this rule: membership needs every
example); a fixed sequence over the proposal's prefixes in a search-half order meets both (67% and 40%), but
confirms nothing where heads act only together (no one head improves alone), which this rule confirms.

Cost: held-out conditions for S, s and each S without one head (|S| + 2; fewer where they coincide), plus T when
it is none of those.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.search.membership import Proposal, contributions, heldout_counts, kept, needed
from headprune.search.parsimony import HeadContribution, HeadSet
from headprune.search.stats import Verdict, verdict

FAVOURED_SHARE = 0.9  # of alpha, for the candidate tested first
PREFIX_PART = 0.8  # of the proposal's share, for its prefixes (the other subsets of two heads or more: the rest)
RULE = "kept set among the proposal's subsets"  # what the journal records, so that a run of another rule is not resumed


@dataclass(frozen=True)
class HeldoutTest:
    """One of the selection's held-out verdicts, in the order tested: the candidate (``proposal``: its kept set;
    ``single``), its branch's share of alpha (fixed on discovery, plus the level of an earlier test that rejected),
    the set's part of that share (:func:`part`; 1 for the single head), the level the set was tested at (``alpha *
    share * part``), its counts and exact McNemar p, and whether it rejected."""

    candidate: str  # "proposal" (its kept set) or "single"
    heads: tuple[str, ...]
    share: float
    level: float
    rescued: int
    damaged: int
    p_value: float
    rejected: bool
    part: float = 1.0  # of ``share``, the set's (files before parts: 1, the proposal's own test)


@dataclass(frozen=True)
class Selection:
    """How the primary set was chosen (this module says how): the candidates, the membership tests of the
    proposal's heads (each head of S, in the order tested), the kept set, the held-out tests and which candidate
    the primary set is (``chosen``: ``proposal``, ``single``, or ``none`` when nothing was confirmed)."""

    proposal: tuple[str, ...]  # empty when no set of several heads was evaluated
    single: str
    favoured: str
    support: int  # heads of the proposal that help on the check half
    contributions: tuple[HeadContribution, ...]
    kept: tuple[str, ...]
    tests: tuple[HeldoutTest, ...]
    chosen: str
    alpha: float
    measure: str  # "accuracy" or "margin": what b and c count
    search: int  # examples: the search half, the check half, held-out
    check: int
    heldout: int


@dataclass(frozen=True)
class Chosen:
    """The primary set, its held-out verdict, and the record."""

    heads: HeadSet
    verdict: Verdict
    selection: Selection


def prefixes(proposal: Proposal) -> list[HeadSet]:
    """The proposal's prefixes: the first j heads of its membership test order, for j = 2..|S| (each in the set's
    own, sorted, order), fixed on discovery."""
    return [tuple(sorted(proposal.order[:j])) for j in range(2, len(proposal.order) + 1)]


def part(proposal: Proposal, heads: HeadSet) -> float:
    """The part of the proposal's share of alpha that a kept set ``heads`` is tested at: each of the proposal's
    subsets of two heads or more has one, fixed on discovery, and the parts add up to 1 (weighted Bonferroni), so
    whichever subset held-out keeps, the chance of confirming one that does not improve stays within the share. The
    prefixes share ``PREFIX_PART`` (the kept set is a prefix unless a head failed before a later one stayed), the
    other subsets the rest; a set of fewer than two heads, or not of the proposal, has none."""
    k, first = len(proposal.heads), prefixes(proposal)
    others = 2 ** k - 1 - k - len(first)
    if len(heads) < 2 or not set(heads) <= set(proposal.heads):
        return 0.0
    if heads in first:
        return (PREFIX_PART if others else 1.0) / len(first)
    return (1.0 - PREFIX_PART) / others


def select(proposal: Proposal | None, single: Head, heldout: Callable[[list[HeadSet]], list[EvalResult]],
           base: EvalResult, *, alpha: float, measure: str, tolerance: float, sizes: tuple[int, int]) -> Chosen:
    """Run the held-out stage above. ``heldout`` evaluates head sets on held-out (journalled), ``base`` is the intact
    model there, ``sizes`` the search and check halves' example counts."""
    sets = [(single,)] + (needed(proposal.heads) if proposal is not None else [])
    results = dict(zip(sets, heldout(sets)))
    found: tuple[HeadContribution, ...] = ()
    trimmed: HeadSet = ()
    if proposal is not None:
        found = contributions(proposal, heldout_counts(proposal, [results[s] for s in needed(proposal.heads)],
                                                       measure=measure, tolerance=tolerance), level=alpha)
        trimmed = kept(proposal.heads, found)
        if trimmed and trimmed not in results:
            results[trimmed] = heldout([trimmed])[0]
    # Fixed on discovery: the order, the shares and the proposal's family. A kept set of fewer than two heads is a
    # proposal test that does not reject (its one head's claim is the single's, tested on its own).
    favoured = "proposal" if proposal is not None and proposal.support >= 2 else "single"
    order = [favoured] + ([] if proposal is None else ["single" if favoured == "proposal" else "proposal"])
    shares = [1.0] if len(order) == 1 else [FAVOURED_SHARE, 1.0 - FAVOURED_SHARE]
    tests, verdicts, carried = [], {}, 0.0
    for candidate, share in zip(order, shares):
        share += carried
        carried = 0.0
        if candidate == "single":
            heads, weight = (single,), 1.0
        else:
            heads, weight = trimmed, part(proposal, trimmed)  # type: ignore[arg-type]
        if weight == 0:
            continue
        test = replace(verdict(base.correct, results[heads].correct, alpha=alpha), share=share * weight,
                       selected=candidate == "proposal" and heads != proposal.heads)  # type: ignore[union-attr]
        tests.append(HeldoutTest(candidate, tuple(map(str, heads)), share, test.size, test.rescued, test.damaged,
                                 test.p_value, test.confirmed, weight))
        verdicts[candidate] = heads, test
        carried = share * weight if test.confirmed else 0.0  # what this test had, never the other subsets' parts
    candidate = _primary(verdicts, favoured)
    heads, chosen = verdicts[candidate]
    outcome = candidate if chosen.confirmed else "none"
    record = Selection(tuple(map(str, proposal.heads)) if proposal is not None else (), str(single), favoured,
                       proposal.support if proposal is not None else 0, found, tuple(map(str, trimmed)),
                       tuple(tests), outcome, alpha, measure, sizes[0], sizes[1], base.n)
    return Chosen(heads, chosen, record)


def _primary(verdicts: dict[str, tuple[HeadSet, Verdict]], favoured: str) -> str:
    """The candidate the primary set comes from: the proposal's kept set when its test rejected (the larger claim),
    else the single head when its test rejected, else the favoured candidate where it was tested (a kept set of two
    heads or more), not confirmed."""
    for candidate in ("proposal", "single"):
        if candidate in verdicts and verdicts[candidate][1].confirmed:
            return candidate
    return favoured if favoured in verdicts else "single"


__all__ = ["FAVOURED_SHARE", "PREFIX_PART", "RULE", "Chosen", "HeldoutTest", "Selection", "part", "prefixes", "select"]
