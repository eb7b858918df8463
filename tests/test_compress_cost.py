"""What the compress search costs: its cost cap, and the cost it records (sets per head removed, rounds, why it
stopped)."""

from __future__ import annotations

from helpers.handmade import build_model, reversed_task

from headprune.heads import Head, HeadGrid
from headprune.report.markdown import render_markdown
from headprune.search.find import find
from headprune.search.find_result import FindResult
from headprune.search.growth import SETS_PER_UNIT, Budget, grow
from headprune.search.paired import Paired

N = 100  # examples; a budget of 1 point is 1 example


def _interleaved(layers: int):  # noqa: ANN202
    """A queue where every third unit is harmless and the two after it each lose 2 of 100 examples: a budget
    of 1 point admits exactly the harmless ones. Returns the queue, a grid and an exact evaluation."""
    units = [(Head(layer, 0),) for layer in range(layers)]
    harmful = {unit[0] for i, unit in enumerate(units) if i % 3}

    def evaluate(head_sets, label):  # noqa: ANN001, ANN202
        return {heads: Paired(N, 0, 2 * sum(h in harmful for h in heads), 0.9,
                              0.9 - 0.02 * sum(h in harmful for h in heads), 0.0) for heads in head_sets}

    return units, HeadGrid.uniform(layers, 2, 2, 4), evaluate


def test_greedy_stops_at_its_cost_cap_in_a_long_interleaved_tail() -> None:
    units, grid, evaluate = _interleaved(60)
    grown = grow(units, grid, evaluate, budget=Budget(1.0), patience=3)
    # Two rejections between harmless units never reach patience 3: without the cap the search would walk all
    # 60 units (20 harmless, about 6 sets each). With it, it ends once the sets reach 2 x (patience + taken).
    assert grown.stopped == "cost"
    taken = len(grown.chosen)
    assert len(grown.evaluated) >= SETS_PER_UNIT * (3 + taken)  # it stopped at the cap, not before
    assert len(grown.evaluated) <= SETS_PER_UNIT * (3 + taken) + 3  # at most one round (3 sets) past it
    assert 1 <= taken < 20 and all(unit[0].layer % 3 == 0 for unit in grown.chosen)  # only harmless units
    chosen = tuple(sorted(h for unit in grown.chosen for h in unit))
    assert Budget(1.0)(grown.evaluated[chosen])


def test_greedy_without_a_tail_ends_with_its_queue_or_its_patience() -> None:
    units, grid, evaluate = _interleaved(3)  # one harmless unit, then two harmful: the queue runs out
    grown = grow(units, grid, evaluate, budget=Budget(1.0), patience=3)
    assert grown.stopped == "queue" and grown.chosen == [units[0]] and grown.rejected == units[1:]
    grown = grow(units, grid, evaluate, budget=Budget(1.0), patience=2)
    assert grown.stopped == "patience" and grown.rejected == units[1:]


def test_compress_records_its_cost_and_old_results_still_load() -> None:
    lm = build_model()  # H1..H3 silent: removing them changes nothing
    result = find(lm, reversed_task(), discovery=200, heldout=200, objective="compress", max_drop=3.0,
                  batch_size=128)
    c = result.compression
    assert c.heads == ("L0.H1", "L0.H2", "L0.H3")
    assert c.searched == len(c.curve) and c.rounds >= 1 and c.stopped == "queue"
    assert c.sets_per_head == round(c.searched / 3, 3)
    report = render_markdown(result)
    cost = f"{c.searched} distinct sets evaluated in {c.rounds} rounds, {c.sets_per_head:.2f} per head removed"
    assert cost in report and "rejected (none); the search ended with its queue." in report
    old = result.to_dict()
    for key in ("rounds", "sets_per_head", "stopped"):
        del old["compression"][key]
    loaded = FindResult.from_dict(old).compression
    assert (loaded.rounds, loaded.sets_per_head, loaded.stopped) == (None, None, None)
    assert "per head removed" not in render_markdown(FindResult.from_dict(old))
