"""find's selection, measured through its own search code on counts-only models (numpy, seconds): passengers, false
confirmations and power.

``headprune.search.simulation`` runs exactly what find runs (halves, screen, joint search and its growth from the
screen at the best set, the proposal's membership tests on the check half and held-out, the held-out verdicts) on
models whose heads are real, null (flipping a share of the answers at random), or an interacting pair (a partner
that helps only once the first head is removed). A *passenger* is a null head in a primary set of several heads;
a *false confirmation* is a confirmed primary set that holds a null head or has no true gain. The sizes users run:
discovery/held-out 2,000/1,000 (find's defaults) with real heads of +0.6 points, and 150/300 (the README's main
job) with heads of +7.5 points (the size of its L11.H8). scripts/passengers.py runs the same cells with more runs
and writes the tables in docs/find.md.
"""

from __future__ import annotations

import numpy as np
import pytest

from headprune.search.find_result import FindSettings
from headprune.search.simulation import LUCKY_NULL, Outcome, family, run_improve, run_masked

pytestmark = pytest.mark.usefixtures("quiet_headprune")  # find's stages, thousands of times

FLIPS = (0.001, 0.003, 0.01, 0.03, 0.05)
SIZES = {"2000/1000": (2000, 1000, (0.008, 0.002)), "150/300": (150, 300, (0.078, 0.003))}
MAIN_JOB = {"nominees": 3, "max_heads": 2, "finalists": 2}
ALPHA = FindSettings().alpha


def _cell(size: str, reals: int | str, flip: float, runs: int, rule: str | None = None, **search: object
          ) -> list[Outcome]:
    discovery, heldout, effect = SIZES[size]
    return [run_improve(seed, flip=flip, discovery=discovery, heldout=heldout, rule=rule,
                        settings=FindSettings(seed=seed, **search), **family(str(reals), effect, flip))
            for seed in range(runs)]


def _rates(out: list[Outcome]) -> tuple[float, float]:
    return float(np.mean([o.passenger for o in out])), float(np.mean([o.false_confirmation for o in out]))


def _check_grid(size: str, runs: int, **search: object) -> None:
    worst: dict[str, tuple[float, str]] = {"passengers": (0.0, ""), "false confirmations": (0.0, "")}
    for reals in (0, 1, 2, "pair", "2 exclusive", "together"):
        for flip in (f for f in FLIPS if reals != "2 exclusive" or f <= 0.03):  # 16 exact nulls at 5% do not fit
            for name, rate in zip(worst, _rates(_cell(size, reals, flip, runs, **search))):
                worst[name] = max(worst[name], (rate, f"real {reals}, flip {flip}"))
    for name, (rate, where) in worst.items():
        assert rate <= ALPHA, f"{name} in {rate:.1%} of runs ({size}, {search or 'defaults'}, {where})"


@pytest.mark.parametrize("size", list(SIZES))
def test_passengers_and_false_confirmations_stay_within_alpha(size: str) -> None:
    """Find's defaults: in every cell (0, 1, 2 real heads, an interacting pair, or 2 real heads among exact nulls;
    null heads flipping 0.1-5%), a passenger rides in at most alpha of primary sets, and at most alpha of runs
    confirm falsely."""
    _check_grid(size, 40)


@pytest.mark.slow
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("search", [{"extend": 0}, {"extend": 2}, MAIN_JOB])
def test_the_same_holds_for_other_search_settings(size: str, search: dict) -> None:
    _check_grid(size, 60, **search)


@pytest.mark.parametrize(("size", "least"), [("150/300", 0.5), ("2000/1000", 0.25)])
def test_both_real_heads_are_kept_at_the_sizes_users_run(size: str, least: float) -> None:
    """Power, as users read it: the share of runs whose primary set holds *both* real heads (null heads flipping
    0.3%). The rule of 0.2 (heads admitted on the check half alone) fails the same check on the same models."""
    now, before = (_cell(size, 2, 0.003, 200, rule=rule) for rule in (None, "admission"))
    kept, kept_before = (float(np.mean([o.all_kept for o in out])) for out in (now, before))
    confirmed = float(np.mean([o.all_kept and o.confirmed for o in now]))
    assert kept >= least and kept_before < least / 2, (kept, kept_before)
    assert confirmed >= least * 0.8, confirmed  # and most of them with a confirmed verdict


