"""Selection: the primary set, chosen among candidates fixed on discovery by held-out tests at level alpha.

Discovery fixes, before any held-out number is read (``headprune.search.improve``):

- the **proposal** S: the best set of several heads on the search half, with two orders of its heads: the order
  of its fixed sequence (each head's gain on the search half, own or within S, ``headprune.search.sequence``) and the order of
  its membership tests (``headprune.search.membership``);
- the **single** s: the best single head on all of discovery (``headprune.search.stages.single_order``).

On held-out (this module), two branches, each with ``BRANCH_SHARE`` (half) of ``alpha``:

1. **The proposal's branch** is its fixed sequence (``headprune.search.sequence``): the block it starts with
   (the shortest prefix holding half the best prefix's gain on the search half: one head, or heads that act
   together) against the intact model, each head of a block of several against the block without it, then each
   increment P_j against P_(j-1): exact one-sided sign tests on the check half and held-out together at
   ``alpha / 2`` times the branch's share, stopping at the first that does not reject. The last prefix reached, when
   it has two heads or more, is the set the branch confirms (a stop after one head confirms nothing here: that
   head's claim is the single's branch).
2. **The single's branch** is s's exact McNemar test at its share.
3. A branch whose every hypothesis was rejected (the single's test; every step of the sequence) passes its
   share on to the other, which is tested again at the sum (a fallback, Wiens 2003; the two-node graphical
   procedure of Bretz et al. 2009, so the order the branches are run in does not matter). No level is spent twice:
   a share serves its own branch and moves only once all of that branch's claims are made.
4. The **primary set**: the prefix the sequence confirmed; else s when its test rejected; else nothing is confirmed
   and the primary set shown is the membership tests' kept set T where it has two heads or more (those tests keep
   a head with no contribution to S with probability at most ``alpha``), s otherwise.

Why the level holds after selection: every hypothesis tested (the block, each head within it, each increment, s
improving) is fixed on discovery, and each test reads examples that did not choose it; a fixed sequence is a closed
test, and so is the weighted Bonferroni procedure over the two branches, so the chance of confirming a set that does
not improve, or holding a head that adds nothing to the heads beside it in the block or before it, is at most
``alpha`` two-sided, ``alpha / 2`` for an improvement, for any model. The prefix shipped is chosen by where the sequence stopped: its held-out change is then marked
``selected`` (exploratory) unless it is the whole proposal, and its interval is simultaneous over the prefixes the
sequence could have shipped. An unconfirmed kept set T was chosen by the membership tests on held-out: its
estimate is marked the same way. The designs measured before this rule (docs/find.md, "Designs measured for a fresh
test", ``scripts/selection_designs.py``) say why this one: it meets both of issue 54's power floors with every test
on fresh examples, and, by its block, confirms heads that improve the task only together.

Cost: held-out conditions for s, the sequence's prefixes from its block on, the block without each of its heads
(a block of several), and S without each of its heads (the membership tests), plus T when it is none of those.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.search.guards import GuardEffect
from headprune.search.membership import Proposal, contributions, heldout_counts, kept, needed
from headprune.search.parsimony import HeadContribution, HeadSet
from headprune.search.sequence import hypotheses, increments, prefixes, reached, run, sets_read
from headprune.search.stats import Step, Verdict, test_size, verdict

BRANCH_SHARE = 0.5  # of alpha, for each of the two branches (the proposal's sequence, the single head)
RULE = "fixed sequence of the proposal's prefixes from a block"  # what the journal records, so that a run of another rule is not resumed


@dataclass(frozen=True)
class HeldoutTest:
    """The single head's held-out verdict: its heads, its branch's share of alpha (``BRANCH_SHARE``, plus the
    proposal's when the whole sequence rejected), the level it was tested at (``alpha * share``), its counts and
    exact McNemar p, and whether it rejected. (Files of schema 3 and 4 also hold the proposal's kept set's test,
    ``candidate`` ``proposal``, at its ``part`` of its branch's share.)"""

    candidate: str  # "single" ("proposal": files of schema 3 and 4)
    heads: tuple[str, ...]
    share: float
    level: float
    rescued: int
    damaged: int
    p_value: float
    rejected: bool
    part: float = 1.0  # files of schema 4: of ``share``, the kept set's


@dataclass(frozen=True)
class Selection:
    """How the primary set was chosen (this module says how): the candidates, the membership tests of the
    proposal's heads (in the order tested) and the kept set, the single's test, the proposal's fixed sequence
    (its order, each increment tested, and its branch's share), and which candidate the primary set is (``chosen``:
    ``proposal``, ``single``, or ``none`` when nothing was confirmed)."""

    proposal: tuple[str, ...]  # empty when no set of several heads was evaluated
    single: str
    contributions: tuple[HeadContribution, ...]
    kept: tuple[str, ...]
    tests: tuple[HeldoutTest, ...]
    chosen: str
    alpha: float
    measure: str  # "accuracy" or "margin": what b and c count
    search: int  # examples: the search half, the check half, held-out
    check: int
    heldout: int
    sequence: tuple[str, ...] = ()  # schema 5: the proposal's heads in the sequence's order
    steps: tuple[Step, ...] = ()  # schema 5: each increment tested, in order, up to the first that did not reject
    share: float = 0.0  # schema 5: the proposal's branch's share of alpha (its own, plus the single's if it rejected)
    block: int = 1  # schema 5: the heads the sequence starts with, together (``headprune.search.sequence``)
    guard_stop: tuple[str, ...] = ()  # with guards: the prefix that broke one on held-out (the one before it ships)
    guard_stop_effects: tuple[GuardEffect, ...] = ()  # its guards' held-out effects
    favoured: str = ""  # files of schema 3 and 4: the candidate tested first
    support: int = 0  # files of schema 3 and 4: heads of the proposal that helped on the check half


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
    hyps = hypotheses(proposal.sequence, proposal.block) if proposal is not None else []
    read = sets_read(proposal.sequence, proposal.block) if proposal is not None else []
    sets = list(dict.fromkeys([(single,), *read, *(needed(proposal.heads) if proposal is not None else [])]))
    results = dict(zip(sets, heldout(sets)))
    found: tuple[HeadContribution, ...] = ()
    trimmed: HeadSet = ()
    on_heldout: tuple = ()
    if proposal is not None:
        found = contributions(proposal, heldout_counts(proposal, [results[s] for s in needed(proposal.heads)],
                                                       measure=measure, tolerance=tolerance), level=alpha)
        trimmed = kept(proposal.heads, found)
        on_heldout = increments(hyps, results, base, measure=measure, tolerance=tolerance)
    own = verdict(base.correct, results[(single,)].correct, alpha=alpha)
    single_share, proposal_share = (BRANCH_SHARE, 1.0 - BRANCH_SHARE) if proposal is not None else (1.0, 0.0)
    single_test, steps, single_done, proposal_done = replace(own, share=single_share), (), False, False
    for _ in range(2):  # a branch that rejects passes its share on once; the other is then tested at the sum
        if not single_done:
            single_test = replace(own, share=single_share)
            if single_test.confirmed:
                single_done = True
                if proposal is not None and not proposal_done:  # a share moves once, to a branch still testing
                    proposal_share += single_share
        if proposal is not None and not proposal_done:
            # One-sided at alpha/2 times the share: a confirmed set's claim is an improvement, as the single's.
            steps = run(hyps, proposal.steps, on_heldout, level=test_size(alpha, proposal_share / 2))
            if reached(steps) == len(proposal.heads):
                proposal_done = True
                if not single_done:
                    single_share += proposal_share
    passed = reached(steps)
    tests = (HeldoutTest("single", (str(single),), single_test.share, single_test.size, single_test.rescued,
                         single_test.damaged, single_test.p_value, single_test.confirmed),)
    if passed >= 2:  # the last prefix reached: each of its heads adds to the heads beside or before it
        heads, outcome = prefixes(proposal.sequence)[passed - 1], "proposal"  # type: ignore[union-attr]
        shippable = len(proposal.heads) - max(2, proposal.block) + 1  # type: ignore[union-attr]
        chosen = replace(verdict(base.correct, results[heads].correct, alpha=alpha), share=proposal_share,
                         steps=tuple(step for step in steps if step.rejected), family=shippable,
                         selected=heads != proposal.heads)  # type: ignore[union-attr]
    elif single_test.confirmed:
        heads, chosen, outcome = (single,), single_test, "single"
    elif len(trimmed) >= 2:  # nothing confirmed: the kept set shown, with the sequence that stopped before it
        if trimmed not in results:
            results[trimmed] = heldout([trimmed])[0]
        heads, outcome = trimmed, "none"
        chosen = replace(verdict(base.correct, results[trimmed].correct, alpha=alpha), share=proposal_share,
                         steps=steps, selected=trimmed != proposal.heads)  # type: ignore[union-attr]
    else:
        heads, chosen, outcome = (single,), single_test, "none"
    record = Selection(tuple(map(str, proposal.heads)) if proposal is not None else (), str(single), found,
                       tuple(map(str, trimmed)), tests, outcome, alpha, measure, sizes[0], sizes[1], base.n,
                       tuple(map(str, proposal.sequence)) if proposal is not None else (), steps, proposal_share,
                       proposal.block if proposal is not None else 1)
    return Chosen(heads, chosen, record)


def shortened(chosen: Chosen, heads: HeadSet, result: EvalResult, base: EvalResult, *, alpha: float,
              stop: HeadSet, effects: tuple[GuardEffect, ...]) -> Chosen:
    """``chosen`` (a prefix the sequence confirmed) cut back to the shorter confirmed prefix ``heads`` (``result``: its
    held-out results), because the guards' fixed sequence stopped at ``stop`` (``effects``: its guards on held-out;
    ``headprune.search.guard_search.guard_chain``). Its claims are the steps up to it; its estimate is exploratory,
    its interval simultaneous over the same prefixes as before."""
    names = {str(h) for h in heads}
    made = replace(verdict(base.correct, result.correct, alpha=alpha), share=chosen.verdict.share,
                   steps=tuple(step for step in chosen.verdict.steps if set(step.prefix) <= names),
                   family=chosen.verdict.family, selected=True)
    record = replace(chosen.selection, guard_stop=tuple(map(str, stop)), guard_stop_effects=effects)
    return Chosen(heads, made, record)


__all__ = ["BRANCH_SHARE", "RULE", "Chosen", "HeldoutTest", "Selection", "select", "shortened"]
