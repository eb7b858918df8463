"""The graph of the fallback rule's steps (``headprune.search.rules.fallback`` says what they test and why): its
nodes, which set each confirms, the step before each, the initial shares and the transitions, all fixed by the order
of the proposal's heads, the block and s' before any check-half or held-out number is read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from headprune.heads import Head
from headprune.search.graphical import Graph
from headprune.search.parsimony import HeadSet
from headprune.search.selection import Selection
from headprune.search.sequence import Hypothesis, prefixes

BLOCK_SHARE = 0.6  # the block ends at the first prefix holding this share of the next prefix's search-half gain ...
BLOCK_FLOOR = 0.25  # ... and at least this share of the best prefix's
NEXT = 0.8  # of a rejected step's level, to the next head in the order; of the rest, again to the one after, ...
SINGLE_SHARE = 0.05  # of the level at the start, for s (the best single head on all of discovery) on held-out
SEARCHED_SHARE = 0.10  # for s' (the best on the search half) on the check half and held-out, unless the first step


@dataclass(frozen=True)
class Plan:
    """The graph of one proposal: its hypotheses (the steps, in the order built: each step's whole continuation
    before its alternatives), the set each confirms with the steps before it (empty for a block's first steps), the
    step before each (None: the first), and the graph over them with s's test last."""

    hypotheses: tuple[Hypothesis, ...]
    confirms: tuple[HeadSet, ...]
    parents: tuple[int | None, ...]
    graph: Graph


def plan(order: Sequence[Head], block: int, searched: Head | None = None) -> Plan:
    """The graph of the module docstring for the heads in ``order`` starting with a block of ``block`` heads, with
    the step of s' (``searched``, when it is not the first step) after the proposal's."""
    hyps: list[Hypothesis] = []
    confirms: list[HeadSet] = []
    parents: list[int | None] = []
    moves: list[list[tuple[int, float]]] = []

    def add(hyp: Hypothesis, confirm: HeadSet, parent: int | None) -> int:
        hyps.append(hyp)
        confirms.append(confirm)
        parents.append(parent)
        moves.append([])
        return len(hyps) - 1

    def grow(node: int, held: HeadSet, start: int) -> None:
        later = list(range(start, len(order)))
        for index, share in zip(later, _shares(len(later))):
            tested = tuple(sorted((*held, order[index])))
            child = add((tested, held, str(order[index])), tested, node)
            moves[node].append((child, share))
            grow(child, tested, index + 1)

    first = prefixes(order)[block - 1]
    node = add((first, (), ",".join(map(str, order[:block]))), first if block == 1 else (), None)
    if block > 1:  # each head of the block against the rest of it, one after another
        for head in order[:block]:
            step = add((first, tuple(h for h in first if h != head), str(head)), (), node)
            moves[node].append((step, 1.0))
            node = step
        confirms[node] = first
    grow(node, first, block)
    proposed = len(hyps)
    if searched is not None:
        add(((searched,), (), str(searched)), (searched,), None)
    single = len(hyps)
    rows = [[0.0] * (single + 1) for _ in range(single + 1)]
    ends = {single: 0.5, proposed: 0.5} if searched is not None else {single: 1.0}
    for i, out in enumerate(moves[:proposed]):
        for j, share in (out or ends.items()):  # no head left after it: its level goes to the singles
            rows[i][j] = share
    for start in range(proposed, single + 1):  # a single that rejects passes its level to the proposal's first step
        rows[start][0] = 1.0
    weights = [0.0] * (single + 1)
    weights[single] = SINGLE_SHARE
    if searched is not None:
        weights[proposed] = SEARCHED_SHARE
    weights[0] = 1.0 - sum(weights)
    return Plan(tuple(hyps), tuple(confirms), tuple(parents), Graph(tuple(weights), tuple(map(tuple, rows))))


def _shares(count: int) -> list[float]:
    """``NEXT`` to the first, ``NEXT`` of the rest to the second, ..., what is left to the last."""
    out, left = [], 1.0
    for index in range(count):
        out.append(left if index == count - 1 else left * NEXT)
        left -= out[-1]
    return out


def local_block(gains: Sequence[int]) -> int:
    """The first prefix whose search-half gain is positive, at least ``BLOCK_SHARE`` of the next prefix's and at least
    ``BLOCK_FLOOR`` of the best prefix's (a prefix of heads that gain nothing yet, whose gains are noise, does not end
    it); the last where none before it does; 1 where no prefix gains."""
    floor = BLOCK_FLOOR * max(gains, default=0)
    for size, (gain, following) in enumerate(zip(gains, gains[1:]), start=1):
        if gain > 0 and gain >= BLOCK_SHARE * following and gain >= floor:
            return size
    return len(gains) if gains and gains[-1] > 0 else 1


def plan_of(sel: Selection) -> Plan:
    """The graph a record's steps were drawn from."""
    order = tuple(map(Head.parse, sel.sequence))
    first = sel.block == 1 and str(order[0]) == sel.searched
    return plan(order, sel.block, Head.parse(sel.searched) if sel.searched and not first else None)


__all__ = ["BLOCK_FLOOR", "BLOCK_SHARE", "NEXT", "SEARCHED_SHARE", "SINGLE_SHARE", "Plan", "local_block", "plan",
           "plan_of"]
