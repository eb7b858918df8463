"""The graphical procedure of Bretz, Maurer, Brannath and Posch (2009, Stat Med 28:586): hypotheses with weights that
add up to at most 1 and a transition matrix, tested so that the chance of rejecting any true hypothesis is at most
the level, for any dependence between the tests.

Each hypothesis i holds a share ``w_i`` of the level and is tested at ``level * w_i``. When one rejects, its share
moves on along its row of the transition matrix (``g_ij``, each row adding up to at most 1), and the matrix is
updated so that later moves go round it (the paper's Algorithm 1). A hypothesis that does not reject keeps its share:
nothing moves from it. The procedure is a shortcut of a closed test built on weighted Bonferroni tests, so its
rejections are a closed test's, and the set of hypotheses it rejects does not depend on the order in which the
rejectable ones are taken. Fixed-sequence tests (a chain, each row one 1) and Wiens's fallback are special cases.

:func:`reject` asks for p-values only where a hypothesis holds a share (``p_values`` is called with those it lacks,
in batches), so hypotheses no share ever reaches are never computed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Graph:
    """Initial shares (``weights``, adding up to at most 1) and the transition matrix (``transitions[i][j]``: the part
    of i's share that moves to j when i rejects; each row adds up to at most 1, the diagonal is 0)."""

    weights: tuple[float, ...]
    transitions: tuple[tuple[float, ...], ...]

    def __post_init__(self) -> None:
        n = len(self.weights)
        if len(self.transitions) != n or any(len(row) != n for row in self.transitions):
            raise ValueError("a graph's transition matrix is square, one row per hypothesis")
        if any(w < 0 for w in self.weights) or sum(self.weights) > 1 + 1e-9:
            raise ValueError("a graph's weights are at least 0 and add up to at most 1")
        for i, row in enumerate(self.transitions):
            if row[i] != 0 or any(g < 0 for g in row) or sum(row) > 1 + 1e-9:
                raise ValueError("a graph's transitions are at least 0, 0 on the diagonal, each row at most 1")


def reject(graph: Graph, p_values: Callable[[list[int]], Sequence[float]], level: float,
           rejects: Callable[[int, float, float], bool]) -> tuple[list[int], list[float]]:
    """The hypotheses the graphical procedure rejects at ``level``, in the order rejected, and each hypothesis's last
    level (the one it was rejected at, or the one it held when the procedure stopped; 0: no share reached it).

    Args:
        graph: the weights and transitions.
        p_values: the p-values of the hypotheses asked for (indices), in that order.
        level: the level of the whole procedure.
        rejects: whether hypothesis i with p-value p rejects at level a (``rejects(i, p, a)``): the test's own rule
            (a direction, a strict or non-strict comparison).
    """
    n = len(graph.weights)
    weights = list(graph.weights)
    moves = [list(row) for row in graph.transitions]
    active, known, last, rejected = set(range(n)), {}, [0.0] * n, []
    while True:
        wanted = [i for i in sorted(active) if weights[i] > 0 and i not in known]
        if wanted:
            known.update(zip(wanted, p_values(wanted)))
        for i in active:
            last[i] = round(level * weights[i], 12)
        ready = [i for i in sorted(active) if weights[i] > 0 and rejects(i, known[i], last[i])]
        if not ready:
            return rejected, last
        # The set rejected is the same whichever is taken first; the smallest p per unit of level reads best.
        i = min(ready, key=lambda j: known[j] / weights[j])
        rejected.append(i)
        active.discard(i)
        weights, moves = _after(i, weights, moves, active)


def _after(i: int, weights: list[float], moves: list[list[float]], active: set[int]
           ) -> tuple[list[float], list[list[float]]]:
    """Algorithm 1's update once ``i`` rejects: its share moves along its row, and each row goes round it."""
    new_weights = list(weights)
    new_moves = [list(row) for row in moves]
    for k in active:
        new_weights[k] = weights[k] + weights[i] * moves[i][k]
    new_weights[i] = 0.0
    for k in active:
        through = moves[k][i] * moves[i][k]
        for m in active:
            if m == k:
                new_moves[k][m] = 0.0
            else:
                new_moves[k][m] = (moves[k][m] + moves[k][i] * moves[i][m]) / (1 - through) if through < 1 else 0.0
        new_moves[k][i] = 0.0
    new_moves[i] = [0.0] * len(weights)
    return new_weights, new_moves


__all__ = ["Graph", "reject"]
