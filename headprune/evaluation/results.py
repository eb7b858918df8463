"""Per-example results of one condition (a head set ablated, or none), and their summaries."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from headprune.tasks import has_accuracy


@dataclass(frozen=True)
class ExampleResult:
    """One example under one condition.

    ``text`` and ``decision`` are set for generating kinds only: the generated answer text (cut where the task's
    answer ends, before any answer extraction) and the decision gap of greedy decoding
    (``headprune.evaluation.decoding``): what, rather than the margin, says whether the answer was a near-tie.
    """

    id: str
    correct: bool | None  # None for kinds without an answer (text)
    margin: float  # higher is better; positive when the answer is right
    text: str | None = None
    decision: float | None = None


@dataclass(frozen=True)
class Summary:
    """A condition's figures on one task: accuracy (or mean NLL for text tasks) and the mean margin."""

    n: int
    mean_margin: float
    accuracy: float | None = None
    correct: int | None = None
    mean_nll: float | None = None


@dataclass(frozen=True)
class EvalResult:
    """Per-example results of one condition on one task."""

    task: str
    kind: str
    results: tuple[ExampleResult, ...]

    @property
    def n(self) -> int:
        return len(self.results)

    @property
    def has_accuracy(self) -> bool:
        return has_accuracy(self.kind)

    @cached_property
    def ids(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.results)

    @cached_property
    def correct(self) -> np.ndarray:
        """``(n,)`` bool, read-only; all False for kinds without an accuracy."""
        values = np.array([bool(r.correct) for r in self.results], dtype=bool)
        values.flags.writeable = False  # computed once and shared: nobody may edit it in place
        return values

    @cached_property
    def margins(self) -> np.ndarray:
        """``(n,)`` float64, read-only."""
        values = np.array([r.margin for r in self.results], dtype=np.float64)
        values.flags.writeable = False
        return values

    @property
    def texts(self) -> tuple[str, ...] | None:
        """The generated texts, per example (``None`` for kinds that do not generate)."""
        if not self.results or self.results[0].text is None:
            return None
        return tuple(r.text or "" for r in self.results)

    @property
    def decisions(self) -> np.ndarray:
        """``(n,)`` what decides whether each answer is a near-tie: the decoding gap where there is one, else
        the margin."""
        return np.array([r.margin if r.decision is None else r.decision for r in self.results], dtype=np.float64)

    @property
    def accuracy(self) -> float | None:
        return float(self.correct.mean()) if self.has_accuracy else None

    @property
    def mean_nll(self) -> float | None:
        return None if self.has_accuracy else float(-self.margins.mean())

    def summary(self) -> Summary:
        mean_margin = float(self.margins.mean())
        if self.has_accuracy:
            return Summary(self.n, mean_margin, accuracy=self.accuracy, correct=int(self.correct.sum()))
        return Summary(self.n, mean_margin, mean_nll=self.mean_nll)
