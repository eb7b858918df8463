"""The held-out stage of the sequence rule (``headprune.search.rules.sequence``) on hand-made per-example results: the
proposal's fixed sequence of increments, the single head's test, the shares each branch is tested at and passes
on, and what the record and the verdict say."""

from __future__ import annotations

import numpy as np
import pytest

from headprune.heads import Head
from headprune.report.text import verdict_sentence
from headprune.search.binomial import upper_tail
from headprune.search.proposal import Proposal
from headprune.search.rules import RULES
from headprune.search.sequence import block_size, gain_order, hypotheses
from headprune.search.simulation import CountsResult

H0, H1, H2, H3 = Head(0, 0), Head(0, 1), Head(0, 2), Head(0, 3)
N = 300


def _right(*ranges: tuple[int, int], wrong: tuple[int, int] = (0, 0)) -> CountsResult:
    """A result right on the examples of ``ranges`` (half-open) and on 250-299 (what the intact model gets right)
    except those of ``wrong``; wrong elsewhere."""
    correct = np.zeros(N, dtype=bool)
    correct[250:] = True
    for start, stop in ranges:
        correct[start:stop] = True
    correct[wrong[0]:wrong[1]] = False
    return CountsResult(correct, np.where(correct, 1.0, -1.0), tuple(map(str, range(N))))


def _select(results: dict, proposal: Proposal, single: Head = H0) -> object:
    return RULES["sequence"].select(proposal, single, lambda sets: [results[s] for s in sets], _right(), alpha=0.05,
                  measure="accuracy", tolerance=0.0, sizes=(75, 75))


def _proposal(sequence: tuple[Head, ...] = (H0, H1, H2), block: int = 1) -> Proposal:
    """S = {H0, H1, H2}: membership order H0, H1, H2, the sequence in ``sequence`` starting with a block of
    ``block`` heads; nothing on the check half."""
    return Proposal((H0, H1, H2), (H0, H1, H2), ((0, 0),) * 3, sequence,
                    ((0, 0),) * len(hypotheses(sequence, block)), block)


# H0 and H1 each add 30 examples to any set, H2 nothing: the proposal and each of it without one head.
ADDING = {(H0, H1, H2): _right((0, 60)), (H1, H2): _right((30, 60)), (H0, H2): _right((0, 30)),
          (H0, H1): _right((0, 60)), (H0,): _right((0, 30)), (H2,): _right()}


def test_the_sequence_ships_the_last_prefix_reached_and_its_estimate_is_marked() -> None:
    """Order H0, H1, H2: H0 improves on the intact model, H1 adds to H0, H2 adds nothing to them, so the sequence
    stops at its third step and ships {H0, H1}. The single H0 rejects at its half of alpha and passes it on, so the
    sequence runs at all of alpha: one-sided 0.025."""
    chosen = _select(ADDING, _proposal())
    record = chosen.selection
    assert [(s.added, s.heldout_rescued, s.heldout_damaged, s.rejected) for s in record.steps] == [
        ("L0.H0", 30, 0, True), ("L0.H1", 30, 0, True), ("L0.H2", 0, 0, False)]
    assert record.steps[0].p_value == pytest.approx(upper_tail(30, 30)) and record.steps[2].p_value == 1.0
    assert record.share == 1.0 and all(s.level == pytest.approx(0.025) for s in record.steps)
    (single,) = record.tests
    assert (single.heads, single.share, single.rejected) == (("L0.H0",), 0.5, True)
    assert chosen.heads == (H0, H1) and record.chosen == "proposal" and chosen.verdict.confirmed
    assert chosen.verdict.selected and chosen.verdict.family == 2 and len(chosen.verdict.steps) == 2
    line = verdict_sentence(chosen.verdict)
    assert line.startswith("CONFIRMED improvement") and "exploratory estimate" in line
    assert "each of 2 steps rejected" in line and "simultaneous over 2 prefixes" in line


