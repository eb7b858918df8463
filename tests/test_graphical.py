"""The graphical procedure (``headprune.search.graphical``, Bretz et al. 2009): the procedures it generalises give their
own rejections, the rejections do not depend on the order hypotheses are taken in, p-values are asked for only where
level reaches, and the chance of any false rejection stays within the level under dependence."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from headprune.heads import Head
from headprune.search.graphical import Graph, reject
from headprune.search.rules.fallback_graph import plan
from headprune.search.stats import holm


def _run(graph: Graph, p: list[float], level: float = 0.05) -> tuple[list[int], list[float]]:
    return reject(graph, lambda nodes: [p[i] for i in nodes], level, lambda i, value, at: value <= at)


def _chain(n: int) -> Graph:
    rows = tuple(tuple(1.0 if j == i + 1 else 0.0 for j in range(n)) for i in range(n))
    return Graph((1.0,) + (0.0,) * (n - 1), rows)


def test_a_chain_is_a_fixed_sequence() -> None:
    """Each hypothesis at the whole level, in order, up to the first that does not reject."""
    assert _run(_chain(4), [0.01, 0.04, 0.2, 0.001])[0] == [0, 1]
    rejected, last = _run(_chain(3), [0.01, 0.02, 0.03])
    assert rejected == [0, 1, 2] and last == [0.05, 0.05, 0.05]


def test_equal_weights_passed_on_equally_are_holm() -> None:
    n = 4
    graph = Graph((1 / n,) * n, tuple(tuple(0.0 if i == j else 1 / (n - 1) for j in range(n)) for i in range(n)))
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = list(rng.uniform(0, 0.08, n))
        assert sorted(_run(graph, p)[0]) == [i for i, q in enumerate(holm(p)) if q <= 0.05], p


def test_a_fallback_tests_each_at_its_own_weight_and_passes_only_what_rejects() -> None:
    """Wiens's fallback: weights 0.5, 0.3, 0.2 along a chain at 0.05. The first rejects at 0.025 and passes it on: the
    second holds 0.04 and does not reject at p = 0.05, so the third holds only its own 0.01; where the second rejects,
    the third holds all of 0.05."""
    graph = Graph((0.5, 0.3, 0.2), ((0, 1.0, 0), (0, 0, 1.0), (0, 0, 0)))
    rejected, last = _run(graph, [0.02, 0.05, 0.011])
    assert rejected == [0] and last == [0.025, 0.04, 0.01]
    assert _run(graph, [0.02, 0.03, 0.011])[0] == [0, 1, 2]  # then 0.01 + 0.04 = 0.05


def test_the_rejections_do_not_depend_on_the_order_of_the_hypotheses() -> None:
    """Renumbering the hypotheses of a fallback rule's graph (a block of two, three later heads) never changes what
    is rejected."""
    graph = plan(tuple(Head(0, i) for i in range(5)), 2, Head(0, 7)).graph
    n = len(graph.weights)
    rng = np.random.default_rng(1)
    for _ in range(100):
        p = list(rng.choice([0.001, 0.004, 0.01, 0.02, 0.3], n))
        expected = set(_run(graph, p, 0.025)[0])
        order = rng.permutation(n)
        back = {int(new): old for old, new in enumerate(order)}  # new index -> old index
        moved = Graph(tuple(graph.weights[back[i]] for i in range(n)),
                      tuple(tuple(graph.transitions[back[i]][back[j]] for j in range(n)) for i in range(n)))
        assert {back[i] for i in _run(moved, [p[back[i]] for i in range(n)], 0.025)[0]} == expected


def test_p_values_are_asked_for_only_where_level_reaches() -> None:
    asked: list[int] = []

    def p_values(nodes: list[int]) -> list[float]:
        asked.extend(nodes)
        return [0.5] * len(nodes)

    reject(_chain(5), p_values, 0.05, lambda i, p, at: p <= at)
    assert asked == [0]  # the first does not reject: the others never hold any level


@pytest.mark.parametrize("dependence", ["independent", "identical", "opposed"])
def test_the_chance_of_any_false_rejection_stays_within_the_level(dependence: str) -> None:
    """Every hypothesis of a fallback rule's graph true (five heads, a block of one, s' and s): over 40,000 draws of
    uniform p-values, independent, all equal, or pairs mirrored (u and 1 - u), at most the level (0.025) reject
    anything, within three standard errors."""
    graph = plan(tuple(Head(0, i) for i in range(5)), 1, Head(0, 7)).graph
    n, level, draws = len(graph.weights), 0.025, 40_000
    rng = np.random.default_rng(2)
    u = rng.uniform(size=(draws, n))
    if dependence == "identical":
        u = np.repeat(u[:, :1], n, axis=1)
    elif dependence == "opposed":
        u[:, 1::2] = 1 - u[:, 0:2 * (n // 2):2]
    wrong = np.mean([bool(_run(graph, list(row), level)[0]) for row in u])
    assert wrong <= level + 3 * (level * (1 - level) / draws) ** 0.5, wrong


def test_a_graph_whose_weights_add_up_to_more_than_1_is_refused() -> None:
    with pytest.raises(ValueError, match="add up to at most 1"):
        Graph((0.6, 0.6), ((0, 1), (1, 0)))
    with pytest.raises(ValueError, match="each row at most 1"):
        Graph((0.5, 0.5), ((0, 1.5), (1, 0)))
    with pytest.raises(ValueError, match="square"):
        Graph((1.0,), ((0, 0),))


def test_every_step_of_the_fallback_graph_is_reached_from_the_step_before_it_only() -> None:
    """What the shipped set's claims rest on: level reaches a step only from the step before it, so a step rejects
    only after every step before it did, for any p-values (the first step and s' claim nothing of another step: the
    singles and the steps with no head after them feed them)."""
    for block, searched in itertools.product((1, 2, 3), (None, Head(0, 7))):
        steps = plan(tuple(Head(0, i) for i in range(5)), block, searched)
        graph, parents = steps.graph, steps.parents
        n = len(graph.weights)
        for j in (j for j in range(len(parents)) if parents[j] is not None):
            assert {i for i in range(n) if graph.transitions[i][j] > 0} == {parents[j]}, (block, j)
        rng = np.random.default_rng(block)
        for _ in range(50):
            rejected = set(_run(graph, list(rng.choice([0.0005, 0.003, 0.02, 0.5], n)), 0.025)[0])
            assert all(parents[j] in rejected for j in rejected if j < len(parents) and parents[j] is not None)
