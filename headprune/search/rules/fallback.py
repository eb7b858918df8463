"""The proposal's steps as a graph with fallbacks, beside two single heads: find's rule.

Discovery fixes, before any held-out number is read (``headprune.search.improve``): the **proposal** S (the best set
of several heads on the search half); the order of its heads (each head's gain on the search half, its own or, where
larger, within S: ``headprune.search.sequence.gain_order``); the **block** the steps start with, the first prefix of
the order holding at least ``BLOCK_SHARE`` of the next prefix's gain on the search half and ``BLOCK_FLOOR`` of the
best prefix's (one head, or heads that improve the task only together: the first holds little of what the two
hold); the **single** s, the best single head on all of discovery; and s', the best single head on the search half
(both as ``single_order`` ranks them).

The hypotheses (``headprune.search.rules.fallback_graph``), each an exact one-sided sign test on the check half and
held-out together, which chose none of them (``b``: examples the tested set gets right and the set it is tested
against wrong; ``c``: the reverse): the block improves; for a block of several heads, each of its heads adds to the
rest of it; for every set K of kept heads (the block, then any later heads, in the order) and every head h after K's
last, h adds to K; s' improves (unless it is the first step already); and s improves, by its exact McNemar test on
held-out alone (the check half chose it).

They are the nodes of a graphical procedure (Bretz et al. 2009, ``headprune.search.graphical``) at one-sided
``alpha / 2``. s starts with ``SINGLE_SHARE`` of the level, s' with ``SEARCHED_SHARE``, the block's first step with
the rest. A step that rejects passes its level on: within the block to its next step; after it, ``NEXT`` to the next
head in the order (tested against the heads kept so far) and the rest to the heads after that, ``NEXT`` of what is
left to each in turn. A step that does not reject passes nothing on, but the heads after it were given level by the
step before it: a null head the search half ordered ahead of a real one is skipped instead of ending the steps (not a
null first step: where it does not reject, only s and s' hold level). A step with no head after it passes its level
to s and s' (half each), and a single that rejects to the block's first step.

The set shipped: the largest set whose steps all rejected (its block, then each head against the heads kept before
it; one head where the first step alone rejects), the earliest among sets as large, s' as a step of its own after the
proposal's; else s where its test rejected; else nothing is confirmed, and the set shown is the membership tests'
kept set T (``headprune.search.membership``) where it has two heads or more, s otherwise.

Why the level holds after selection: every hypothesis, share and transition is fixed on discovery (by the order, the
block and s'), and each test reads examples that did not choose it; a graphical procedure is a closed test of
weighted Bonferroni tests, so the chance that any of its rejections is wrong is at most ``alpha / 2`` for any model
and however the tests depend on each other. Level reaches a step only from the step before it, so a step rejects only
after every step before it did: a shipped set's claims are rejections (it improves: its block does, and each later
head adds to it; each of its heads adds to the heads beside it in the block or kept before it), all wrong together
with probability at most ``alpha / 2``, whichever confirmed set is shipped. Its held-out change is exploratory
(``selected``) unless it is all of S, and its interval is simultaneous over every set the steps could ship.

What it buys and costs, measured through find's own code against the fixed sequence it replaced
(``headprune.search.rules.sequence``, which stopped at the first step that did not reject and gave s half of alpha):
docs/find.md. Held-out conditions: every set its steps compare that level reaches (up to every subset of S), s, s'.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.search.binomial import upper_tail
from headprune.search.graphical import reject
from headprune.search.membership import contributions, heldout_counts, kept
from headprune.search.parsimony import HeadSet, counts
from headprune.search.proposal import Proposal, Searched, needed
from headprune.search.rules.base import SelectionRule, register
from headprune.search.rules.fallback_graph import (BLOCK_FLOOR, BLOCK_SHARE, NEXT, SEARCHED_SHARE, SINGLE_SHARE,
                                                   local_block, plan, plan_of)
from headprune.search.rules.words import (candidates, measure_words, membership_shown, step_words, steps_table,
                                          tests_table)
from headprune.search.selection import Chosen, HeldoutTest, Selection
from headprune.search.sequence import Hypothesis
from headprune.search.stats import Step, Verdict, test_size, verdict


class Fallback(SelectionRule):
    """The proposal's steps as a graph with fallbacks, beside the single head (the module docstring)."""

    name = "fallback"
    journal = "graph of the proposal's steps with fallbacks past a step that does not reject, beside two singles"
    runs = True
    searched_single = True

    def block(self, gains: Sequence[int]) -> int:
        return local_block(gains)

    def hypotheses(self, order: Sequence[Head], block: int) -> list[Hypothesis]:
        return list(plan(order, block).hypotheses)  # the proposal's steps (s' is counted by the screen)

    def planned(self, size: int) -> tuple[int, int]:
        # Every subset of S the steps compare: at most all of them, less S, its drop-one sets and its heads alone
        # (the membership tests' and the order's); on held-out, less the membership tests' sets, and s' alone.
        return max(0, 2**size - 2 - 2 * size), 2**size - 1 - size

    def select(self, proposal: Proposal | None, single: Head, heldout: Callable[[list[HeadSet]], list[EvalResult]],
               base: EvalResult, *, alpha: float, measure: str, tolerance: float, sizes: tuple[int, int],
               searched: Searched | None = None) -> Chosen:
        run = _Run(proposal, single, searched, heldout, base, alpha=alpha, measure=measure, tolerance=tolerance)
        own = run.verdict((single,))
        if proposal is None:  # the single alone, at all of alpha
            test = replace(own, share=1.0)
            record = Selection((), str(single), (), (), (_single_test(single, test),),
                               "single" if test.confirmed else "none", alpha, measure, sizes[0], sizes[1], base.n,
                               rule=self.name)
            return Chosen((single,), test, record)
        run.read(needed(proposal.heads))
        found = contributions(proposal, heldout_counts(proposal, [run.results[s] for s in needed(proposal.heads)],
                                                       measure=measure, tolerance=tolerance), level=alpha)
        trimmed = kept(proposal.heads, found)
        rejected, last = reject(run.plan.graph, run.p_values, test_size(alpha, 0.5), run.rejects)
        steps = [run.step(i, last[i]) if i in run.held else None for i in range(len(run.plan.hypotheses))]
        test = replace(own, share=2 * last[-1] / alpha)  # s's share of alpha at the end
        heads, chosen, outcome = run.shipped(steps, rejected, test, trimmed, rule=self.name)
        record = Selection(tuple(map(str, proposal.heads)), str(single), found, tuple(map(str, trimmed)),
                           (_single_test(single, test),), outcome, alpha, measure, sizes[0], sizes[1], base.n,
                           tuple(map(str, proposal.sequence)), tuple(s for s in steps if s is not None),
                           run.plan.graph.weights[0], proposal.block, rule=self.name,
                           searched=str(searched[0]) if searched is not None else "")
        return Chosen(heads, chosen, record)

    def summary(self, chosen: Chosen) -> str:
        heads, sel = chosen.heads, chosen.selection
        shipped = ",".join(map(str, heads))
        proposal = f"proposal {','.join(sel.proposal) or 'none'} (search half), single {sel.single}"
        (single,) = sel.tests
        test = f"McNemar p={single.p_value:.2g} at {single.level:g}"
        skipped = ", ".join(step_words(s) for s in sel.steps if not s.rejected)
        passed = "; no level reached it" if not single.level else ""
        if sel.chosen in ("proposal", "searched"):
            decided = ", ".join(f"{step_words(s)} at {s.level:.2g}" for s in chosen.verdict.steps)
            by = "the proposal's steps" if sel.chosen == "proposal" else "its own step (the single on the search half)"
            return (f"{proposal}; ships {shipped}, confirmed by {by} on the check half and held-out "
                    f"({sel.check + sel.heldout} examples), a graph at one-sided {sel.alpha / 2:g} in all: "
                    f"{decided}" + (f"; did not reject: {skipped}" if skipped else ""))
        steps = f"the proposal's steps confirmed no set (did not reject: {skipped})" if sel.steps else \
            "no proposal to test"
        if sel.chosen == "single":
            return f"{proposal}; ships {shipped}, confirmed by its own test on held-out ({test}); {steps}"
        shown = "the membership tests' kept set" if len(heads) > 1 else "the single head"
        return (f"{proposal}; nothing confirmed: {steps}; the single's {test}{passed}; shown: {shipped} ({shown}, not "
                "a claim)")

    def section(self, result) -> list[str]:  # noqa: ANN001 (a FindResult)
        sel = result.selection
        searched = (f" The **single on the search half**, `{sel.searched}`, is tested like the steps: as the first "
                    "step where it is the proposal's first head, else as a step of its own at "
                    f"{SEARCHED_SHARE:.0%} of the level to start with." if sel.searched else "")
        lines = ["## How the primary set was chosen", "", candidates(sel) + searched, ""]
        if sel.steps:
            lines += [f"**The proposal's steps** (its claim): the heads in the order `{','.join(sel.sequence)}` (each "
                      "head's gain on the search half, its own or, where larger, within the proposal), starting with "
                      f"a block of {sel.block} (the first prefix holding {BLOCK_SHARE:.0%} of the next prefix's gain "
                      f"there and {BLOCK_FLOOR:.0%} of the best prefix's: one head, or heads that act together). The "
                      "block against the intact model, each head of a block of several against the rest of it, then "
                      "each later head against the heads kept before "
                      f"it, each on {measure_words(sel)}, on the check half ({sel.check}) and held-out "
                      f"({sel.heldout}) together: b = better with the set removed than with the one it is tested "
                      "against, c = worse, p the one-sided exact sign test. The steps are a graph (Bretz et al. 2009) "
                      f"at one-sided {sel.alpha / 2:g} in all: a step that rejects passes its level on, {NEXT:.0%} "
                      "to the next head and the rest to the heads after it, so a step that does not reject ends "
                      "nothing; each step is tested at the level that reached it. The largest set whose steps all "
                      "rejected is the set confirmed: it improves, and each of its heads adds to the heads beside it "
                      "in the block or kept before it.", ""]
            lines += steps_table(sel.steps)
            untested = len(plan_of(sel).hypotheses) - len(sel.steps)
            lines += [""] + ([f"Not tested (no level reached them): {untested}.", ""] if untested else [])
        lines += [f"**The single head's test**: exact McNemar on held-out, at {SINGLE_SHARE:.0%} of alpha to start "
                  "with, and the level that steps with no head left after them pass on.", ""] + tests_table(sel)
        chosen = {"proposal": "the largest set the proposal's steps confirmed", "single": "the single head",
                  "searched": "the single on the search half, confirmed by its step",
                  "none": "nothing was confirmed; the primary set is reported, not confirmed (the kept set where it "
                          "has two heads or more, else the single head)"}[sel.chosen]
        if sel.guard_stop and sel.chosen == "proposal":  # the guards' sequence stopped at a larger confirmed set
            chosen += f" that keeps the guards (the next, {','.join(sel.guard_stop)}, did not on held-out)"
        return lines + ["", f"Primary set: {chosen}.", ""] + membership_shown(sel)

    def claim(self, v: Verdict, *, detail: bool = False) -> str:
        if detail:
            return (f"its claim is {len(v.steps)} exact one-sided tests on the check half and held-out (the block or "
                    "first head against the original, each head of a block against the rest of it, each later head "
                    "against the heads kept before it), steps of a graphical procedure (Bretz et al. 2009) at "
                    f"one-sided level {v.alpha / 2:g} in all, each at the level that reached it (at least "
                    f"{min(s.level for s in v.steps):.2g}), confirmed when every one rejects")
        if v.confirmed:
            done = "its step rejected" if len(v.steps) == 1 else f"each of {len(v.steps)} steps rejected"
            return f"graph of steps at one-sided level {v.alpha / 2:g} in all: {done}"
        done = sum(s.rejected for s in v.steps)
        return (f"graph of steps at one-sided level {v.alpha / 2:g} in all: no set confirmed ({done} of "
                f"{len(v.steps)} steps tested rejected)")


