"""find's selection rule (``headprune.search.rules.fallback``) on hand-made per-example results: a step that does not
reject passes nothing but ends nothing, each step is tested at the level that reached it, the largest set whose steps
all rejected ships, the single on the search half is a step of its own, and the record and the words say so."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from headprune.heads import Head
from headprune.report.text import verdict_sentence
from headprune.search.binomial import upper_tail
from headprune.search.proposal import Proposal
from headprune.search.rules import RULES, find_rule
from headprune.search.rules.fallback_graph import (BLOCK_FLOOR, BLOCK_SHARE, NEXT, SEARCHED_SHARE, SINGLE_SHARE,
                                                   local_block, plan)
from headprune.search.simulation import CountsResult

H0, H1, H2, H3 = Head(0, 0), Head(0, 1), Head(0, 2), Head(0, 3)
N = 300
LEVEL = 0.025  # one-sided alpha / 2


def _right(*ranges: tuple[int, int]) -> CountsResult:
    """Right on the examples of ``ranges`` (half-open) and on 250-299 (what the intact model gets right); wrong
    elsewhere."""
    correct = np.zeros(N, dtype=bool)
    correct[250:] = True
    for start, stop in ranges:
        correct[start:stop] = True
    return CountsResult(correct, np.where(correct, 1.0, -1.0), tuple(map(str, range(N))))


def _proposal(sequence: tuple[Head, ...], block: int = 1) -> Proposal:
    """S = {H0, H1, H2}, the steps in ``sequence`` from a block of ``block`` heads; nothing on the check half."""
    steps = ((0, 0),) * len(plan(sequence, block).hypotheses)
    return Proposal((H0, H1, H2), (H0, H1, H2), ((0, 0),) * 3, sequence, steps, block)


def _select(results: dict, proposal: Proposal, single: Head = H0, searched: tuple | None = None) -> object:
    return find_rule().select(proposal, single, lambda sets: [results[s] for s in sets], _right(), alpha=0.05,
                              measure="accuracy", tolerance=0.0, sizes=(75, 75), searched=searched)


# H0 and H1 each add 30 examples to any set, H2 nothing.
ADDING = {(H0, H1, H2): _right((0, 60)), (H1, H2): _right((30, 60)), (H0, H2): _right((0, 30)),
          (H0, H1): _right((0, 60)), (H0,): _right((0, 30)), (H1,): _right((30, 60)), (H2,): _right()}


def test_find_runs_the_fallback_rule() -> None:
    assert find_rule() is RULES["fallback"]


def test_a_null_head_ordered_ahead_of_a_real_one_is_skipped_not_the_end() -> None:
    """Order H0, H2, H1: H2 adds nothing to H0. The fixed sequence stops there and confirms no set of several heads;
    the fallback rule gave H1 its part of H0's level when H0 rejected, and ships {H0, H1}: H0 against the original,
    H1 against the heads kept before it (H0), each at the level that reached it."""
    chosen = _select(ADDING, _proposal((H0, H2, H1)))
    assert chosen.heads == (H0, H1) and chosen.verdict.confirmed and chosen.selection.chosen == "proposal"
    first, second = chosen.verdict.steps
    assert (first.prefix, first.added, first.heldout_rescued, first.level) == (("L0.H0",), "L0.H0", 30,
                                                                             pytest.approx(LEVEL * 0.95))
    assert (second.prefix, second.added) == (("L0.H0", "L0.H1"), "L0.H1")
    assert second.level == pytest.approx(LEVEL * 0.95 * (1 - NEXT))  # H2 took NEXT of it, and keeps it
    assert second.p_value == pytest.approx(upper_tail(30, 30)) and chosen.verdict.rule == "fallback"
    skipped = [s for s in chosen.selection.steps if not s.rejected]
    assert [(s.prefix, s.added) for s in skipped] == [(("L0.H0", "L0.H2"), "L0.H2")]
    assert chosen.verdict.selected and chosen.verdict.family == len([c for c in plan((H0, H2, H1), 1).confirms if c])
    sequence = RULES["sequence"].select(_proposal((H0, H2, H1)), H0, lambda sets: [ADDING[s] for s in sets],
                                        _right(), alpha=0.05, measure="accuracy", tolerance=0.0, sizes=(75, 75))
    assert sequence.heads == (H0,) and sequence.selection.chosen == "single"  # its steps stopped at H2


def test_a_first_step_alone_ships_one_head_and_the_single_head_is_tested_with_what_is_left() -> None:
    """S = {H0, H2} in that order, H2 adding nothing: the first step rejects and ships H0 alone (no set of two heads is
    confirmed). s, started with SINGLE_SHARE, holds more only once a step with no head after it rejects."""
    pair = Proposal((H0, H2), (H0, H2), ((0, 0),) * 2, (H0, H2), ((0, 0),) * len(plan((H0, H2), 1).hypotheses), 1)
    chosen = _select(ADDING, pair)
    assert chosen.heads == (H0,) and chosen.verdict.confirmed and len(chosen.verdict.steps) == 1
    (single,) = chosen.selection.tests
    assert single.share == pytest.approx(SINGLE_SHARE)


# H0 and H1 improve the task only together (40 examples), each alone nothing; H2 nothing anywhere.
TOGETHER = {(H0,): _right(), (H1,): _right(), (H2,): _right(), (H0, H1): _right((0, 40)),
            (H0, H1, H2): _right((0, 40)), (H1, H2): _right(), (H0, H2): _right()}


def test_heads_that_improve_only_together_are_confirmed_as_a_block() -> None:
    chosen = _select(TOGETHER, _proposal((H0, H1, H2), block=2), single=H2)
    assert chosen.heads == (H0, H1) and chosen.verdict.confirmed
    assert [(s.added, s.rejected) for s in chosen.verdict.steps] == [("L0.H0,L0.H1", True), ("L0.H0", True),
                                                                     ("L0.H1", True)]
    assert "each of 3 steps rejected" in verdict_sentence(chosen.verdict)


def test_the_block_ends_where_the_next_head_adds_little_to_it() -> None:
    """The first prefix holding BLOCK_SHARE of the next prefix's search-half gain and BLOCK_FLOOR of the best prefix's:
    a null head's luck after a real head (6 then 7) leaves the real head alone; heads that act only together (1 then
    12) stay together; two heads whose gains are noise before the heads they need (2, 3, then 58) do not end it."""
    assert (BLOCK_SHARE, BLOCK_FLOOR) == (0.6, 0.25)
    assert (local_block([6, 7, 13]), local_block([1, 12, 13]), local_block([-1, 0, -2]), local_block([0, 1, 9]),
            local_block([6, 13, 12]), local_block([2, 3, 58, 59])) == (1, 2, 1, 3, 2, 3)


def test_the_single_on_the_search_half_is_the_first_step_or_a_step_of_its_own() -> None:
    """s' = H3, outside the proposal, with 20 rescued on the check half and 25 on held-out: where the proposal's steps
    confirm nothing (order H2, H0, H1: the first is null), it ships, confirmed by its own step at SEARCHED_SHARE. Where
    s' is the proposal's first head, it is that step: no share of its own."""
    results = ADDING | {(H3,): _right((100, 125))}
    chosen = _select(results, _proposal((H2, H0, H1)), searched=(H3, (20, 0)))
    assert chosen.heads == (H3,) and chosen.verdict.confirmed and chosen.selection.chosen == "searched"
    (step,) = chosen.verdict.steps
    assert (step.check_rescued, step.heldout_rescued, step.level) == (20, 25, pytest.approx(LEVEL * SEARCHED_SHARE))
    assert chosen.selection.searched == "L0.H3"
    assert "ships L0.H3, confirmed by its own step (the single on the search half)" in find_rule().summary(chosen)
    merged = plan((H3, H0), 1, None).graph.weights
    own = plan((H0, H3), 1, H3).graph.weights
    assert merged[0] == pytest.approx(1 - SINGLE_SHARE) and own[0] == pytest.approx(1 - SINGLE_SHARE - SEARCHED_SHARE)


def test_where_nothing_is_confirmed_the_kept_set_is_shown_with_the_steps_that_did_not_reject() -> None:
    """Order H2, H0, H1, s = H2: the first step does not reject and nothing else holds level but the singles; the
    membership tests keep {H0, H1}, shown, not confirmed."""
    chosen = _select(ADDING, _proposal((H2, H0, H1)), single=H2)
    assert chosen.heads == (H0, H1) and not chosen.verdict.confirmed and chosen.selection.chosen == "none"
    assert "no set confirmed" in verdict_sentence(chosen.verdict)
    line = find_rule().summary(chosen)
    assert ("nothing confirmed: the proposal's steps confirmed no set (did not reject: L0.H2 against the original "
            "p=1)") in line
    assert line.endswith("shown: L0.H0,L0.H1 (the membership tests' kept set, not a claim)")
    section = "\n".join(find_rule().section(SimpleNamespace(selection=chosen.selection)))
    assert "**The set shown, since nothing is confirmed** (not a claim)" in section
    assert "Not tested (no level reached them)" in section


def test_the_line_the_report_and_the_card_name_the_steps_that_decided() -> None:
    chosen = _select(ADDING, _proposal((H0, H2, H1)))
    line = find_rule().summary(chosen)
    assert "ships L0.H0,L0.H1, confirmed by the proposal's steps" in line
    assert "L0.H0 against the original p=" in line and "L0.H1 added to L0.H0 p=" in line
    assert line.endswith("did not reject: L0.H2 added to L0.H0 p=1")
    section = "\n".join(find_rule().section(SimpleNamespace(selection=chosen.selection)))
    assert "**The proposal's steps** (its claim)" in section and "| 3 | `L0.H0,L0.H1` | `L0.H0` |" in section
    assert "decided nothing here" in section
    card = find_rule().claim(chosen.verdict, detail=True)
    assert card.startswith("its claim is 2 exact one-sided tests")
    assert f"at least {LEVEL * 0.95 * (1 - NEXT):.2g}" in card