def test_real_heads_behind_a_null_head_are_confirmed_where_the_fixed_sequence_stopped() -> None:
    """Two real heads at 2,000/1,000 (null flips 0.3%), find's rule and the fixed sequence it replaced on the same 200
    models: find's confirms both real heads in clearly more runs (29.5% against 21.5%), some of them where the
    proposal ordered a null head ahead of a real one (the sequence: none), and confirms nothing false beyond alpha/2."""
    now, before = (_cell("2000/1000", 2, 0.003, 200, rule=rule) for rule in (None, "sequence"))
    both, behind = ([float(np.mean([o.all_kept and o.confirmed and (o.null_ahead or not ahead) for o in out]))
                     for out in (now, before)] for ahead in (False, True))
    assert both[0] >= max(0.25, both[1] + 0.04), both
    assert behind[0] >= 0.02 and behind[1] == 0.0, behind
    assert max(_rates(now)[1], _rates(before)[1]) <= ALPHA / 2


@pytest.mark.parametrize("size", list(SIZES))
def test_a_null_head_the_search_half_ranks_first_costs_no_level(size: str) -> None:
    """Size after selection, where the fallback rule is most exposed: no real head, every head exactly null on the
    check half and held-out (each example toggled by at most one head, 3% each), and one of them lucky on the search
    half (it rescues half as much again as a real head there), so discovery proposes it and orders it first, and
    its steps pass level on to every head after it. At the README's size (150/300: a few dozen discordant pairs a
    step) and find's defaults (2,000/1,000: about 60 a head, where the sign test is nearly exact), confirmations
    (all of them false) stay within alpha/2 up to two standard errors of 300 runs (0.7% at each size at 1,000 runs,
    docs/find.md)."""
    discovery, heldout, effect = SIZES[size]
    out = [run_improve(seed, flip=0.03, discovery=discovery, heldout=heldout, **family(LUCKY_NULL, effect, 0.03))
           for seed in range(300)]
    assert np.mean([len(o.order) > 1 for o in out]) >= 0.8  # a proposal of several heads to walk through
    false = float(np.mean([o.false_confirmation for o in out]))
    assert false == float(np.mean([o.confirmed for o in out]))
    assert false <= ALPHA / 2 + 2 * (ALPHA / 2 * (1 - ALPHA / 2) / len(out)) ** 0.5, false


def test_a_partner_that_helps_only_with_the_first_head_is_found() -> None:
    """An interacting pair (the partner alone is a null head) at the main job's size and search settings: the screen
    taken at the best set (``--extend 1``, the default) brings the partner in; without it (``--extend 0``) the
    joint search never tries it."""
    grown, plain = (_cell("150/300", "pair", 0.003, 100, **MAIN_JOB, extend=steps) for steps in (1, 0))
    assert np.mean([o.all_kept for o in grown]) >= 0.4 > 0.15 >= np.mean([o.all_kept for o in plain])
    assert np.mean([o.confirmed_gain for o in grown]) > np.mean([o.confirmed_gain for o in plain]) + 0.01


@pytest.mark.slow
@pytest.mark.parametrize("size", list(SIZES))
def test_the_confirmed_gain_is_never_much_below_the_rule_of_0_2(size: str) -> None:
    """The price where one head is the answer: in every cell, the expected true gain confirmed is at most 0.1
    points below that of 0.2's rule on the same models (and far above it where two heads are real). 100 runs a cell,
    both rules on the same seeds: the closest cell (one real head flipping 5% at 2,000/1,000) measured -0.02 points
    there and -0.05 at 200 runs."""
    for reals in (1, 2, "pair"):
        for flip in FLIPS:
            now, before = (100 * np.mean([o.confirmed_gain for o in _cell(size, reals, flip, 100, rule=rule)])
                           for rule in (None, "admission"))
            assert now >= before - 0.1, f"{size}, real {reals}, flip {flip}: {now:.3f} against {before:.3f}"