FALLBACK = register(Fallback())


class _Run:
    """One held-out stage of the rule: the held-out results read so far, and the tests of the graph's steps."""

    def __init__(self, proposal: Proposal | None, single: Head, searched: Searched | None,
                 heldout: Callable[[list[HeadSet]], list[EvalResult]], base: EvalResult, *, alpha: float,
                 measure: str, tolerance: float) -> None:
        self.proposal, self.single, self.heldout, self.base = proposal, single, heldout, base
        self.alpha, self.measure, self.tolerance = alpha, measure, tolerance
        first = proposal is not None and proposal.block == 1 and searched is not None and \
            proposal.sequence[0] == searched[0]  # s' is the first step: one hypothesis, one test
        self.searched = None if searched is None or first else searched
        self.plan = plan(proposal.sequence, proposal.block, self.searched and self.searched[0]) \
            if proposal is not None else None
        self.results: dict[HeadSet, EvalResult] = {}
        self.held: dict[int, tuple[int, int]] = {}  # each step's held-out counts, once level reached it

    def read(self, sets: Sequence[HeadSet]) -> None:
        """Held-out results of the sets not read yet, in one batch."""
        missing = [s for s in dict.fromkeys(sets) if s and s not in self.results]
        self.results.update(zip(missing, self.heldout(missing)))

    def verdict(self, heads: HeadSet) -> Verdict:
        self.read([heads])
        return verdict(self.base.correct, self.results[heads].correct, alpha=self.alpha)

    def check(self, i: int) -> tuple[int, int]:
        """A step's counts on the check half: the proposal's, or s'."""
        return self.proposal.steps[i] if i < len(self.proposal.steps) else self.searched[1]  # type: ignore

    def p_values(self, nodes: list[int]) -> list[float]:
        hyps = self.plan.hypotheses  # type: ignore[union-attr]
        self.read([s for i in nodes if i < len(hyps) for s in hyps[i][:2]])
        out = []
        for i in nodes:
            if i == len(hyps):  # s, on held-out
                out.append(self.verdict((self.single,)).p_value)
                continue
            tested, against, _ = hyps[i]
            self.held[i] = counts(self.results[tested], self.results[against] if against else self.base,
                                  self.measure, self.tolerance)
            out.append(_p(self.check(i), self.held[i]))
        return out

    def step(self, i: int, level: float) -> Step:
        tested, _, added = self.plan.hypotheses[i]  # type: ignore[union-attr]
        (cb, cc), (hb, hc) = self.check(i), self.held[i]
        return Step(tuple(map(str, tested)), added, cb, cc, hb, hc, _p((cb, cc), (hb, hc)), level)

    def rejects(self, i: int, p: float, level: float) -> bool:
        """The tests' own rules at ``level`` (one-sided): a step's, and s's exact McNemar test (two-sided at twice
        the level, rescuing more than it damages)."""
        if i == len(self.plan.hypotheses):  # type: ignore[union-attr]
            return replace(self.verdict((self.single,)), share=2 * level / self.alpha).confirmed
        return self.step(i, level).rejected

    def shipped(self, steps: list[Step | None], rejected: list[int], test: Verdict, trimmed: HeadSet, *,
                rule: str) -> tuple[HeadSet, Verdict, str]:
        """The primary set, its verdict and which candidate it is (the module docstring)."""
        confirms, proposal = self.plan.confirms, self.proposal  # type: ignore[union-attr]
        done = [i for i in rejected if i < len(confirms) and confirms[i]]
        if done:
            node: int | None = max(done, key=lambda i: (len(confirms[i]), -i))  # the largest; the earliest of them
            outcome = "searched" if node == len(proposal.steps) else "proposal"  # type: ignore[union-attr]
            heads, chain = confirms[node], []
            while node is not None:
                chain.append(steps[node])
                node = self.plan.parents[node]  # type: ignore[union-attr]
            chosen = replace(self.verdict(heads), steps=tuple(chain[::-1]), family=sum(1 for c in confirms if c),
                             selected=heads != proposal.heads, rule=rule)  # type: ignore[union-attr]
            return heads, chosen, outcome
        if test.confirmed:
            return (self.single,), test, "single"
        # Nothing confirmed: the set shown carries the steps tested (one at least did not reject), and no claim.
        heads = trimmed if len(trimmed) >= 2 else (self.single,)
        tested = tuple(s for s in steps if s is not None)
        return heads, replace(self.verdict(heads), steps=tested, selected=heads == trimmed != proposal.heads,
                              rule=rule), "none"  # type: ignore[union-attr]


def _p(check: tuple[int, int], heldout: tuple[int, int]) -> float:
    """The exact one-sided sign test of a step on the check half and held-out together."""
    b, c = check[0] + heldout[0], check[1] + heldout[1]
    return upper_tail(b, b + c)


def _single_test(single: Head, test: Verdict) -> HeldoutTest:
    return HeldoutTest("single", (str(single),), test.share, test.size, test.rescued, test.damaged, test.p_value,
                       test.confirmed)


__all__ = ["FALLBACK", "Fallback"]