def test_a_stop_after_one_head_confirms_nothing_in_the_proposals_branch() -> None:
    """Order H0, H2, H1: H2 adds nothing to H0, so the sequence stops at its second step; {H0} is the single's
    claim, confirmed by the single's own test at its half of alpha."""
    chosen = _select(ADDING | {(H0, H2): _right((0, 30))}, _proposal((H0, H2, H1)))
    assert [s.rejected for s in chosen.selection.steps] == [True, False]
    assert chosen.heads == (H0,) and chosen.selection.chosen == "single" and chosen.verdict.confirmed
    assert chosen.verdict.share == 0.5 and not chosen.verdict.steps
    assert chosen.selection.share == 1.0  # the single's share went on to the sequence, which still stopped


# H0 and H1 improve the task only together (40 examples), each alone nothing; H2 nothing anywhere.
TOGETHER = {(H0,): _right(), (H1,): _right(), (H2,): _right(), (H0, H1): _right((0, 40)),
            (H0, H1, H2): _right((0, 40)), (H1, H2): _right(), (H0, H2): _right()}


def test_heads_that_improve_only_together_enter_the_sequence_as_a_block() -> None:
    """A block of two: {H0, H1} against the intact model, then each of its heads against the block without it, then
    H2 against the block. The block is confirmed. Started with one head, the sequence asks H0 to improve alone,
    stops at once, and confirms nothing (the membership tests' kept set {H0, H1} is shown, unconfirmed)."""
    chosen = _select(TOGETHER, _proposal(block=2))
    assert [(s.prefix, s.added, s.heldout_rescued, s.heldout_damaged, s.rejected) for s in chosen.selection.steps] == [
        (("L0.H0", "L0.H1"), "L0.H0,L0.H1", 40, 0, True), (("L0.H0", "L0.H1"), "L0.H0", 40, 0, True),
        (("L0.H0", "L0.H1"), "L0.H1", 40, 0, True), (("L0.H0", "L0.H1", "L0.H2"), "L0.H2", 0, 0, False)]
    assert chosen.heads == (H0, H1) and chosen.selection.chosen == "proposal" and chosen.verdict.confirmed
    assert len(chosen.verdict.steps) == 3 and chosen.verdict.family == 2
    assert "each of 3 steps rejected" in verdict_sentence(chosen.verdict)
    alone = _select(TOGETHER, _proposal(block=1))
    assert [s.rejected for s in alone.selection.steps] == [False]
    assert alone.heads == (H0, H1) and not alone.verdict.confirmed and alone.selection.chosen == "none"


def test_a_block_holding_a_head_that_adds_nothing_to_it_is_not_shipped() -> None:
    """Order H2, H0, H1 with a block of two: {H0, H2} improves on the intact model (H0's 30 examples), but H2 adds
    nothing to the block without it, so the sequence stops there and ships nothing; the single H0 is confirmed by
    its own test."""
    chosen = _select(ADDING, _proposal((H2, H0, H1), block=2))
    assert [(s.added, s.rejected) for s in chosen.selection.steps] == [("L0.H2,L0.H0", True), ("L0.H2", False)]
    assert chosen.heads == (H0,) and chosen.selection.chosen == "single" and chosen.verdict.confirmed


def test_the_block_is_the_shortest_prefix_with_half_the_best_gain_on_the_search_half() -> None:
    """Net gains of the prefixes on the search half: 1, 12, 13 -> a block of two; 8, 12, 13 -> one head; none
    positive -> one head; 7 or 6, 13, 12 -> one head or two (half of 13 is 6.5)."""
    size = block_size
    assert (size([1, 12, 13]), size([8, 12, 13]), size([-2, -1, -3]), size([7, 13, 12]), size([6, 13, 12])) == (
        2, 1, 1, 1, 2)


