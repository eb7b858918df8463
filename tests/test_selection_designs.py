"""The held-out designs of ``scripts/selection_designs.py``, run through find's own search code on counts-only
models: the figures docs/find.md reports for them hold their order at 100 runs (fixed seeds, so exact)."""

from __future__ import annotations

import logging

import pytest

from scripts.selection_designs import cell, design, null_cell


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logger = logging.getLogger("headprune")
    level = logger.level
    logger.setLevel(logging.WARNING)
    yield
    logger.setLevel(level)


SEQUENCE = "sequence:order=single:show=kept:fav=search"


def test_a_reserve_for_the_kept_sets_test_loses_both_real_heads_where_the_sequence_does_not() -> None:
    """At 150/300 membership needs every held-out example: a third reserved for T's test keeps both real heads
    far less often than find's rule (the sequence, the branches at half of alpha each), the sequence favouring the
    proposal at least as often."""
    parts = cell("150/300 2 real", design("find"), 100)
    reserve = cell("150/300 2 real", design("reserve-0.33"), 100)
    sequence = cell("150/300 2 real", design(SEQUENCE), 100)
    assert reserve["all_kept"] < parts["all_kept"] - 0.1
    assert sequence["all_kept"] >= parts["all_kept"]
    assert sequence["passenger"] == reserve["passenger"] == 0


def test_the_sequence_of_prefixes_confirms_nothing_false_beyond_its_level() -> None:
    """No real head (null flips 3%, 2,000/1,000): the sequence's confirmations are false ones, at most alpha/2."""
    figures = null_cell("2000/1000", design(SEQUENCE), 100, 0.03)
    assert figures["false"] <= 0.025 and figures["passenger"] <= 0.05


def test_an_unknown_design_is_refused() -> None:
    with pytest.raises(ValueError):
        design("holm")
