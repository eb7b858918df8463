"""find's own search code on counts-only models: how often it is wrong, and how often right, in seconds.

A *counts-only model* says, for any set of heads removed, which examples become right or wrong, and nothing
else: no weights, no forward pass. Each head toggles the correctness of a random subset of examples (drawn once
per model and split); removing a set toggles each example once per head of the set that toggles it (so two heads
toggling the same example cancel). A head's two rates are the shares of all examples it rescues (toggles from
wrong to right) and damages (from right to wrong), in expectation:

- a **null** head (no effect on the task) rescues and damages equally (``flip / 2`` each): it flips ``flip`` of
  the answers at random, the behaviour every real head shows on examples it does not understand;
- a **real** head rescues more than it damages: ``(0.008, 0.002)`` is +0.6 points at a 1% discordant rate;
- an **interacting pair** (``partners``): a head with its own rates and a partner that alone is a null head,
  plus toggles that act only when *both* are removed (an example the two heads decide together), so the partner
  helps only once the first head is removed and the screen, which sees heads alone, cannot rank it.

Margins are +-|N(0, 1)|, their sign the correctness (so a toggle flips the sign), enough for find's ranking key.

:func:`run_improve` feeds such a model through exactly what ``find`` runs (:func:`headprune.search.improve.choose`:
the halves, the screen, the joint search and its growth from the screen at the best set; then
:func:`headprune.search.improve.choose_on_heldout`: the membership tests and the held-out verdicts), with the real
records and statistics, or through the rule of 0.2 or of 0.1.0 for comparison. Nothing here is re-implemented
but the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from headprune.heads import Head, HeadGrid
from headprune.search.find_result import FindSettings
from headprune.search.folds import Folds
from headprune.search.improve import choose, choose_on_heldout
from headprune.search.stages import Stages

Rates = tuple[float, float]  # (rescued, damaged) as shares of all examples


@dataclass(frozen=True)
class CountsResult:
    """What find reads of a condition (the fields it uses of an ``EvalResult``), as arrays."""

    correct: np.ndarray
    margins: np.ndarray
    ids: tuple[str, ...]
    task: str = "counts"
    kind: str = "choice"

    @property
    def n(self) -> int:
        return len(self.correct)

    @property
    def has_accuracy(self) -> bool:
        return True

    @property
    def accuracy(self) -> float:
        return float(np.count_nonzero(self.correct)) / len(self.correct)


Pair = tuple[int, int, Rates]  # two head indices and the rates of the toggles that act only when both are removed


Group = tuple[tuple[int, ...], tuple[int, ...], Rates]  # toggles acting when all of the first heads and any of the
# second are removed (a masked or redundant effect: ``((), (a, b), r)`` acts once either a or b is removed)


class CountsSplit:
    """One set of examples of a counts-only model: its intact correctness, every head's toggles, the toggles of each
    interacting pair and of each group. ``exclusive``: each example is toggled by at most one head (drawn once per
    example), so a null head is exactly null inside any set: no toggle of another head ever cancels its own."""

    def __init__(self, rng: np.random.Generator, n: int, accuracy: float, rates: Sequence[Rates],
                 pairs: Sequence[Pair] = (), groups: Sequence[Group] = (), *, exclusive: bool = False) -> None:
        self.correct = rng.random(n) < accuracy
        size = np.abs(rng.standard_normal(n)) + 1e-3
        self.margins = np.where(self.correct, size, -size)
        self.toggles = (self._exclusive(rng, accuracy, rates) if exclusive
                        else self._toggles(rng, accuracy, rates))  # (heads, n)
        self.pairs = [(a, b) for a, b, _ in pairs]
        self.pair_toggles = self._toggles(rng, accuracy, [r for _, _, r in pairs])  # (pairs, n)
        self.groups = [(set(every), set(some)) for every, some, _ in groups]
        self.group_toggles = self._toggles(rng, accuracy, [r for *_, r in groups]) if groups else None  # (groups, n)
        self.ids = tuple(str(i) for i in range(n))

    def _exclusive(self, rng: np.random.Generator, accuracy: float, rates: Sequence[Rates]) -> np.ndarray:
        """One uniform draw per example picks the head that toggles it, if any (the shares must add up to at most
        1 on either side)."""
        rescue = np.cumsum([r for r, _ in rates]) / (1 - accuracy)
        damage = np.cumsum([d for _, d in rates]) / accuracy
        if rescue[-1] > 1 or damage[-1] > 1:
            raise ValueError("exclusive toggles: the heads' rates add up to more than every example")
        draw = rng.random(len(self.correct))
        bounds = np.where(self.correct[None, :], damage[:, None], rescue[:, None])  # (heads, n)
        which = (draw[None, :] >= bounds).sum(axis=0)  # the first head whose cumulative share exceeds the draw
        return np.arange(len(rates))[:, None] == which[None, :]

    def _toggles(self, rng: np.random.Generator, accuracy: float, rates: Sequence[Rates]) -> np.ndarray:
        rescue = np.array([r for r, _ in rates]).reshape(-1, 1) / (1 - accuracy)  # P(toggle | wrong)
        damage = np.array([d for _, d in rates]).reshape(-1, 1) / accuracy  # P(toggle | right)
        draws = rng.random((len(rates), len(self.correct)))
        return np.where(self.correct[None, :], draws < damage, draws < rescue)

    def result(self, indices: Sequence[int]) -> CountsResult:
        if not indices:
            return CountsResult(self.correct, self.margins, self.ids)
        chosen = set(indices)
        sources = [self.toggles[list(indices)]] + [self.pair_toggles[[k for k, (a, b) in enumerate(self.pairs)
                                                                      if a in chosen and b in chosen]]]
        if self.group_toggles is not None:
            sources.append(self.group_toggles[[k for k, (every, some) in enumerate(self.groups)
                                               if every <= chosen and (not some or some & chosen)]])
        flipped = np.bitwise_xor.reduce(np.concatenate(sources), axis=0)
        return CountsResult(self.correct ^ flipped, np.where(flipped, -self.margins, self.margins), self.ids)


@dataclass
class _Journal:
    """Every condition of a counts-only model is known at once: nothing is ever missing."""

    def has(self, key: str) -> bool:
        return True


@dataclass
class CountsConditions:
    """The part of ``Conditions`` the search uses, answered by a counts-only model."""

    splits: dict[str, CountsSplit]
    grid: HeadGrid
    journal: _Journal = field(default_factory=_Journal)
    evaluators: dict = field(default_factory=dict)
    control_names: tuple[str, ...] = ()

    def index(self, heads: Sequence[Head]) -> list[int]:
        return [h.layer * self.grid.num_heads + h.head for h in heads]

    def many(self, split: str, head_sets: Sequence[Sequence[Head]], label: str, *,
             quiet: bool = False) -> list[CountsResult]:
        return [self.splits[split].result(self.index(heads)) for heads in head_sets]


@dataclass(frozen=True)
class CountsModel:
    """The part of ``LoadedModel`` the search uses."""

    grid: HeadGrid
    dtype: torch.dtype = torch.float32


RULES = ("heldout", "check", "same")  # find's; 0.2's (admission on the check half); 0.1.0's (all on discovery)


@dataclass(frozen=True)
class Outcome:
    """One simulated find run: the primary set and its verdict, against the truth."""

    primary: tuple[int, ...]  # head indices
    real: tuple[int, ...]  # the heads with an effect (both heads of an interacting pair)
    confirmed: bool
    gain: float = 0.0  # the true expected accuracy change of removing the primary set (a fraction)

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


FAMILIES = ("0", "1", "2", "pair", "2 exclusive", "together")  # the grid's models, by their heads with an effect


def family(name: str, effect: Rates, flip: float) -> dict:
    """:func:`run_improve`'s keyword arguments for a family of :data:`FAMILIES`, real heads of ``effect``: ``0``-``2``
    real heads; ``pair``, an interacting pair (a real head and a partner that helps only once it is removed, by as
    much again); ``2 exclusive``, two real heads among exact nulls; ``together``, two heads that improve the task
    only together (each alone a null head flipping ``flip``; together as much as two real heads)."""
    if name == "pair":
        return {"partners": [(effect, effect)]}
    if name == "2 exclusive":
        return {"real": [effect] * 2, "exclusive": True}
    if name == "together":
        return {"partners": [((flip / 2, flip / 2), (2 * effect[0], 2 * effect[1]))]}
    return {"real": [effect] * int(name)}


def run_improve(seed: int, *, flip: float, real: Sequence[Rates] = (), partners: Sequence[tuple[Rates, Rates]] = (),
                layers: int = 2, heads: int = 9, discovery: int = 2000, heldout: int = 1000, accuracy: float = 0.6,
                settings: FindSettings | None = None, rule: str = "heldout", exclusive: bool = False) -> Outcome:
    """One find run (improve, exact screen) on a fresh counts-only model: ``real`` heads at random places,
    ``partners`` interacting pairs (each: the first head's own rates, and the rates of the toggles that act only
    when both heads are removed; the second head alone is a null head), every other head a null head flipping
    ``flip`` of the answers. ``settings``: find's (default: its defaults, seeded by ``seed``). ``rule``: one of
    :data:`RULES`: ``heldout`` (find's), ``check`` (0.2's: heads admitted on the check half alone) or ``same``
    (0.1.0's: propose and admit on all of discovery, single heads by find's ranking key). ``exclusive``: each
    example toggled by at most one head (:class:`CountsSplit`), so null heads are exactly null inside any set."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}, not {rule!r}")
    rng = np.random.default_rng(seed)
    grid = HeadGrid.uniform(layers, heads, heads, 4)
    rates: list[Rates] = [(flip / 2, flip / 2)] * grid.total
    places = [int(i) for i in rng.choice(grid.total, size=len(real) + 2 * len(partners), replace=False)]
    for place, effect in zip(places, [*real, *(own for own, _ in partners)]):
        rates[place] = effect
    pairs = [(places[len(real) + 2 * k], places[len(real) + 2 * k + 1], joint) for k, (_, joint)
             in enumerate(partners)]
    splits = {"discovery": CountsSplit(rng, discovery, accuracy, rates, pairs, exclusive=exclusive),
              "heldout": CountsSplit(rng, heldout, accuracy, rates, pairs, exclusive=exclusive)}
    conditions = CountsConditions(splits, grid)
    stages = Stages(CountsModel(grid), conditions, settings or FindSettings(seed=seed))  # type: ignore[arg-type]
    stages.base = {name: split.result(()) for name, split in splits.items()}
    # It logs a line or two: callers running thousands quieten the "headprune" logger.
    if rule == "heldout":
        chosen = choose_on_heldout(stages, choose(stages))
        primary, confirmed = chosen.heads, chosen.verdict.confirmed
    else:
        if rule == "same":
            stages.folds = Folds.same(discovery)
        from scripts.admission import choose_by_admission  # 0.2's rule lives with the comparisons, in a checkout

        frozen, evaluated = choose_by_admission(stages, singles="key" if rule == "same" else None)
        primary = frozen[0]
        (finalist,) = stages.finalists([primary], evaluated)
        confirmed = finalist.heldout.confirmed
    indices = tuple(conditions.index(primary))
    return Outcome(indices, tuple(places), confirmed, true_change(rates, indices, accuracy, pairs,
                                                                  exclusive=exclusive))


