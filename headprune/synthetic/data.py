"""Two tasks whose useful features conflict, on sequences of two symbols.

Every input has the same shape: ``first f1 .. fM last ?`` where ``first`` and ``last`` are ``a`` or ``b``, the M
middle words are fillers (``c`` to ``j``, uniform, carrying no information; they make the input space large
enough for disjoint discovery and held-out sets) and the answer is ``a`` or ``b``, predicted after ``?``.

- **Task A, copy-first**: the answer is the first symbol. The last symbol is random.
- **Task B, not-last**: the answer is the symbol that the last one is not. The first symbol agrees with the
  answer with probability ``1 - distractor_rate``: a shortcut that is right most of the time and wrong on
  purpose the rest.

Nothing in an input says which task it comes from, so one set of weights must serve both. Where
first != last both rules give the same answer; where first == last they contradict. The first-symbol feature
therefore *helps A and hurts B*, and the last-symbol feature helps B and is noise for A. The joint
objective's optimum answers the first symbol on contradicting inputs (they come more often from A), so at
the optimum B is wrong exactly on its contradicting examples, and a model that no longer reads the first
symbol gets them right (see :func:`joint_optimum`).

Reading the two features needs *opposite* value maps from the same tokens (``a`` -> ``a`` for the first symbol,
``a`` -> ``b`` for the last); one head can carry both only through LayerNorm's position-dependent scaling, so
the features mostly live in different heads, which is what makes the heads that carry the conflicting one
identifiable.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headprune.core.io import atomic_write_text

SYMBOLS = ("a", "b")
FILLERS = tuple("cdefghij")
QUERY = "?"
TASKS = {"A": "copy-first", "B": "not-last"}


@dataclass(frozen=True)
class Row:
    """One example: the symbols of the input (query excluded) and the index of the answer symbol."""

    symbols: tuple[str, ...]
    answer: int

    @property
    def prompt(self) -> str:
        return " ".join((*self.symbols, QUERY))

    @property
    def first(self) -> int:
        return SYMBOLS.index(self.symbols[0])

    @property
    def last(self) -> int:
        return SYMBOLS.index(self.symbols[-1])


def combinations(task: str, distractor_rate: float = 0.2) -> list[tuple[int, int, int, float]]:
    """Every (first, last, answer) of ``task`` with its probability; fillers are independent of them."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    out = []
    for first in range(2):
        for last in range(2):
            if task == "A":  # answer = first; last uniform and independent
                out.append((first, last, first, 0.25))
            else:  # answer = not last; first = answer with probability 1 - distractor_rate
                answer = 1 - last
                out.append((first, last, answer, 0.5 * (1 - distractor_rate if first == answer else distractor_rate)))
    return out


def fillers(n: int, rng: np.random.Generator, middle: int = 3) -> list[tuple[str, ...]]:
    """``n`` random filler sequences of length ``middle``."""
    return [tuple(FILLERS[int(v)] for v in rng.integers(len(FILLERS), size=middle)) for _ in range(n)]


def sample(task: str, n: int, rng: np.random.Generator, *, middle: int = 3,
           distractor_rate: float = 0.2) -> list[Row]:
    """Draw ``n`` distinct examples of task ``"A"`` (copy-first) or ``"B"`` (not-last), in random order.

    Stratified: each (first, last, answer) combination gets its probability's share of ``n`` (rounded), with
    filler sequences drawn without replacement, so inputs are distinct (discovery and held-out splits can be
    disjoint) and the mix of combinations is exactly the task's.
    """
    table = combinations(task, distractor_rate)
    counts = np.floor(np.array([w for *_, w in table]) * n).astype(int)
    counts[np.argsort(-(np.array([w for *_, w in table]) * n - counts))[: n - counts.sum()]] += 1
    space = len(FILLERS) ** middle
    if counts.max() > space:
        raise ValueError(f"{n} distinct examples need more than {space} filler sequences per combination")
    rows = []
    for (first, last, answer, _), count in zip(table, counts, strict=True):
        for index in rng.choice(space, size=int(count), replace=False):
            digits = [FILLERS[(int(index) // len(FILLERS) ** i) % len(FILLERS)] for i in range(middle)]
            rows.append(Row((SYMBOLS[first], *digits, SYMBOLS[last]), answer))
    return [rows[i] for i in rng.permutation(len(rows))]


def write_task(path: Path, rows: list[Row], name: str) -> None:
    """Write rows as a headprune choice task (JSONL: prompt, choices " a"/" b", answer)."""
    lines = [json.dumps({"id": f"{name}-{i}", "prompt": row.prompt, "choices": [f" {s}" for s in SYMBOLS],
                         "answer": row.answer}) for i, row in enumerate(rows)]
    atomic_write_text(path, "\n".join(lines) + "\n")


@dataclass(frozen=True)
class JointOptimum:
    """The best any model can do on the joint objective (equal parts A and B), per task.

    Attributes:
        p_first: probability of the first symbol the optimum gives on contradicting inputs (first == last).
        loss_a, loss_b: its mean cross-entropy (nats) on each task; accuracy_a, accuracy_b its accuracies.
    """

    p_first: float
    loss_a: float
    loss_b: float
    accuracy_a: float
    accuracy_b: float


def joint_optimum(distractor_rate: float = 0.2) -> JointOptimum:
    """The Bayes-optimal predictor of the task mixture, computed from the generator.

    Contradicting inputs (first == last) make up half of A and ``distractor_rate`` of B, and carry no other
    information (fillers are noise), so their answer is the first symbol with probability
    ``0.5 / (0.5 + distractor_rate)``; every other input has one right answer under both rules.
    """
    p_first = 0.5 / (0.5 + distractor_rate)
    return JointOptimum(p_first=p_first, loss_a=0.5 * -math.log(p_first),
                        loss_b=distractor_rate * -math.log(1 - p_first), accuracy_a=1.0,
                        accuracy_b=1.0 - distractor_rate)
