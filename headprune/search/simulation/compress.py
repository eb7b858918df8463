"""``find --objective compress`` on counts-only models through its own screen, growth and held-out verdict: how
often an accepted set truly costs more than the budget (:func:`run_compress`; the model is
:mod:`headprune.search.simulation`'s, with heads that are harmless or harmful, :func:`compress_rates`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headprune.heads import HeadGrid
from headprune.search.find_result import FindSettings
from headprune.search.simulation.counts import CountsConditions, CountsModel, CountsSplit, Rates, true_change
from headprune.search.stages import Stages


def compress_rates(rng: np.random.Generator, count: int) -> list[Rates]:
    """Heads for the compress simulation: each flips up to 1% of the answers at random; 40% of them do no more
    (harmless), the others also damage 0.05-1.5% of the answers (harmful, the screen orders them last)."""
    rates = []
    for _ in range(count):
        flip = rng.uniform(0.0, 0.01)
        harm = 0.0 if rng.random() < 0.4 else rng.uniform(0.0005, 0.015)
        rates.append((flip / 2, flip / 2 + harm))
    return rates


@dataclass(frozen=True)
class CompressOutcome:
    """One simulated compress run: the set removed, its held-out verdict and its true cost."""

    removed: int
    accepted: bool
    change: float  # the true expected accuracy change of the set (negative: a drop)
    max_drop: float  # points

    @property
    def over_budget(self) -> bool:
        return self.change < -self.max_drop / 100


def run_compress(seed: int, *, max_drop: float = 0.5, layers: int = 4, heads: int = 9, discovery: int = 2000,
                 heldout: int = 1000, accuracy: float = 0.6, rule: str = "held-out") -> CompressOutcome:
    """One ``find --objective compress`` run (greedy, exact screen) on a fresh counts-only model
    (:func:`compress_rates`), through find's own screen, growth and held-out verdict. ``rule``: ``held-out``
    (find's budget: discovery judged as the held-out test will judge it) or ``estimate`` (the discovery estimate
    alone: the rule before 0.2)."""
    from headprune.search.compress import grow_on_discovery, verdict_for
    from headprune.search.growth import Budget
    from headprune.search.settings import compress_fields

    rng = np.random.default_rng(seed)
    grid = HeadGrid.uniform(layers, heads, heads, 4)
    rates = compress_rates(rng, grid.total)
    splits = {"discovery": CountsSplit(rng, discovery, accuracy, rates),
              "heldout": CountsSplit(rng, heldout, accuracy, rates)}
    conditions = CountsConditions(splits, grid)
    settings = FindSettings(seed=seed, **compress_fields("compress", max_drop, None, None))
    stages = Stages(CountsModel(grid), conditions, settings)  # type: ignore[arg-type]
    stages.base = {name: split.result(()) for name, split in splits.items()}
    if rule not in ("held-out", "estimate"):
        raise ValueError(f"rule must be held-out or estimate, not {rule!r}")
    screened, prescreen = stages.screen()
    budget = Budget(max_drop) if rule == "estimate" else None
    chosen = grow_on_discovery(stages, screened, prescreen, budget=budget)[3]
    indices = conditions.index(chosen)
    verdict = verdict_for(stages.base["heldout"], splits["heldout"].result(indices), max_drop=max_drop,
                          removed=len(chosen), alpha=settings.alpha)
    return CompressOutcome(len(chosen), verdict.accepted, true_change(rates, indices, accuracy), max_drop)


__all__ = ["CompressOutcome", "compress_rates", "run_compress"]