def true_change(rates: Sequence[Rates], indices: Sequence[int], accuracy: float, pairs: Sequence[Pair] = (),
                groups: Sequence[Group] = (), *, exclusive: bool = False) -> float:
    """The exact expected accuracy change of removing the heads ``indices`` of a counts-only model: an example
    changes when an odd number of its toggles act (each head's, each pair's whose two heads are both removed, and
    each group's whose condition holds, independently, with its rate given the example's intact correctness).
    ``exclusive`` (no pairs or groups): the heads' toggles never meet, so the change is the sum of theirs."""
    if exclusive:
        return float(sum(rates[i][0] - rates[i][1] for i in indices))
    chosen = set(indices)
    sources = ([rates[i] for i in indices] + [r for a, b, r in pairs if a in chosen and b in chosen]
               + [r for every, some, r in groups if set(every) <= chosen and (not some or set(some) & chosen)])
    if not sources:
        return 0.0
    damage = np.array([d / accuracy for _, d in sources])
    rescue = np.array([r / (1 - accuracy) for r, _ in sources])
    odd_right, odd_wrong = (1 - np.prod(1 - 2 * damage)) / 2, (1 - np.prod(1 - 2 * rescue)) / 2
    return float((1 - accuracy) * odd_wrong - accuracy * odd_right)


