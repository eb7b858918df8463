"""Discovery in two halves: the **search** half proposes head sets, the **check** half admits heads into them.

Why. find ranks hundreds of head sets by their discovery gain and takes the best. A head with no effect on the
task still flips answers at random; the best sets are the ones whose heads happened to flip the most answers
the right way on discovery, so a set that holds a real head often holds such a *passenger* too. Testing each
head's place on the same discovery data cannot catch it: the data that chose the head vouches for it. Counted
through find's own search code on counts-only models (``headprune.search.simulation``), the rule applied to
discovery let a passenger into 18-44% of primary sets (one real head among 18 heads flipping 0.3-3% of answers),
against the 5% it states. So the data that proposes a set never decides which of its heads stay:

- the screen and the joint search (and ``--extend``, and a pre-screen) rank sets on the search half;
- a head of a proposed set stays only when it earns its place on the check half, which chose nothing
  (0.2's rule, now ``headprune.search.rules.admission``: backward elimination with the exact one-sided test of
  ``headprune.search.parsimony``, Holm over the set's heads);
- a single head needs no admission (its own test is the held-out verdict, which no use of discovery can
  bias), so single heads are ranked on all of discovery, both halves.

The halves are a random split of the discovery examples by the run's seed (its own stream, so the split into
discovery and held-out stays what it was); every condition is still evaluated on all of discovery, so the halves
cost nothing: each is a mask over the same per-example results. The price is power: a multi-head set is
proposed from half the data and each of its heads must show its effect on the other half alone. Alternatives
considered: selective inference for the walk's ~150 ranked sets has no tractable conditioning event; testing
on held-out would let held-out data choose the set it then judges; repeated splits multiply the joint stage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FOLD_STREAM = 0x5EA2C  # the folds' own random stream under the run's seed


@dataclass(frozen=True)
class Folds:
    """Which discovery examples propose sets (``search``) and which admit heads (``check``)."""

    search: np.ndarray  # (n,) bool
    check: np.ndarray  # (n,) bool; find's halves: the complement of ``search``

    @classmethod
    def halves(cls, n: int, seed: int) -> Folds:
        """A random half of ``n`` examples (the larger half when ``n`` is odd) for the search, by ``seed``."""
        order = np.random.default_rng([seed, FOLD_STREAM]).permutation(n)
        search = np.zeros(n, dtype=bool)
        search[order[: (n + 1) // 2]] = True
        return cls(search, ~search)

    @classmethod
    def same(cls, n: int) -> Folds:
        """Every example both proposes and admits: the rule before 0.2, kept for the simulation that shows why
        it was dropped (``headprune.search.simulation``); find never uses it."""
        return cls(np.ones(n, dtype=bool), np.ones(n, dtype=bool))

    @property
    def sizes(self) -> tuple[int, int]:
        """(search, check) example counts."""
        return int(self.search.sum()), int(self.check.sum())


__all__ = ["FOLD_STREAM", "Folds"]
