"""Paired comparison of a condition against the intact model on the same examples.

``rescued`` = wrong before, right after; ``damaged`` = right before, wrong after; ``gain`` = rescued - damaged.
``margin_change`` is the mean change of the continuous margin (more statistical power than counts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def compare(baseline: EvalResult, after: EvalResult) -> Paired:
    """Score ``after`` against ``baseline``; both must cover the same examples in the same order."""
    if [r.id for r in baseline.results] != [r.id for r in after.results]:
        raise ValueError("paired comparison needs the same examples in the same order")
    before_ok, after_ok = baseline.correct, after.correct
    return Paired(
        n=baseline.n,
        rescued=int((~before_ok & after_ok).sum()),
        damaged=int((before_ok & ~after_ok).sum()),
        accuracy_before=float(before_ok.mean()),
        accuracy_after=float(after_ok.mean()),
        margin_change=float(np.mean(after.margins - baseline.margins)),
    )