MASKED = ((0.004, 0.002), (0.03, 0.002))  # the redundant pair's own effect; each masked head's, with A or B removed


def run_masked(seed: int, *, flip: float = 0.003, discovery: int = 2000, heldout: int = 1000, accuracy: float = 0.6,
               redundant: Rates = MASKED[0], partner: Rates = MASKED[1], alpha: float = 0.05) -> Outcome:
    """The held-out stage alone (:func:`headprune.search.selection.select`, with find's membership tests) on a
    proposal fixed as discovery would leave it, on fresh examples: heads A and B are *redundant* (their small
    shared effect acts once either is removed, so neither adds anything to a set holding the other), C and D act
    only with A or B removed (*masked*: alone, null heads). S = {A, B, C, D} truly gains both effects (about +5.8
    points with :data:`MASKED`); its kept set is typically {C, D}, which gains nothing; the single is A (+0.2).
    Every head also flips ``flip`` of the answers at random. A confirmed {C, D} is a false confirmation; ``real``
    lists A, B, C and D (each has an effect within S)."""
    from headprune.search.folds import Folds
    from headprune.search.membership import propose
    from headprune.search.selection import select

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
    proposal = propose(heads, lambda sets: conditions.many("discovery", sets, ""), splits["discovery"].result(()),
                       search=folds.search, check=folds.check, measure="accuracy", tolerance=0.0)
    base = splits["heldout"].result(())
    chosen = select(proposal, Head(0, a), lambda sets: conditions.many("heldout", sets, ""), base, alpha=alpha,
                    measure="accuracy", tolerance=0.0, sizes=folds.sizes)
    indices = tuple(conditions.index(chosen.heads))
    return Outcome(indices, (a, b, c, d), chosen.verdict.confirmed, true_change(rates, indices, accuracy,
                                                                                groups=groups))


__all__ = ["FAMILIES", "MASKED", "RULES", "CountsConditions", "CountsModel", "CountsResult", "CountsSplit", "Outcome",
           "family", "run_improve", "run_masked", "true_change"]