def test_a_whole_sequence_passes_its_share_on_to_the_single() -> None:
    """The single H3, not in the proposal, rescues 10 and damages 2 (exact p 0.039): not confirmed at its half of
    alpha alone, confirmed once the sequence, reaching the whole proposal, passes its half on. With a sequence that
    stops, nothing is passed and the single stays unconfirmed."""
    gains = {(H0, H1, H2): _right((0, 90)), (H1, H2): _right((30, 90)), (H0, H2): _right((0, 30), (60, 90)),
             (H0, H1): _right((0, 60)), (H0,): _right((0, 30)), (H3,): _right((100, 110), wrong=(250, 252))}
    whole = _select(gains, _proposal(), single=H3)
    assert [s.rejected for s in whole.selection.steps] == [True, True, True]
    assert whole.heads == (H0, H1, H2) and whole.verdict.confirmed and not whole.verdict.selected
    (single,) = whole.selection.tests
    assert single.p_value == pytest.approx(158 / 4096) and (single.share, single.rejected) == (1.0, True)
    assert whole.selection.share == 0.5  # the proposal's own half: the single rejected only after it
    stopped = _select(gains | {(H0, H1, H2): _right((0, 60))}, _proposal(), single=H3)
    (single,) = stopped.selection.tests
    assert (single.share, single.rejected) == (0.5, False) and stopped.heads == (H0, H1)


def test_where_nothing_is_confirmed_the_kept_set_is_shown_and_its_own_test_does_not_confirm_it() -> None:
    """Order H2, H0, H1: the null H2 comes first, so the sequence stops at once. The membership tests keep {H0, H1}
    (each adds 30 to the proposal), whose own McNemar p is tiny: it is shown, chosen by held-out, not confirmed."""
    chosen = _select(ADDING, _proposal((H2, H0, H1)), single=H2)
    assert [s.rejected for s in chosen.selection.steps] == [False]
    assert chosen.selection.kept == ("L0.H0", "L0.H1") and chosen.heads == (H0, H1)
    assert chosen.verdict.p_value < 1e-9 and not chosen.verdict.confirmed and chosen.verdict.selected
    assert chosen.selection.chosen == "none" and chosen.selection.share == 0.5
    line = verdict_sentence(chosen.verdict)
    assert line.startswith("no confirmed improvement") and "the sequence stopped at step 1" in line


def test_the_sequence_order_is_each_heads_own_gain_on_the_search_half() -> None:
    """H1 gains most alone on the search half (the first 150 examples), then H2, then H0; what they do on the other
    examples does not count."""
    alone = [_right((0, 10), (150, 250)), _right((0, 40)), _right((0, 20), wrong=(250, 260))]
    search = np.zeros(N, dtype=bool)
    search[:150] = True
    order = gain_order((H0, H1, H2), alone, _right(), search=search, measure="accuracy", tolerance=0.0)
    assert order == (H1, H2, H0)
    search[250:] = True  # H2's 10 damaged now count: a net 10, as H0's, and fewer damaged goes first
    assert gain_order((H0, H1, H2), alone, _right(), search=search, measure="accuracy", tolerance=0.0) == (H1, H0, H2)


def test_the_line_and_the_report_show_the_procedure_that_decided() -> None:
    """The terminal line names the set that ships and each step that decided it, with its p; report.md shows the
    membership tests only where they chose the set shown (nothing confirmed), and says elsewhere that they decided
    nothing."""
    from types import SimpleNamespace

    rule = RULES["sequence"]
    shipped = _select(ADDING, _proposal())
    line = rule.summary(shipped)
    assert "ships L0.H0,L0.H1, confirmed by the proposal's fixed sequence" in line
    assert f"L0.H0 against the original p={upper_tail(30, 30):.2g}" in line and "L0.H1 added to L0.H0 p=" in line
    assert line.endswith("then it stopped at L0.H2 added to L0.H0,L0.H1 p=1")
    section = "\n".join(rule.section(SimpleNamespace(selection=shipped.selection)))
    assert "decided nothing here" in section and "| order | head |" not in section
    shown = _select(ADDING, _proposal((H2, H0, H1)), single=H2)
    line = rule.summary(shown)
    assert "nothing confirmed: the proposal's fixed sequence stopped at step 1 (L0.H2 against the original" in line
    assert line.endswith("shown: L0.H0,L0.H1 (the membership tests' kept set, not a claim)")
    section = "\n".join(rule.section(SimpleNamespace(selection=shown.selection)))
    assert "**The set shown, since nothing is confirmed** (not a claim)" in section
    assert "| 1 | `L0.H0` |" in section and "Kept: `L0.H0,L0.H1`." in section
