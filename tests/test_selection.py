"""The held-out stage of find's selection (``headprune.search.selection``) on hand-made per-example results: which
set each test reads, at which level, and what the record says of a kept set cut down from the proposal."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from headprune.heads import Head
from headprune.report.text import verdict_sentence
from headprune.search.membership import Proposal
from headprune.search.selection import PREFIX_PART, part, prefixes, select
from headprune.search.simulation import CountsResult

H0, H1, H2 = Head(0, 0), Head(0, 1), Head(0, 2)
N = 300


def _right(*ranges: tuple[int, int]) -> CountsResult:
    """A result right on the examples of ``ranges`` (half-open), wrong elsewhere (the intact model: wrong on all)."""
    correct = np.zeros(N, dtype=bool)
    for start, stop in ranges:
        correct[start:stop] = True
    return CountsResult(correct, np.where(correct, 1.0, -1.0), tuple(map(str, range(N))))


def _select(results: dict, proposal: Proposal) -> object:
    return select(proposal, H0, lambda sets: [results[s] for s in sets], _right(), alpha=0.05, measure="accuracy",
                  tolerance=0.0, sizes=(75, 75))


def _proposal(support: int = 0) -> Proposal:
    return Proposal((H0, H1, H2), (H0, H1, H2), ((0, 0),) * 3, support)


@pytest.mark.parametrize("size", [2, 3, 4, 5])
def test_the_parts_of_the_proposals_subsets_add_up_to_one(size: int) -> None:
    heads = tuple(Head(0, i) for i in range(size))
    proposal = Proposal(heads, tuple(reversed(heads)), ((0, 0),) * size, 0)
    subsets = [c for k in range(2, size + 1) for c in itertools.combinations(heads, k)]
    assert sum(part(proposal, s) for s in subsets) == pytest.approx(1.0)
    first = prefixes(proposal)
    assert first[-1] == heads and first[0] == tuple(sorted(heads[-2:]))  # the test order's first two heads
    assert sum(part(proposal, s) for s in first) == pytest.approx(PREFIX_PART if size > 2 else 1.0)
    assert part(proposal, heads[:1]) == 0 and part(proposal, (heads[0], Head(1, 0))) == 0


def test_a_cut_down_kept_set_is_tested_at_its_part_and_its_estimate_marked() -> None:
    """H0 and H1 each add 30 examples to the proposal, H2 nothing: the kept set is {H0, H1}, a prefix of the test
    order. The single head H0 is tested first (the proposal has no support on the check half) and rejects, so the
    proposal's branch gets all of alpha, of which the kept set's part is 0.8 / 2."""
    s, t = (H0, H1, H2), (H0, H1)
    results = {s: _right((0, 60)), (H1, H2): _right((30, 60)), (H0, H2): _right((0, 30)), (H0, H1): _right((0, 60)),
               (H0,): _right((0, 30))}
    chosen = _select(results, _proposal())
    single, kept = chosen.selection.tests
    assert (single.candidate, single.share, single.rejected) == ("single", 0.9, True)
    assert (kept.candidate, kept.heads, kept.share, kept.part) == ("proposal", ("L0.H0", "L0.H1"), 1.0, 0.4)
    assert chosen.heads == t and chosen.verdict.confirmed and chosen.verdict.selected
    assert chosen.verdict.size == pytest.approx(0.05 * 0.4) and kept.level == pytest.approx(0.02)
    assert chosen.selection.chosen == "proposal" and chosen.selection.kept == ("L0.H0", "L0.H1")
    line = verdict_sentence(chosen.verdict)
    assert line.startswith("CONFIRMED improvement") and "exploratory estimate" in line and "at level 0.02," in line


def test_the_whole_proposal_kept_is_not_marked_and_a_kept_head_alone_is_the_singles_claim() -> None:
    every = {(H0, H1, H2): _right((0, 90)), (H1, H2): _right((30, 90)), (H0, H2): _right((0, 30), (60, 90)),
             (H0, H1): _right((0, 60)), (H0,): _right((0, 30))}
    chosen = _select(every, _proposal(support=3))
    assert chosen.heads == (H0, H1, H2) and chosen.verdict.confirmed and not chosen.verdict.selected
    assert "exploratory" not in verdict_sentence(chosen.verdict)
    assert [t.candidate for t in chosen.selection.tests][0] == "proposal"  # favoured: tested first, 90% of alpha
    # Only H0 adds anything: a kept set of one head is not tested in the proposal's branch, the single is.
    alone = {(H0, H1, H2): _right((0, 30)), (H1, H2): _right(), (H0, H2): _right((0, 30)), (H0, H1): _right((0, 30)),
             (H0,): _right((0, 30))}
    chosen = _select(alone, _proposal())
    assert [t.candidate for t in chosen.selection.tests] == ["single"] and chosen.selection.kept == ("L0.H0",)
    assert chosen.heads == (H0,) and chosen.verdict.confirmed and chosen.selection.chosen == "single"
