"""The proposal's fixed sequence: the claim the sequence rule makes for a set of several heads
(``headprune.search.rules.sequence``).

Discovery fixes, on the search half alone, an order of the proposal S's heads (:func:`gain_order`: each head's net
gain there, its own or, where larger, within S; largest first), the prefixes P_1 = {h_1}, ..., P_k = S
(:func:`prefixes`), and the **block** the sequence starts with (:func:`block_size`): the shortest prefix P_m whose
net gain against the intact model on the search half is positive and at least ``BLOCK_SHARE`` of the largest
prefix's. Heads that improve the task only together (removing either alone changes nothing) enter together: no
prefix of one of them improves, so a sequence that asked the first head to improve alone would stop there.

The hypotheses (:func:`hypotheses`), each an exact one-sided sign test with ``b`` the examples the tested set gets
right and the set it is tested against wrong (or, with ``rank_by=margin``, margins raised beyond tolerance) and ``c``
the reverse, counted on the check half of discovery and on held-out, neither of which chose them
(``p = P(X >= b)`` for ``X ~ Binomial(b + c, 1/2)``), in this order:

1. the block improves: P_m against the intact model;
2. for a block of several heads, each of its heads adds to the rest of the block: P_m against P_m without it;
3. each later head adds to the heads before it: P_j against P_(j-1), j = m+1..k.

They are tested in that order at one level, and the sequence stops at the first that does not reject (:func:`run`).
The set it ships is the last prefix reached (:func:`reached`): the block once steps 1 and 2 all rejected, then one
head more for each increment that rejected.

Why this holds after selection: every hypothesis is fixed on the search half before the examples it is tested on
are read, and a fixed-sequence test is a closed test, so the chance that any of its rejections is wrong (a block
that does not improve, a head that adds nothing to the rest of the block or to the heads before it) is at most its
level, for any model and however the tests depend on each other. The set shipped is chosen by where the sequence
stopped, but no test reads examples that chose its hypothesis. The set improves (the block does, and each increment
adds to it), and each of its heads adds to the heads beside it (within the block) or before it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from headprune.evaluation.results import EvalResult
from headprune.heads import Head
from headprune.search.binomial import upper_tail
from headprune.search.parsimony import HeadSet, counts
from headprune.search.stats import Step

BLOCK_SHARE = 0.5  # the block: the shortest prefix with at least this share of the best prefix's search-half gain
Counts = tuple[int, int]  # (b, c)
Hypothesis = tuple[HeadSet, HeadSet, str]  # the set tested, the set it is tested against, the heads it adds


def gain_order(heads: Sequence[Head], alone: Sequence[EvalResult], base: EvalResult, *, search, measure: str,
               tolerance: float, within: Sequence[Counts] | None = None) -> tuple[Head, ...]:
    """``heads`` by their gain on the search half (``search``: its mask), largest first, then fewer damaged, then
    the name: fixed before any check-half or held-out number is read. A head's gain is its own (``alone``: each head
    removed alone, in ``heads`` order) or, where larger, its gain within the set (``within``: each head's drop-one
    (b, c) on the search half, in ``heads`` order). Why the larger of the two: a partner that the screen at the best
    set brought in gains nothing alone, so by its own gain it falls among the null heads of S, and a null head
    ordered before it stops the sequence; within S its gain puts it after the head it partners. (Measured at the
    README's sizes, an interacting pair kept in 59% of runs with this order, 24% by own gain alone; two independent
    real heads the same with either, docs/find.md.)"""
    def key(i: int) -> tuple:
        b, c = counts(alone[i], base, measure, tolerance, search)
        if within is not None and within[i][0] - within[i][1] > b - c:
            b, c = within[i]
        return -(b - c), c, str(heads[i])
    return tuple(heads[i] for i in sorted(range(len(heads)), key=key))


def prefixes(order: Sequence[Head]) -> list[HeadSet]:
    """P_1, ..., P_k: the first j heads of ``order``, each in the set's own (sorted) order."""
    return [tuple(sorted(order[:j])) for j in range(1, len(order) + 1)]


def block_size(gains: Sequence[int]) -> int:
    """m: the shortest prefix (``gains``: each prefix's net gain against the intact model on the search half, in
    order) whose gain is positive and at least ``BLOCK_SHARE`` of the largest prefix's; 1 where no prefix gains."""
    best = max(gains, default=0)
    if best <= 0:
        return 1
    return next(j for j, gain in enumerate(gains, start=1) if gain > 0 and gain >= BLOCK_SHARE * best)


def hypotheses(order: Sequence[Head], block: int) -> list[Hypothesis]:
    """The sequence's hypotheses in the order tested (the module docstring's steps 1-3)."""
    chain = prefixes(order)
    first = chain[block - 1]
    out: list[Hypothesis] = [(first, (), ",".join(map(str, order[:block])))]
    if block > 1:
        out += [(first, tuple(h for h in first if h != head), str(head)) for head in order[:block]]
    out += [(chain[j], chain[j - 1], str(order[j])) for j in range(block, len(order))]
    return out


def sets_of(hyps: Sequence[Hypothesis]) -> list[HeadSet]:
    """Every set the hypotheses compare (the intact model aside), each once, in the order first needed."""
    return list(dict.fromkeys(s for tested, against, _ in hyps for s in (tested, against) if s))


def increments(hyps: Sequence[Hypothesis], results: Mapping[HeadSet, EvalResult], base: EvalResult, *,
               measure: str, tolerance: float, mask=None) -> tuple[Counts, ...]:
    """Each hypothesis's (b, c) on ``mask``'s examples: ``results`` holds every set it reads, ``base`` the intact
    model."""
    return tuple(counts(results[tested], results[against] if against else base, measure, tolerance, mask)
                 for tested, against, _ in hyps)


def run(hyps: Sequence[Hypothesis], check: Sequence[Counts], heldout: Sequence[Counts], *, level: float
        ) -> tuple[Step, ...]:
    """The fixed sequence at ``level``: each hypothesis on the check half and held-out together, in order, up to and
    including the first that does not reject (the ones after it are not tested)."""
    steps = []
    for (tested, _, added), (cb, cc), (hb, hc) in zip(hyps, check, heldout, strict=True):
        step = Step(tuple(map(str, tested)), added, cb, cc, hb, hc, upper_tail(cb + hb, cb + hb + cc + hc), level)
        steps.append(step)
        if not step.rejected:
            break
    return tuple(steps)


def reached(steps: Sequence[Step]) -> int:
    """The size of the last prefix reached: the block's once its steps all rejected, then one more head for each
    increment that rejected; 0 before the block is reached. (A step's ``added`` heads, taken from its ``prefix``,
    leave the set it was tested against: all of them for the block's first step.)"""
    size = pending = 0
    for step in steps:
        if not step.rejected:
            break
        added = step.added.split(",")
        if len(added) == len(step.prefix):  # the block against the intact model: its heads' steps follow
            pending = len(step.prefix) if len(step.prefix) > 1 else 0
            size = 0 if pending else 1
        elif pending:
            pending -= 1
            size = 0 if pending else len(step.prefix)
        else:
            size = len(step.prefix)
    return size


__all__ = ["BLOCK_SHARE", "Counts", "Hypothesis", "block_size", "gain_order", "hypotheses", "increments",
           "prefixes", "reached", "run", "sets_of"]