def test_exact_null_heads_beside_strong_real_heads_stay_within_alpha() -> None:
    """Each example toggled by at most one head: a null head is exactly null inside any set (in the other cells two
    heads toggling one example cancel, so a null head is slightly harmful there and its test conservative). Beside
    two strong real heads, where the proposal is tested most, passengers and false confirmations stay within alpha,
    which is the guarantee; the grid's lower figures are not."""
    out = [o for flip in (0.01, 0.03) for o in _cell("150/300", "2 exclusive", flip, 200)]
    passengers, false = _rates(out)
    assert passengers <= ALPHA and false <= ALPHA, (passengers, false)
    assert np.mean([o.all_kept for o in out]) >= 0.5  # and the real heads are still found


def test_heads_that_improve_only_together_are_confirmed(monkeypatch) -> None:
    """Two heads that improve the task only together (each alone a null head; together +15 points) at the README's
    sizes: where discovery proposes them, find's steps start with them as a block and confirm them. Started with one
    head, as find's sequence was before its block, they ask the first to improve alone and confirm neither."""
    from headprune.search.rules import find_rule

    together = _cell("150/300", "together", 0.003, 100)
    assert np.mean([o.all_kept and o.confirmed for o in together]) >= 0.15  # 34.8% at 1,000 runs
    assert _rates(together) == (0.0, 0.0)
    monkeypatch.setattr(type(find_rule()), "block", lambda self, gains: 1)
    alone = _cell("150/300", "together", 0.003, 100)
    assert np.mean([o.all_kept and o.confirmed for o in alone]) <= 0.02


def test_redundant_and_masked_heads_confirm_a_set_that_gains_and_never_one_that_does_not() -> None:
    """Redundant and masked heads (``run_masked``, 2,000/1,000): S = {A, B, C, D} gains about 5.8 points, the kept
    set of the membership tests {C, D} nothing (C and D act only with A or B removed), the single A almost
    nothing. The sequence orders C and D first (their gain within S), and no prefix of them gains, so its block is
    C, D and A (or B): it improves, and each of its heads adds to the other two. That set, which gains as much as S
    without its redundant head, is confirmed in most runs; a set that gains nothing, in at most alpha/2. (The rule
    of parts confirmed nothing here in 98.9% of runs, and the rule before it the zero-gain {C, D} in 1.9% at null
    flips of 3%.)"""
    out = [run_masked(seed, flip=flip) for flip in (0.003, 0.03) for seed in range(100)]
    assert np.mean([o.confirmed and o.gain > 0.03 for o in out]) >= 0.6
    false = float(np.mean([o.false_confirmation for o in out]))
    assert false <= ALPHA / 2, false


def test_the_script_writes_both_tables(tmp_path) -> None:
    import runpy
    from pathlib import Path

    script = runpy.run_path(str(Path(__file__).resolve().parent.parent / "scripts" / "passengers.py"))
    figures = script["main"](["--runs", "1", "--power-runs", "1", "--compress-runs", "2", "--rules",
                              "sequence,admission", "--json", str(tmp_path / "p.json")])
    assert len(figures["improve"]) == 2 * 4 * (5 * 6 + 4) and len(figures["compress"]) == 3
    assert len(figures["power"]) == len(script["POWER_CELLS"]) and figures["power"][0]["runs"] == 1
    assert [row["flip"] for row in figures["masked"]] == [0.001, 0.003, 0.01, 0.03, 0.05]
    assert (figures["rules"], figures["power_rules"]) == (["sequence"], ["sequence", "admission"])
    assert set(figures["improve"][0]) == {"size", "search", "real", "flip", "sequence"}
    assert set(figures["power"][0]) == {"size", "search", "real", "flip", "runs", "sequence", "admission"}
    assert set(figures["improve"][0]["sequence"]) == {"passenger", "all_kept", "confirmed_all", "confirmed",
                                                     "false_confirmed", "confirmed_gain", "null_ahead",
                                                     "confirmed_null_ahead"}
    assert (tmp_path / "p.json").stat().st_size > 1000
