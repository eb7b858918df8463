"""What a selection rule is: how find chooses its primary set among the candidates discovery fixed, and everything
people are told of that choice.

A rule owns its whole surface, so that changing find's rule is a new rule module, its registration, and the name
find uses (``headprune.search.rules.FIND_RULE``), with nothing else in the tree naming it:

- **how it chooses**: the hypotheses discovery counts on the check half (:meth:`SelectionRule.hypotheses`), the
  held-out stage (:meth:`SelectionRule.select`), the most conditions it adds (:meth:`SelectionRule.planned`), and how
  the counts-only simulation runs it (:meth:`SelectionRule.run`: find's discovery, then the rule; an earlier rule
  that chose its sets otherwise overrides it);
- **its record's name**: ``name``, which ``Selection.rule`` and a confirmed ``Verdict.rule`` carry, and ``journal``,
  the sentence a find journal records so that a run of another rule is not resumed;
- **its words**: the terminal line that names the set that ships and the steps that decided it
  (:meth:`SelectionRule.summary`), ``report.md``'s section (:meth:`SelectionRule.section`), and its claim as the
  verdict line and the model card state it (:meth:`SelectionRule.claim`).

Rules find no longer runs stay registered for the records their releases wrote (and, where the simulation compares
them, for that); such a rule's :meth:`SelectionRule.select` refuses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from headprune.core.registry import Registry
from headprune.heads import Head
from headprune.search.parsimony import HeadSet
from headprune.search.sequence import Hypothesis, block_size

if TYPE_CHECKING:
    from headprune.evaluation.results import EvalResult
    from headprune.search.find_result import FindResult
    from headprune.search.proposal import Proposal, Searched
    from headprune.search.selection import Chosen
    from headprune.search.stages import Stages
    from headprune.search.stats import Verdict

@dataclass(frozen=True)
class Ran:
    """One simulated run's choice: the primary set, whether it is confirmed, and the order of the proposal's heads the
    rule's steps followed (empty where none)."""

    heads: HeadSet
    confirmed: bool
    order: tuple[Head, ...] = ()


ThroughFind = Callable[["Stages", "SelectionRule"], Ran]  # find's discovery and a rule's held-out stage


class SelectionRule:
    """One selection rule (see the module docstring). Subclasses set ``name`` and ``journal`` and override what they
    do; the defaults here say that a rule cannot choose (a rule kept for its records)."""

    name = ""  # the registry's key; what the records carry
    runs = False  # whether it can choose (find's discovery and its held-out stage, or its own walk); else records only
    searched_single = False  # whether it tests the best single head on the search half too (``select``'s searched)
    journal = ""  # what a find journal records, so that a run of another rule is not resumed
    shipped = "sets"  # what the interval of a confirmed set is simultaneous over ("prefixes")

    def block(self, gains: Sequence[int]) -> int:
        """The heads the rule's tests start with, together (the block), from each prefix's net gain on the search
        half: by default the shortest prefix holding half the best prefix's gain
        (:func:`headprune.search.sequence.block_size`)."""
        return block_size(gains)

    def hypotheses(self, order: Sequence[Head], block: int) -> list[Hypothesis]:
        """The hypotheses the rule tests, in order, fixed by the search half's order of the proposal's heads and the
        block it starts with: discovery counts each on the check half before held-out is read."""
        raise NotImplementedError(f"find no longer runs the selection rule {self.name!r}")

    def select(self, proposal: Proposal | None, single: Head, heldout: Callable[[list[HeadSet]], list[EvalResult]],
               base: EvalResult, *, alpha: float, measure: str, tolerance: float, sizes: tuple[int, int],
               searched: Searched | None = None) -> Chosen:
        """The held-out stage: the primary set, its verdict and the record. ``single`` is the best single head on all
        of discovery, ``searched`` (where the rule asks for it, ``searched_single``) the best on the search half with
        its counts on the check half; ``heldout`` evaluates head sets on held-out (journalled), ``base`` is the intact
        model there, ``sizes`` the search and check halves' example counts."""
        raise NotImplementedError(f"find no longer runs the selection rule {self.name!r}")

    def planned(self, size: int) -> tuple[int, int]:
        """At most how many discovery and held-out conditions the rule adds to the proposal's membership sets, for a
        proposal of ``size`` heads (find's estimate of its cost before it runs)."""
        return 0, 0

    def run(self, stages: Stages, through_find: ThroughFind) -> Ran:
        """One simulated find run under this rule on ``stages`` (baseline in). A rule of find's shape runs find's
        discovery and its own held-out stage (``through_find``)."""
        return through_find(stages, self)

    def summary(self, chosen: Chosen) -> str:
        """The terminal line: the set that ships and the steps that decided it."""
        return f"primary set {','.join(map(str, chosen.heads))}"

    def section(self, result: FindResult) -> list[str]:
        """``report.md``'s account of how the primary set was chosen (empty: nothing to add to the verdict)."""
        return []

    def claim(self, verdict: Verdict, *, detail: bool = False) -> str:
        """The claim of a verdict confirmed by the rule's tests (``verdict.steps``), as the verdict line states it, or,
        with ``detail``, as the model card does."""
        raise NotImplementedError(f"the selection rule {self.name!r} confirms no set by its steps")


RULES: Registry[str, SelectionRule] = Registry("selection rule")


def register(rule: SelectionRule) -> SelectionRule:
    """Make ``rule`` the selection rule named ``rule.name``; returns it."""
    return RULES.add(rule.name, rule)


__all__ = ["RULES", "Ran", "SelectionRule", "ThroughFind", "register"]
