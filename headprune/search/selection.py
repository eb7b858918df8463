"""The record of how find chose its primary set: the candidates discovery fixed, the held-out tests, which candidate
the primary set is, and the rule that chose (``Selection``), with the primary set and its verdict (``Chosen``).

Every selection rule (``headprune.search.rules``: how each chooses, and why its level holds after selection) writes
this record; ``result.json`` keeps it under ``selection``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from headprune.evaluation.results import EvalResult
from headprune.search.guards import GuardEffect
from headprune.search.parsimony import HeadContribution, HeadSet
from headprune.search.stats import Step, Verdict, verdict


@dataclass(frozen=True)
class HeldoutTest:
    """The single head's held-out verdict: its heads, its branch's share of alpha (plus the proposal's when every
    step of the proposal's rejected), the level it was tested at (``alpha * share``), its counts and exact McNemar
    p, and whether it rejected. (Files of schema 3 and 4 also hold the proposal's kept set's test,
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
    """How the primary set was chosen (its ``rule`` says how): the candidates, the membership tests of the proposal's
    heads (in the order tested) and the kept set, the single's test, the rule's steps (the order of the proposal's
    heads they follow, each step tested, and the proposal's share of alpha), and which candidate the primary set is
    (``chosen``: ``proposal``, ``single``, ``searched`` (the best single head on the search half), or ``none`` when
    nothing was confirmed)."""

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
    sequence: tuple[str, ...] = ()  # schema 5: the proposal's heads in the order of the rule's steps
    steps: tuple[Step, ...] = ()  # schema 5: each step tested, in the order tested
    share: float = 0.0  # schema 5: the proposal's share of alpha (the sequence: its branch's, plus the single's if that
    # rejected; the fallback rule: its first step's at the start)
    block: int = 1  # schema 5: the heads the steps start with, together (``headprune.search.sequence``)
    guard_stop: tuple[str, ...] = ()  # with guards: the confirmed set that broke one on held-out (the one before ships)
    guard_stop_effects: tuple[GuardEffect, ...] = ()  # its guards' held-out effects
    favoured: str = ""  # files of schema 3 and 4: the candidate tested first
    support: int = 0  # files of schema 3 and 4: heads of the proposal that helped on the check half
    rule: str = ""  # schema 6: the selection rule that chose (``headprune.search.rules``; older files: by their shape)
    searched: str = ""  # schema 6, the fallback rule: the best single head on the search half (tested as a step)


@dataclass(frozen=True)
class Chosen:
    """The primary set, its held-out verdict, and the record."""

    heads: HeadSet
    verdict: Verdict
    selection: Selection


def shortened(chosen: Chosen, heads: HeadSet, result: EvalResult, base: EvalResult, *, alpha: float,
              stop: HeadSet, effects: tuple[GuardEffect, ...]) -> Chosen:
    """``chosen`` (a set the rule's steps confirmed) cut back to a smaller set its steps confirmed on the way,
    ``heads`` (``result``: its held-out results), because the guards' fixed sequence stopped at ``stop``
    (``effects``: its guards on held-out; ``headprune.search.guard_search.guard_chain``). Its claims are the steps up
    to it; its estimate is exploratory, its interval simultaneous over the same sets as before."""
    names = {str(h) for h in heads}
    made = replace(verdict(base.correct, result.correct, alpha=alpha), share=chosen.verdict.share,
                   steps=tuple(step for step in chosen.verdict.steps if set(step.prefix) <= names),
                   family=chosen.verdict.family, selected=True, rule=chosen.verdict.rule)
    record = replace(chosen.selection, guard_stop=tuple(map(str, stop)), guard_stop_effects=effects)
    return Chosen(heads, made, record)


__all__ = ["Chosen", "HeldoutTest", "Selection", "shortened"]
