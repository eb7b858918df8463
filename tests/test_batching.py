"""Batch sizes: a token budget per batch, ``auto``, and out-of-memory errors that halve the batches and retry
with the same results (the GPU's error is raised by a pre-hook on the real model when a batch is too big)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from helpers.cli import invoke
from headprune.errors import TaskError
from headprune.evaluation import Evaluator
from headprune.evaluation.batching import BATCH_COST_TOKENS, CPU_SEQUENCES, CPU_TOKENS, BatchPlan, plan_batches
from headprune.heads import parse_heads
from helpers import assert_same_results, build_tiny, prefixed, random_choice_task


def test_batches_keep_the_token_budget_and_every_sequence_once() -> None:
    lengths = [3, 50, 7, 7, 20, 1, 90, 12, 12, 12]
    batches = BatchPlan(sequences=4, tokens=40).batches(lengths)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) <= 4
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 40
    assert batches[0] == [6]  # longest first, alone: over the budget by itself
    # Four batches, the 20 not padded to the 90: 180 + 40 + 36 + 21 padded tokens (fixed batches of 3, also four:
    # 270 + 36 + 21 + 1).
    assert BatchPlan(3).batches(lengths) == [[6, 1], [4, 7], [8, 9, 2], [3, 0, 5]]


def _cost(batches: list[list[int]], lengths: list[int]) -> int:
    return sum(len(b) * max(lengths[i] for i in b) + BATCH_COST_TOKENS for b in batches)


def _cheapest(widths: list[int], sequences: int, tokens: int | None) -> int:
    """The least cost over every split of ``widths`` (sorted longest first) into runs, by brute force."""
    if not widths:
        return 0
    options = []
    for rows in range(1, min(sequences, len(widths)) + 1):
        if rows == 1 or tokens is None or rows * widths[0] <= tokens:
            options.append(rows * widths[0] + BATCH_COST_TOKENS + _cheapest(widths[rows:], sequences, tokens))
    return min(options)


@pytest.mark.parametrize("seed", range(40))
def test_batches_are_the_cheapest_split_of_the_sorted_lengths(seed: int) -> None:
    """Padded tokens plus a fixed cost per batch: as low as any split of the sorted lengths into runs can be,
    which cuts the padding of sorted fixed-size batches on lengths that spread (a real task's: 9% -> 4%)."""
    rng = np.random.default_rng(seed)
    lengths = [int(x) for x in rng.integers(1, 120, size=int(rng.integers(1, 13)))]
    sequences, tokens = int(rng.integers(1, 6)), (None if seed % 2 else int(rng.integers(60, 400)))
    plan = BatchPlan(sequences, tokens)
    batches = plan.batches(lengths)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    assert [i for b in batches for i in b] == order  # runs of the sorted order, longest first
    assert all(len(b) <= sequences for b in batches)
    assert _cost(batches, lengths) == _cheapest([lengths[i] for i in order], sequences, tokens)
    greedy = [order[i:i + sequences] for i in range(0, len(order), sequences)]
    if tokens is None:
        assert _cost(batches, lengths) <= _cost(greedy, lengths)


def test_equal_lengths_fill_whole_batches() -> None:
    assert [len(b) for b in BatchPlan(16).batches([30] * 40)] == [16, 16, 8]


def test_auto_on_a_cpu_and_bad_sizes(tokenizer) -> None:  # noqa: ANN001
    lm = build_tiny("llama", tokenizer)
    assert plan_batches(lm, "auto") == BatchPlan(CPU_SEQUENCES, CPU_TOKENS) == BatchPlan(64, 4096)
    assert plan_batches(lm, 5) == BatchPlan(5)
    for bad in (0, -1, "many", True):
        with pytest.raises(TaskError, match="batch size"):
            plan_batches(lm, bad)


class _SmallGpu:
    """Raises the GPU's out-of-memory error when a forward pass gets more than ``rows`` sequences."""

    def __init__(self, lm, rows: int) -> None:  # noqa: ANN001
        self.rows, self.refused = rows, 0
        self.handle = lm.model.register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):  # noqa: ANN001, ANN204
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.shape[0] > self.rows:
            self.refused += 1
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")


@pytest.mark.parametrize("prefix", [False, True])
def test_out_of_memory_halves_the_batches_and_gives_the_same_results(tokenizer, caplog, prefix) -> None:  # noqa: ANN001
    lm = build_tiny("llama", tokenizer, seed=2)
    task = random_choice_task(24, seed=1)
    task = prefixed(task) if prefix else task
    heads = parse_heads("L1.H0,L1.H2")
    reference = Evaluator(lm, task, batch_size=3)
    expected = reference.run(), reference.run(heads)
    small = _SmallGpu(lm, rows=3)
    evaluator = Evaluator(lm, task, batch_size=16, reuse_layers=True)
    with caplog.at_level(logging.WARNING, logger="headprune"):
        intact = evaluator.run()
        ablated = evaluator.run(heads)
    small.handle.remove()
    assert small.refused >= 1 and evaluator.batch_size <= 3
    assert any("out of memory" in r.getMessage() and "retrying with" in r.getMessage() for r in caplog.records)
    assert_same_results(intact, expected[0], atol=1e-5)
    assert_same_results(ablated, expected[1], atol=1e-5)


def test_out_of_memory_with_one_sequence_is_a_clear_error(tokenizer) -> None:  # noqa: ANN001
    lm = build_tiny("llama", tokenizer, seed=2)
    small = _SmallGpu(lm, rows=0)
    try:
        with pytest.raises(TaskError, match="out of memory .* even with one sequence per batch"):
            Evaluator(lm, random_choice_task(6), batch_size=4).run()
    finally:
        small.handle.remove()


@pytest.mark.parametrize("size", ["0", "lots", "-3"])
def test_a_bad_batch_size_is_exit_2(size) -> None:  # noqa: ANN001
    done = invoke("eval", "smollm2-135m", "--task", "sentiment", "--batch-size", size, catch_exceptions=True)
    assert done.exit_code == 2 and "--batch-size" in done.output and "Traceback" not in done.output
