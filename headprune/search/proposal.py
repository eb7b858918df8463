"""The proposal as discovery leaves it for the held-out stage: the best set of several heads on the search half, the
orders of its heads, and the check half's counts of every hypothesis the selection rule will test.

The search half of discovery proposes a set S (``headprune.search.improve``). Before any held-out number is read,
discovery also fixes, on the search half alone: the order of S's heads for the rule's tests (each head's gain there,
its own or, where larger, within S, ``headprune.search.sequence``), the block the tests start with, and the order
of the membership tests (``headprune.search.membership``: strongest drop-one contribution first). The check half
then counts each hypothesis the rule tests (``headprune.search.rules``) and each head of S against S without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.search.parsimony import HeadSet, counts, drop_one
from headprune.search.sequence import Counts, Hypothesis, gain_order, increments, prefixes, sets_of


Searched = tuple[Head, Counts]  # the best single head on the search half, and its counts on the check half


class Plan(Protocol):
    """What discovery asks of the selection rule it proposes for (``headprune.search.rules``)."""

    def block(self, gains: Sequence[int]) -> int:
        """The heads the rule's tests start with, together, from the prefixes' net gains on the search half."""

    def hypotheses(self, order: Sequence[Head], block: int) -> list[Hypothesis]:
        """The hypotheses the rule tests, fixed by the order and the block."""


@dataclass(frozen=True)
class Proposal:
    """The proposed set as discovery leaves it for the held-out stage: its heads in the order their membership
    tests run (``order``, fixed on the search half) with each head's drop-one counts on the check half (same
    order); and the order of the rule's tests (``sequence``: each head's gain on the search half, own or within S,
    ``headprune.search.sequence``), the size of the block they start with, and each of the rule's hypotheses'
    counts on the check half (``steps``, in the order tested)."""

    heads: HeadSet
    order: tuple[Head, ...]
    check: tuple[Counts, ...]
    sequence: tuple[Head, ...]
    steps: tuple[Counts, ...]
    block: int = 1


def propose(heads: HeadSet, discovery: Callable[[list[HeadSet]], list[EvalResult]], base: EvalResult, *,
            search: np.ndarray, check: np.ndarray, measure: str, tolerance: float, rule: Plan) -> Proposal:
    """The :class:`Proposal` of ``heads`` for a selection ``rule`` (its block and hypotheses); ``discovery``
    evaluates head sets on discovery (``base``: the intact model there): S and each S without one head
    (:func:`needed`), each head alone, the prefixes of the order, then every other set the rule's hypotheses
    compare."""
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
    gains = [b - c for b, c in (counts(results[p], base, measure, tolerance, search) for p in chain)]
    block = rule.block(gains)
    tested = rule.hypotheses(sequence, block)
    more = [s for s in sets_of(tested) if s not in results]  # e.g. the block without each of its heads
    results.update(zip(more, discovery(more)))
    steps = increments(tested, results, base, measure=measure, tolerance=tolerance, mask=check)
    return Proposal(tuple(heads), tuple(heads[i] for i in order), tuple(on_check[i] for i in order), sequence,
                    steps, block)


def needed(heads: HeadSet) -> list[HeadSet]:
    """The conditions the membership tests read: S first, then each S without one head."""
    return [heads, *drop_one(heads)]


__all__ = ["Counts", "Plan", "Proposal", "Searched", "needed", "propose"]
