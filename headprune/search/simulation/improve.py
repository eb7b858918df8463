"""The improve objective on counts-only models (``headprune.search.simulation.counts``) through find's own code.

:func:`run_improve` feeds a fresh model through exactly what ``find`` runs (:func:`headprune.search.improve.choose`:
the halves, the screen, the joint search and its growth from the screen at the best set, the proposal; then
:func:`headprune.search.improve.choose_on_heldout`: the selection rule's held-out stage), with the real records and
statistics, under find's rule or any other registered selection rule (``headprune.search.rules``: an earlier rule
that chose its sets otherwise runs its own walk). :func:`run_masked` runs the held-out stage alone on a proposal of
redundant and masked heads. Nothing here is re-implemented but the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headprune.heads import Head, HeadGrid
from headprune.search.find_result import FindSettings
from headprune.search.folds import Folds
from headprune.search.improve import choose, choose_on_heldout
from headprune.search.proposal import propose
from headprune.search.rules import RULES, Ran, SelectionRule, find_rule
from headprune.search.simulation.counts import (CountsConditions, CountsModel, CountsSplit, Group, Rates,
                                                true_change)
from headprune.search.stages import Stages


@dataclass(frozen=True)
class Outcome:
    """One simulated find run: the primary set and its verdict, against the truth."""

    primary: tuple[int, ...]  # head indices
    real: tuple[int, ...]  # the heads with an effect (both heads of an interacting pair)
    confirmed: bool
    gain: float = 0.0  # the true expected accuracy change of removing the primary set (a fraction)
    order: tuple[int, ...] = ()  # the proposal's heads in the order its steps followed (empty: no proposal)

    @property
    def null_ahead(self) -> bool:
        """Every real head is in the proposal, and a null head comes ahead of one of them in its order: where the
        fixed sequence stopped before the last real head."""
        if not self.real or not set(self.real) <= set(self.order):
            return False
        return max(self.order.index(h) for h in self.real) >= len(self.real)

    @property
    def passenger(self) -> bool:
        """A head with no effect rides in a primary set of several heads."""
        return len(self.primary) > 1 and any(h not in self.real for h in self.primary)

    @property
    def kept(self) -> float:
        """The share of real heads in the primary set (nan without real heads)."""
        return float(np.mean([h in self.primary for h in self.real])) if self.real else float("nan")

    @property
    def all_kept(self) -> bool:
        """Every real head is in the primary set (false without real heads)."""
        return bool(self.real) and all(h in self.primary for h in self.real)

    @property
    def confirmed_gain(self) -> float:
        """The true gain the run ships with a confirmed verdict (0 when it confirms nothing)."""
        return self.gain if self.confirmed else 0.0

    @property
    def clean_confirmation(self) -> bool:
        """Confirmed, with every head of the primary set real."""
        return self.confirmed and all(h in self.real for h in self.primary)

    @property
    def false_confirmation(self) -> bool:
        """Confirmed, with a head of no effect in the primary set, or with no true gain."""
        return self.confirmed and (any(h not in self.real for h in self.primary) or self.gain <= 0)


# The grid's models, by their heads with an effect.
FAMILIES = ("0", "1", "2", "pair", "2 exclusive", "together", "null first")
LUCKY_NULL = "lucky null"  # a family of size alone, outside the grid (no real head)


def family(name: str, effect: Rates, flip: float) -> dict:
    """:func:`run_improve`'s keyword arguments for a family of :data:`FAMILIES`, real heads of ``effect``: ``0``-``2``
    real heads; ``pair``, an interacting pair (a real head and a partner that helps only once it is removed, by as
    much again); ``2 exclusive``, two real heads among exact nulls; ``together``, two heads that improve the task
    only together (each alone a null head flipping ``flip``; together as much as two real heads); ``null first``, two
    real heads and a null head that the search half ranks first (it rescues half as much again as a real head there
    and flips ``flip`` at random everywhere else). Beside them, :data:`LUCKY_NULL`: no real head, every head exactly
    null outside the search half (each example toggled by at most one head), and that lucky head: the size of the
    steps where discovery ranks a null head first."""
    if name == "null first":
        return {"real": [effect] * 2, "lucky": (1.5 * effect[0], effect[1])}
    if name == LUCKY_NULL:
        return {"exclusive": True, "lucky": (1.5 * effect[0], effect[1])}
    if name == "pair":
        return {"partners": [(effect, effect)]}
    if name == "2 exclusive":
        return {"real": [effect] * 2, "exclusive": True}
    if name == "together":
        return {"partners": [((flip / 2, flip / 2), (2 * effect[0], 2 * effect[1]))]}
    return {"real": [effect] * int(name)}


def run_improve(seed: int, *, flip: float, real: Sequence[Rates] = (), partners: Sequence[tuple[Rates, Rates]] = (),
                layers: int = 2, heads: int = 9, discovery: int = 2000, heldout: int = 1000, accuracy: float = 0.6,
                settings: FindSettings | None = None, rule: str | None = None, exclusive: bool = False,
                lucky: Rates | None = None) -> Outcome:
    """One find run (improve, exact screen) on a fresh counts-only model: ``real`` heads at random places,
    ``partners`` interacting pairs (each: the first head's own rates, and the rates of the toggles that act only
    when both heads are removed; the second head alone is a null head), every other head a null head flipping
    ``flip`` of the answers. ``settings``: find's (default: its defaults, seeded by ``seed``). ``rule``: a
    registered selection rule's name (``headprune.search.rules``; default find's), e.g. ``admission`` (0.2's: heads
    admitted on the check half alone) or ``same`` (0.1.0's: propose and admit on all of discovery, single heads by
    find's ranking key). ``exclusive``: each example toggled by at most one head (:class:`CountsSplit`), so null heads
    are exactly null inside any set. ``lucky``: one more null head, whose toggles on the search half of discovery are
    drawn at these rates instead (the search half will rank it as a real head; no other examples see it so)."""
    rng = np.random.default_rng(seed)
    grid = HeadGrid.uniform(layers, heads, heads, 4)
    settings = settings or FindSettings(seed=seed)
    rates: list[Rates] = [(flip / 2, flip / 2)] * grid.total
    count = len(real) + 2 * len(partners)
    drawn = [int(i) for i in rng.choice(grid.total, size=count + (lucky is not None), replace=False)]
    places = drawn[:count]
    for place, effect in zip(places, [*real, *(own for own, _ in partners)]):
        rates[place] = effect
    pairs = [(places[len(real) + 2 * k], places[len(real) + 2 * k + 1], joint) for k, (_, joint)
             in enumerate(partners)]
    splits = {"discovery": CountsSplit(rng, discovery, accuracy, rates, pairs, exclusive=exclusive),
              "heldout": CountsSplit(rng, heldout, accuracy, rates, pairs, exclusive=exclusive)}
    if lucky is not None:  # the search half find will draw (Stages.split_discovery: the same seed and stream)
        splits["discovery"].retoggle(rng, drawn[-1], lucky, accuracy, Folds.halves(discovery, settings.seed).search)
    conditions = CountsConditions(splits, grid)
    stages = Stages(CountsModel(grid), conditions, settings)  # type: ignore[arg-type]
    stages.base = {name: split.result(()) for name, split in splits.items()}
    # It logs a line or two: callers running thousands quieten the "headprune" logger.
    ran = (find_rule() if rule is None else RULES[rule]).run(stages, through_find)
    indices = tuple(conditions.index(ran.heads))
    return Outcome(indices, tuple(places), ran.confirmed, true_change(rates, indices, accuracy, pairs,
                                                                      exclusive=exclusive),
                   tuple(conditions.index(ran.order)))


def through_find(stages: Stages, rule: SelectionRule) -> Ran:
    """find's discovery and ``rule``'s held-out stage on ``stages``."""
    chosen = choose_on_heldout(stages, choose(stages, rule))
    return Ran(chosen.heads, chosen.verdict.confirmed, tuple(map(Head.parse, chosen.selection.sequence)))


MASKED = ((0.004, 0.002), (0.03, 0.002))  # the redundant pair's own effect; each masked head's, with A or B removed


def run_masked(seed: int, *, flip: float = 0.003, discovery: int = 2000, heldout: int = 1000, accuracy: float = 0.6,
               redundant: Rates = MASKED[0], partner: Rates = MASKED[1], alpha: float = 0.05,
               rule: str | None = None) -> Outcome:
    """The held-out stage of a selection rule alone (``rule``, default find's: ``headprune.search.rules``) on a
    proposal fixed as discovery would leave it, on fresh examples: heads A and B are *redundant* (their small
    shared effect acts once either is removed, so neither adds anything to a set holding the other), C and D act
    only with A or B removed (*masked*: alone, null heads). S = {A, B, C, D} truly gains both effects (about +5.8
    points with :data:`MASKED`); its kept set is typically {C, D}, which gains nothing; the single is A (+0.2).
    Every head also flips ``flip`` of the answers at random. A confirmed {C, D} is a false confirmation; ``real``
    lists A, B, C and D (each has an effect within S)."""
    rng = np.random.default_rng(seed)
    grid = HeadGrid.uniform(1, 6, 6, 4)
    rates: list[Rates] = [(flip / 2, flip / 2)] * grid.total
    a, b, c, d = 0, 1, 2, 3
    groups: list[Group] = [((), (a, b), redundant), ((c,), (a, b), partner), ((d,), (a, b), partner)]
    splits = {"discovery": CountsSplit(rng, discovery, accuracy, rates, groups=groups),
              "heldout": CountsSplit(rng, heldout, accuracy, rates, groups=groups)}
    conditions = CountsConditions(splits, grid)
    heads = tuple(Head(0, i) for i in (a, b, c, d))
    folds = Folds.halves(discovery, seed)
    chooser = find_rule() if rule is None else RULES[rule]
    proposal = propose(heads, lambda sets: conditions.many("discovery", sets, ""), splits["discovery"].result(()),
                       search=folds.search, check=folds.check, measure="accuracy", tolerance=0.0,
                       rule=chooser)
    base = splits["heldout"].result(())
    chosen = chooser.select(proposal, Head(0, a), lambda sets: conditions.many("heldout", sets, ""), base,
                            alpha=alpha, measure="accuracy", tolerance=0.0, sizes=folds.sizes)
    indices = tuple(conditions.index(chosen.heads))
    return Outcome(indices, (a, b, c, d), chosen.verdict.confirmed, true_change(rates, indices, accuracy,
                                                                                groups=groups))


__all__ = ["FAMILIES", "LUCKY_NULL", "MASKED", "Outcome", "family", "run_improve", "run_masked", "through_find"]
