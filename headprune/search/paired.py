"""Paired comparison of a condition against the intact model on the same examples.

``rescued`` = wrong before, right after; ``damaged`` = right before, wrong after; ``gain`` = rescued - damaged.
``margin_change`` is the mean change of the continuous margin (more statistical power than counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # records that hold a Paired (the export's, through find --shrink's) load no torch
    from headprune.evaluation.results import EvalResult


@dataclass(frozen=True)
class Paired:
    n: int
    rescued: int
    damaged: int
    accuracy_before: float
    accuracy_after: float
    margin_change: float

    _derived = ("gain",)

    @property
    def gain(self) -> int:
        return self.rescued - self.damaged

    @property
    def accuracy_change(self) -> float:
        return self.accuracy_after - self.accuracy_before


def compare(baseline: EvalResult, after: EvalResult, mask: np.ndarray | None = None) -> Paired:
    """Score ``after`` against ``baseline``; both must cover the same examples in the same order. ``mask``
    (bool, one per example) keeps only some of them (a half of discovery: ``headprune.search.folds``)."""
    if baseline.ids is not after.ids and baseline.ids != after.ids:
        raise ValueError("paired comparison needs the same examples in the same order")
    before_ok, after_ok = baseline.correct, after.correct
    change = after.margins - baseline.margins
    if mask is not None:
        before_ok, after_ok, change = before_ok[mask], after_ok[mask], change[mask]
    n = len(before_ok)
    changed = before_ok ^ after_ok
    rescued = int(np.count_nonzero(changed & after_ok))
    right_before = int(np.count_nonzero(before_ok))
    damaged = int(np.count_nonzero(changed)) - rescued
    # count / n is the float the boolean mean gives (an exact count, one correctly rounded division)
    return Paired(n=n, rescued=rescued, damaged=damaged, accuracy_before=right_before / n if n else float("nan"),
                  accuracy_after=(right_before + rescued - damaged) / n if n else float("nan"),
                  margin_change=float(np.mean(change)) if n else 0.0)
