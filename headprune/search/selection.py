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
   sequence, each at ``alpha``; the heads before the first failure form the kept set T.
2. **Verdicts**, as a fallback procedure (Wiens 2003): the first candidate's test at ``alpha * share``; the
   second's at its own share, plus the first's level when the first test rejected. The single's test is its
   exact McNemar verdict. The proposal's test is S's own held-out verdict (the *gate*); T passes it when the gate
   rejects, T is not empty and, where T is smaller than S, T's own held-out change is significant at the same
   level too.
3. The **primary set**: T when it passed; else s when its test rejected; else nothing is confirmed and the primary
   is T where the proposal was favoured and T is not empty, s otherwise.

Why the level holds after selection. The proposal and the single are fixed before held-out data is read, and each
verdict is an exact test on held-out data; the fallback procedure is a closed test with weighted Bonferroni
intersections, so the chance of rejecting a true "no improvement" for either candidate is at most ``alpha`` (two
sided; a confirmation is one-sided, so at most ``alpha / 2``), whatever the dependence between the two tests. A
head with no contribution to S enters T only when its own test in the fallback procedure rejects: at most ``alpha``
(``membership``). Where T is smaller than S, its improvement rests on S's test, on the dropped heads, and on T's
own held-out change, which was read after held-out data had chosen T and so is required as a safeguard, not
counted as an exact test; heads whose effects do not depend on each other make that safe (removing heads that do
not contribute cannot turn S's gain negative), and ``scripts/passengers.py`` measures it through this code with
heads that do interact.

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
from headprune.search.stats import Gate, Verdict, test_size, verdict

FAVOURED_SHARE = 0.9  # of alpha, for the candidate tested first
RULE = "held-out contributions"  # what the journal records, so that a run of another rule is not resumed


@dataclass(frozen=True)
class HeldoutTest:
    """One of the selection's held-out verdicts, in the order tested: the candidate, its share of alpha (fixed on
    discovery), the level it was tested at (its share, plus the level of an earlier test that rejected), its
    counts and exact McNemar p, and whether it rejected."""

    candidate: str  # "proposal" or "single"
    heads: tuple[str, ...]
    share: float
    level: float
    rescued: int
    damaged: int
    p_value: float
    rejected: bool


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
    favoured = "proposal" if proposal is not None and proposal.support >= 2 else "single"
    order = [favoured] + ([] if proposal is None else ["single" if favoured == "proposal" else "proposal"])
    shares = [1.0] if len(order) == 1 else [FAVOURED_SHARE, 1.0 - FAVOURED_SHARE]
    tests, passed, carried = [], {}, 0.0
    for candidate, share in zip(order, shares):
        share += carried
        heads = (single,) if candidate == "single" else proposal.heads  # type: ignore[union-attr]
        test = verdict(base.correct, results[heads].correct, alpha=alpha)
        level = test_size(alpha, share)
        rejected = test.rescued > test.damaged and test.p_value < level
        tests.append(HeldoutTest(candidate, tuple(map(str, heads)), share, level, test.rescued, test.damaged,
                                 test.p_value, rejected))
        passed[candidate] = share, rejected
        carried = share if rejected else 0.0
    candidate, primary, share, gate = _primary(proposal, single, trimmed, passed, results, base, favoured, alpha)
    chosen = replace(verdict(base.correct, results[primary].correct, alpha=alpha), share=share, gate=gate)
    outcome = candidate if chosen.confirmed else "none"
    record = Selection(tuple(map(str, proposal.heads)) if proposal is not None else (), str(single), favoured,
                       proposal.support if proposal is not None else 0, found, tuple(map(str, trimmed)),
                       tuple(tests), outcome, alpha, measure, sizes[0], sizes[1], base.n)
    return Chosen(primary, chosen, record)


def _primary(proposal: Proposal | None, single: Head, trimmed: HeadSet, passed: dict, results: dict,
             base: EvalResult, favoured: str, alpha: float) -> tuple[str, HeadSet, float, Gate | None]:
    """The candidate the primary set comes from, the set, the share of alpha its test had, and the gate it must
    pass (a set cut down from S)."""
    if proposal is not None and trimmed and not (trimmed == (single,) and passed["single"][1]):
        share, gate_rejected = passed["proposal"]
        gate = None
        if trimmed != proposal.heads:
            full = verdict(base.correct, results[proposal.heads].correct, alpha=alpha)
            gate = Gate(tuple(map(str, proposal.heads)), full.rescued, full.damaged, full.p_value)
        own = verdict(base.correct, results[trimmed].correct, alpha=alpha)
        if gate_rejected and own.rescued > own.damaged and own.p_value < test_size(alpha, share):
            return "proposal", trimmed, share, gate
        if not passed["single"][1] and favoured == "proposal":  # nothing confirmed: the vetted proposal
            return "proposal", trimmed, share, gate
    return "single", (single,), passed["single"][0], None


__all__ = ["FAVOURED_SHARE", "RULE", "Chosen", "HeldoutTest", "Selection", "select"]
