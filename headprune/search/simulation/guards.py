"""find with a guard, on counts-only models through its own search code: how often a shipped set that truly breaks
the guard is reported as keeping it (size), and how often a set that keeps it is shipped when one exists (power).

The model is :mod:`headprune.search.simulation`'s (each head toggles the correctness of a random subset of
examples) with a second task, the guard, on examples of its own: every head has rates on the task and rates on the
guard. Families (:data:`FAMILIES`), each with two real task heads among null heads that flip ``flip`` of the answers
of both tasks:

- ``conflict``: head A improves the task most and damages the guard by ``2 x`` the margin; head B improves the task
  less (two thirds of A's rescues) and leaves the guard alone. A set keeping the guard exists ({B}); power is the
  share of runs that ship one, confirmed.
- ``boundary``: both real heads damage the guard so that removing *both* costs exactly the margin (the null of the
  guard's test, where its size is largest) and removing one costs half of it. Size: the share of runs that ship a
  set whose true guard change breaks the margin (at or beyond it) and call it confirmed; at most ``alpha / 2``.
- ``near``: both real heads damage the guard so that removing both costs ``NEAR`` (0.6) of the margin: within it,
  but by about the held-out test's half-width (at 400 guard examples), so that discovery admits the pair and
  held-out shows it within each about half the time (the README's main job's pair: general text's held-out
  interval ended at 1.004 of its margin). Where held-out cannot show the pair within, the guards' fixed sequence
  over the confirmed sets ships the first head, whose smaller cost it can show (``GuardOutcome.stopped``).
- ``harmless``: neither real head touches the guard: the guard's cost in power against find without a guard.

:func:`run_guarded` feeds one such model through :func:`headprune.search.improve.choose` and
:func:`headprune.search.improve.choose_on_heldout` with the guard in ``Stages.guards`` (the guards' fixed sequence
over the confirmed sets included), then the guards' held-out test of the primary set
(:func:`headprune.search.guard_search.heldout_effects`), exactly as find does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headprune.heads import HeadGrid
from headprune.search.find_result import FindSettings
from headprune.search.guard_search import heldout_effects
from headprune.search.guards import Guard, claim_holds
from headprune.search.improve import choose, choose_on_heldout
from headprune.search.simulation.counts import CountsConditions, CountsSplit, Rates, CountsModel, true_change
from headprune.search.stages import Stages

FAMILIES = ("conflict", "boundary", "near", "harmless")
NEAR = 0.6  # family near: the pair's true guard cost, in margins


@dataclass(frozen=True)
class GuardOutcome:
    """One simulated find run with a guard: what it shipped, whether it claimed it, and the truth."""

    primary: tuple[int, ...]
    confirmed: bool  # the task's gain confirmed and the guard held (find's claim)
    task_gain: float  # the primary set's true expected task change (a fraction)
    guard_change: float  # its true expected guard change (a fraction)
    margin: float  # a fraction
    stopped: bool = False  # the guards' fixed sequence stopped at a larger confirmed set, and the one before shipped

    @property
    def breaks(self) -> bool:
        """The shipped set truly costs the guard the margin or more."""
        return self.guard_change <= -self.margin + 1e-12

    @property
    def false_guard_claim(self) -> bool:
        """Confirmed, though the set truly breaks the guard: what the guard's test bounds."""
        return self.confirmed and self.breaks

    @property
    def good_ship(self) -> bool:
        """Confirmed with a true task gain and a guard truly kept."""
        return self.confirmed and self.task_gain > 0 and not self.breaks


def family_rates(family: str, effect: Rates, flip: float, margin: float) -> tuple[list[Rates], list[Rates]]:
    """The two real heads' task rates and guard rates of a family (see the module docstring)."""
    rescue, damage = effect
    if family == "conflict":
        task = [effect, (2 * rescue / 3, damage)]
        guard = [(flip / 2, flip / 2 + 2 * margin), (flip / 2, flip / 2)]
    elif family == "boundary":
        task = [effect, effect]
        guard = [(flip / 2, flip / 2 + _half_of(margin, flip))] * 2
    elif family == "near":
        task = [effect, effect]
        guard = [(flip / 2, flip / 2 + _half_of(NEAR * margin, flip))] * 2
    elif family == "harmless":
        task, guard = [effect, effect], [(flip / 2, flip / 2)] * 2
    else:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, not {family!r}")
    return task, guard


def _half_of(margin: float, flip: float, accuracy: float = 0.8) -> float:
    """The extra damage of each of two heads whose joint removal costs the guard exactly ``margin`` (toggles of the
    same example cancel, so it is a little more than half), by bisection on :func:`true_change`."""
    low, high = margin / 2, margin
    for _ in range(60):
        mid = (low + high) / 2
        pair = [(flip / 2, flip / 2 + mid)] * 2
        low, high = (mid, high) if true_change(pair, [0, 1], accuracy) > -margin else (low, mid)
    return high


def run_guarded(seed: int, *, family: str, effect: Rates, margin: float, flip: float = 0.003, layers: int = 2,
                heads: int = 9, discovery: int = 2000, heldout: int = 1000, guard_examples: int = 600,
                accuracy: float = 0.6, guard_accuracy: float = 0.8, settings: FindSettings | None = None,
                guarded: bool = True) -> GuardOutcome:
    """One find run (improve, exact screen) with one accuracy guard of ``guard_examples`` (a third for the search)
    and ``margin`` (a fraction) on a fresh counts-only model of ``family``; ``guarded=False`` runs find without the
    guard on the same model (the comparison of power)."""
    rng = np.random.default_rng(seed)
    grid = HeadGrid.uniform(layers, heads, heads, 4)
    task_real, guard_real = family_rates(family, effect, flip, margin)
    task_rates: list[Rates] = [(flip / 2, flip / 2)] * grid.total
    guard_rates: list[Rates] = [(flip / 2, flip / 2)] * grid.total
    places = [int(i) for i in rng.choice(grid.total, size=2, replace=False)]
    for place, t, g in zip(places, task_real, guard_real):
        task_rates[place], guard_rates[place] = t, g
    first = round(guard_examples / 3)
    splits = {"discovery": CountsSplit(rng, discovery, accuracy, task_rates),
              "heldout": CountsSplit(rng, heldout, accuracy, task_rates),
              "guard-discovery:0": CountsSplit(rng, first, guard_accuracy, guard_rates),
              "guard-heldout:0": CountsSplit(rng, guard_examples - first, guard_accuracy, guard_rates)}
    conditions = CountsConditions(splits, grid)
    stages = Stages(CountsModel(grid), conditions, settings or FindSettings(seed=seed))  # type: ignore[arg-type]
    stages.base = {name: split.result(()) for name, split in splits.items()}
    if guarded:
        stages.guards = (Guard("guard", "accuracy", margin, 0),)
    choice = choose(stages)
    chosen = choose_on_heldout(stages, choice)
    confirmed = chosen.verdict.confirmed
    if guarded:
        assert choice.guard is not None
        candidates = ([choice.proposal.heads] if choice.proposal is not None else []) + [(choice.single,)]
        kept = choice.guard.record(candidates).kept
        confirmed = claim_holds(confirmed, kept, heldout_effects(stages, [chosen.heads])[0])
    indices = tuple(conditions.index(chosen.heads))
    return GuardOutcome(indices, confirmed, true_change(task_rates, indices, accuracy),
                        true_change(guard_rates, indices, guard_accuracy), margin, bool(chosen.selection.guard_stop))


__all__ = ["FAMILIES", "GuardOutcome", "family_rates", "run_guarded"]
