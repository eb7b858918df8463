"""The proposal's fixed sequence from a block, beside the single head: find's rule from 0.3.1 (records of schema 5).

Discovery fixes, before any held-out number is read (``headprune.search.improve``):

- the **proposal** S: the best set of several heads on the search half, with two orders of its heads: the order of
  its fixed sequence (each head's gain on the search half, own or within S, ``headprune.search.sequence``) and the
  order of its membership tests (``headprune.search.membership``);
- the **single** s: the best single head on all of discovery (``headprune.search.stages.single_order``).

On held-out, two branches, each with ``BRANCH_SHARE`` (half) of ``alpha``:

1. **The proposal's branch** is its fixed sequence (``headprune.search.sequence``): the block it starts with (the
   shortest prefix holding half the best prefix's gain on the search half: one head, or heads that act together)
   against the intact model, each head of a block of several against the block without it, then each increment
   P_j against P_(j-1): exact one-sided sign tests on the check half and held-out together at ``alpha / 2`` times
   the branch's share, stopping at the first that does not reject. The last prefix reached, when it has two heads or
   more, is the set the branch confirms (a stop after one head confirms nothing here: that head's claim is the
   single's branch).
2. **The single's branch** is s's exact McNemar test at its share.
3. A branch whose every hypothesis was rejected (the single's test; every step of the sequence) passes its share on
   to the other, which is tested again at the sum (a fallback, Wiens 2003; the two-node graphical procedure of Bretz
   et al. 2009, so the order the branches are run in does not matter). No level is spent twice: a share serves its
   own branch and moves only once all of that branch's claims are made.
4. The **primary set**: the prefix the sequence confirmed; else s when its test rejected; else nothing is confirmed
   and the primary set shown is the membership tests' kept set T where it has two heads or more (those tests keep a
   head with no contribution to S with probability at most ``alpha``), s otherwise.

Why the level holds after selection: every hypothesis tested (the block, each head within it, each increment, s
improving) is fixed on discovery, and each test reads examples that did not choose it; a fixed sequence is a closed
test, and so is the weighted Bonferroni procedure over the two branches, so the chance of confirming a set that does
not improve, or holding a head that adds nothing to the heads beside it in the block or before it, is at most
``alpha`` two-sided, ``alpha / 2`` for an improvement, for any model. The prefix shipped is chosen by where the
sequence stopped: its held-out change is then marked ``selected`` (exploratory) unless it is the whole proposal, and
its interval is simultaneous over the prefixes the sequence could have shipped. An unconfirmed kept set T was chosen
by the membership tests on held-out: its estimate is marked the same way. docs/find.md ("Designs measured for a
fresh test", ``scripts/selection_designs.py``) says why this rule followed the rule of parts: it met both power
floors with every test on fresh examples and, by its block, confirms heads that improve the task only together.

Cost: held-out conditions for s, the sequence's prefixes from its block on, the block without each of its heads
(a block of several), and S without each of its heads (the membership tests), plus T when it is none of those.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.search.membership import contributions, heldout_counts, kept
from headprune.search.parsimony import HeadContribution, HeadSet
from headprune.search.proposal import Proposal, Searched, needed
from headprune.search.rules.base import SelectionRule, register
from headprune.search.rules.words import (candidates, measure_words, membership_shown, step_words, steps_table,
                                          tests_table)
from headprune.search.selection import Chosen, HeldoutTest, Selection
from headprune.search.sequence import Hypothesis, hypotheses, increments, prefixes, reached, run, sets_of
from headprune.search.stats import Step, Verdict, test_size, verdict

BRANCH_SHARE = 0.5  # of alpha, for each of the two branches (the proposal's sequence, the single head)


class FixedSequence(SelectionRule):
    """The proposal's fixed sequence from a block and the single head, each at half of alpha (the module docstring)."""

    name = "sequence"
    runs = True
    journal = "fixed sequence of the proposal's prefixes from a block"
    shipped = "prefixes"

    def hypotheses(self, order: Sequence[Head], block: int) -> list[Hypothesis]:
        return hypotheses(order, block)

    def planned(self, size: int) -> tuple[int, int]:
        # Discovery: the prefixes between the first head and S, and the block without each of its heads where that is
        # no prefix (at most size - 2 of each). Held-out: the prefixes but S, and the block's other sets.
        return 2 * max(0, size - 2), (size - 1) + max(0, size - 2)

    def select(self, proposal: Proposal | None, single: Head, heldout: Callable[[list[HeadSet]], list[EvalResult]],
               base: EvalResult, *, alpha: float, measure: str, tolerance: float, sizes: tuple[int, int],
               searched: Searched | None = None) -> Chosen:
        hyps = hypotheses(proposal.sequence, proposal.block) if proposal is not None else []
        sets = list(dict.fromkeys([(single,), *sets_of(hyps), *(needed(proposal.heads) if proposal else [])]))
        results = dict(zip(sets, heldout(sets)))
        found: tuple[HeadContribution, ...] = ()
        trimmed: HeadSet = ()
        if proposal is not None:
            found = contributions(proposal, heldout_counts(proposal, [results[s] for s in needed(proposal.heads)],
                                                           measure=measure, tolerance=tolerance), level=alpha)
            trimmed = kept(proposal.heads, found)
        on_heldout = increments(hyps, results, base, measure=measure, tolerance=tolerance)
        own = verdict(base.correct, results[(single,)].correct, alpha=alpha)
        single_test, steps, proposal_share = self._branches(own, proposal, hyps, on_heldout, alpha)
        passed = reached(steps)
        tests = (HeldoutTest("single", (str(single),), single_test.share, single_test.size, single_test.rescued,
                             single_test.damaged, single_test.p_value, single_test.confirmed),)
        if passed >= 2:  # the last prefix reached: each of its heads adds to the heads beside or before it
            heads, outcome = prefixes(proposal.sequence)[passed - 1], "proposal"  # type: ignore[union-attr]
            shippable = len(proposal.heads) - max(2, proposal.block) + 1  # type: ignore[union-attr]
            chosen = replace(verdict(base.correct, results[heads].correct, alpha=alpha), share=proposal_share,
                             steps=tuple(step for step in steps if step.rejected), family=shippable,
                             selected=heads != proposal.heads, rule=self.name)  # type: ignore[union-attr]
        elif single_test.confirmed:
            heads, chosen, outcome = (single,), single_test, "single"
        elif len(trimmed) >= 2:  # nothing confirmed: the kept set shown, with the sequence that stopped before it
            if trimmed not in results:
                results[trimmed] = heldout([trimmed])[0]
            heads, outcome = trimmed, "none"
            chosen = replace(verdict(base.correct, results[trimmed].correct, alpha=alpha), share=proposal_share,
                             steps=steps, selected=trimmed != proposal.heads,  # type: ignore[union-attr]
                             rule=self.name)
        else:
            heads, chosen, outcome = (single,), single_test, "none"
        record = Selection(tuple(map(str, proposal.heads)) if proposal is not None else (), str(single), found,
                           tuple(map(str, trimmed)), tests, outcome, alpha, measure, sizes[0], sizes[1], base.n,
                           tuple(map(str, proposal.sequence)) if proposal is not None else (), steps, proposal_share,
                           proposal.block if proposal is not None else 1, rule=self.name)
        return Chosen(heads, chosen, record)

    @staticmethod
    def _branches(own: Verdict, proposal: Proposal | None, hyps: list[Hypothesis], on_heldout: tuple, alpha: float
                  ) -> tuple[Verdict, tuple[Step, ...], float]:
        """The two branches at their shares (a branch that rejects passes its share on once; the other is then tested
        at the sum): the single's test, the sequence's steps, and the proposal's final share."""
        single_share, proposal_share = (BRANCH_SHARE, 1.0 - BRANCH_SHARE) if proposal is not None else (1.0, 0.0)
        single_test, steps, single_done, proposal_done = replace(own, share=single_share), (), False, False
        for _ in range(2):
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
        return single_test, steps, proposal_share

    def summary(self, chosen: Chosen) -> str:
        heads, sel = chosen.heads, chosen.selection
        shipped = ",".join(map(str, heads))
        proposal = f"proposal {','.join(sel.proposal) or 'none'} (search half), single {sel.single}"
        n = sel.check + sel.heldout
        stop = next((s for s in sel.steps if not s.rejected), None)
        (single,) = sel.tests
        test = f"McNemar p={single.p_value:.2g} at {single.level:g}"
        if sel.chosen == "proposal":
            decided = ", ".join(step_words(s) for s in sel.steps if s.rejected)
            then = f"; then it stopped at {step_words(stop)}" if stop is not None else ""
            return (f"{proposal}; ships {shipped}, confirmed by the proposal's fixed sequence on the check half and "
                    f"held-out ({n} examples) at one-sided {sel.steps[0].level:g}: {decided}{then}")
        sequence = (f"the proposal's fixed sequence stopped at step {len(sel.steps)} ({step_words(stop)} > "
                    f"{stop.level:g}, {n} examples)" if stop is not None else "no proposal to test")
        if sel.chosen == "single":
            return f"{proposal}; ships {shipped}, confirmed by its own test on held-out ({test}); {sequence}"
        shown = "the membership tests' kept set" if len(heads) > 1 else "the single head"
        return (f"{proposal}; nothing confirmed: {sequence}, the single's {test}; shown: {shipped} ({shown}, not a "
                "claim)")

    def section(self, result) -> list[str]:  # noqa: ANN001 (a FindResult)
        sel = result.selection
        lines = ["## How the primary set was chosen", "",
                 candidates(sel) + f" Each is a branch with {BRANCH_SHARE:.0%} of alpha={sel.alpha:g}; a branch whose "
                 "claims are all made passes its share on to the other (a fallback: no level is spent twice).", ""]
        lines += self._sequence_table(sel)
        lines += ["**The single head's test**: exact McNemar on held-out, at its branch's share.", ""]
        lines += tests_table(sel)
        chosen = {"proposal": "the last prefix the sequence reached", "single": "the single head",
                  "none": "no candidate passed; the primary set is reported, not confirmed (the kept set where it has "
                          "two heads or more, else the single head; where held-out chose it, its estimate is "
                          "exploratory)"}[sel.chosen]
        return lines + ["", f"Primary set: {chosen}.", ""] + membership_shown(sel)

    @staticmethod
    def _sequence_table(sel: Selection) -> list[str]:
        if not sel.steps:
            return []
        lines = [f"**The proposal's fixed sequence** (its claim): the heads in the order `{','.join(sel.sequence)}` "
                 "(each head's gain on the search half, its own or, where larger, within the proposal). It starts with "
                 "a block, the shortest prefix holding half the best prefix's gain on the search half (one head, or "
                 "heads that act together), against the intact model; each head of a block of several against the "
                 "block without it; then each later prefix against the one before it. Each on "
                 f"{measure_words(sel)}, on the check half ({sel.check}) and held-out ({sel.heldout}) together: b = "
                 "better with the set removed than with the one it is tested against, c = worse, p the one-sided exact "
                 f"sign test, at alpha/2 x the branch's share ({sel.share:g}); the sequence stops at the first step "
                 "that does not reject, and the last prefix reached of two heads or more is the set it confirms: it "
                 "improves, and each of its heads adds to the heads beside it in the block or before it.", ""]
        lines += steps_table(sel.steps)
        # The block's step, its heads' steps where it has several, then one step per later head.
        untested = 1 + (sel.block if sel.block > 1 else 0) + len(sel.sequence) - sel.block - len(sel.steps)
        return lines + ([""] if not untested else ["", f"Not tested (after the first that did not reject): "
                                                       f"{untested}.", ""])

    def claim(self, v: Verdict, *, detail: bool = False) -> str:
        if detail:
            return (f"its claim is a fixed sequence of {len(v.steps)} exact one-sided tests on the check half and "
                    "held-out (the block it starts with against the original, each head against the heads beside it "
                    f"in the block or before it), each at level {v.steps[0].level:g}, confirmed when every one rejects")
        passed = sum(step.rejected for step in v.steps)
        outcome = (("its step rejected" if passed == 1 else f"each of {passed} steps rejected") if v.confirmed else
                   f"the sequence stopped at step {passed + 1}, p={v.steps[-1].p_value:.3g}")
        return f"fixed sequence at one-sided level {v.steps[0].level:g}: {outcome}"


SEQUENCE = register(FixedSequence())

__all__ = ["BRANCH_SHARE", "SEQUENCE", "FixedSequence"]
