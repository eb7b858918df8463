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
from typing import TYPE_CHECKING

from headprune.core.registry import Registry
from headprune.heads import Head
from headprune.search.parsimony import HeadSet
from headprune.search.sequence import Hypothesis

if TYPE_CHECKING:
    from headprune.evaluation.results import EvalResult
    from headprune.search.find_result import FindResult
    from headprune.search.proposal import Proposal
    from headprune.search.selection import Chosen, Selection
    from headprune.search.stages import Stages
    from headprune.search.stats import Verdict

# find's discovery and a rule's held-out stage, as the simulation runs them: the primary set and whether it is confirmed
ThroughFind = Callable[["Stages", "SelectionRule"], tuple[HeadSet, bool]]


class SelectionRule:
    """One selection rule (see the module docstring). Subclasses set ``name`` and ``journal`` and override what they
    do; the defaults here say that a rule cannot choose (a rule kept for its records)."""

    name = ""  # the registry's key; what the records carry
    runs = False  # whether it can choose (find's discovery and its held-out stage, or its own walk); else records only
    journal = ""  # what a find journal records, so that a run of another rule is not resumed
    shipped = "sets"  # what the interval of a confirmed set is simultaneous over ("prefixes")

    def hypotheses(self, order: Sequence[Head], block: int) -> list[Hypothesis]:
        """The hypotheses the rule tests, in order, fixed by the search half's order of the proposal's heads and the
        block it starts with: discovery counts each on the check half before held-out is read."""
        raise NotImplementedError(f"find no longer runs the selection rule {self.name!r}")

    def select(self, proposal: Proposal | None, single: Head, heldout: Callable[[list[HeadSet]], list[EvalResult]],
               base: EvalResult, *, alpha: float, measure: str, tolerance: float, sizes: tuple[int, int]) -> Chosen:
        """The held-out stage: the primary set, its verdict and the record. ``heldout`` evaluates head sets on held-out
        (journalled), ``base`` is the intact model there, ``sizes`` the search and check halves' example counts."""
        raise NotImplementedError(f"find no longer runs the selection rule {self.name!r}")

    def planned(self, size: int) -> tuple[int, int]:
        """At most how many discovery and held-out conditions the rule adds to the proposal's membership sets, for a
        proposal of ``size`` heads (find's estimate of its cost before it runs)."""
        return 0, 0

    def run(self, stages: Stages, through_find: ThroughFind) -> tuple[HeadSet, bool]:
        """One simulated find run under this rule on ``stages`` (baseline in): the primary set and whether it is
        confirmed. A rule of find's shape runs find's discovery and its own held-out stage (``through_find``)."""
        return through_find(stages, self)

    def summary(self, heads: HeadSet, selection: Selection) -> str:
        """The terminal line: the set that ships (``heads``) and the steps that decided it."""
        return f"primary set {','.join(map(str, heads))}"

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


__all__ = ["RULES", "SelectionRule", "ThroughFind", "register"]
