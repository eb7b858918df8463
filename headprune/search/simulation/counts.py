"""The counts-only model find's simulations run through its own search code (``headprune.search.simulation``).

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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from headprune.heads import Head, HeadGrid

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

    def retoggle(self, rng: np.random.Generator, head: int, rates: Rates, accuracy: float, where: np.ndarray) -> None:
        """Draw ``head``'s toggles again at ``rates`` on the examples of ``where`` (bool), as if it had those rates
        there: a head that looks real on some examples only."""
        draws = rng.random(len(self.correct))
        drawn = np.where(self.correct, draws < rates[1] / accuracy, draws < rates[0] / (1 - accuracy))
        self.toggles[head] = np.where(where, drawn, self.toggles[head])

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


__all__ = ["CountsConditions", "CountsModel", "CountsResult", "CountsSplit", "Group", "Pair", "Rates", "true_change"]
