"""How many sequences go into one forward pass: ``--batch-size N|auto``, a token budget, and halving after an
out-of-memory error.

``auto`` on a GPU sizes batches from the memory free on it: a token budget (padded tokens per batch) from an
estimate of one layer's activations per token, so long examples get smaller batches, and at most
:data:`MAX_AUTO_SEQUENCES` sequences. On a CPU ``auto`` is at most :data:`CPU_SEQUENCES` sequences and
:data:`CPU_TOKENS` padded tokens: past a few hundred token rows a matrix product gains little from more, but a
greedy decoding step (one token per row, every weight read) gains from every row it adds. Whatever the plan, an out-of-memory error halves it and the condition is
run again (:meth:`BatchPlan.halved`).

Within those limits, the sequences (sorted longest first) are cut into batches where another batch costs less
than the padding it saves: every batch has a fixed cost (its forward call, masks and embeddings, the output
head's weights read once more, the shared prefix copied in) of about :data:`BATCH_COST_TOKENS` tokens of work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from headprune.errors import TaskError
from headprune.loading.models import LoadedModel

CPU_SEQUENCES = 64
CPU_TOKENS = 4096
MAX_AUTO_SEQUENCES = 256
FREE_MEMORY_SHARE = 0.5  # of what the GPU has free after loading; the rest is the layer cache's and slack
# A batch's fixed cost in padded tokens of work. Measured on SmolLM2-135M on 2 CPU threads: one more batch costs
# about 15 ms (most of it the output head's 113 MB read again), the work of ~15 tokens through all 30 layers or
# ~450 through one; 48 is about right averaged over the layers a screen starts from (the layer cache).
BATCH_COST_TOKENS = 48


@dataclass(frozen=True)
class BatchPlan:
    """At most ``sequences`` sequences and (when set) ``tokens`` padded tokens per batch."""

    sequences: int
    tokens: int | None = None

    def batches(self, lengths: Sequence[int]) -> list[list[int]]:
        """Indices of ``lengths`` in batches, longest first (the peak memory shows in the first batch), each a run
        of the sorted lengths: the runs that minimise the padded tokens plus :data:`BATCH_COST_TOKENS` per batch,
        within ``sequences`` (and ``tokens``: a sequence longer than the budget gets a batch of its own).

        Dynamic programming over the sorted lengths: ``best[i]``, the least cost of the sequences from the ``i``-th
        on, is the least over the first batch's end ``j`` of ``(j - i) * lengths[i] + BATCH_COST_TOKENS + best[j]``
        (a batch is as wide as its first, longest, sequence); among equal costs the fuller batch comes first.
        """
        order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
        count = len(order)
        width = np.array([lengths[i] for i in order], dtype=np.int64)
        best = np.zeros(count + 1, dtype=np.int64)
        end = np.zeros(count + 1, dtype=np.int64)
        for first in range(count - 1, -1, -1):
            ends = np.arange(first + 1, min(count, first + self.sequences) + 1)
            rows = ends - first
            costs = rows * width[first] + BATCH_COST_TOKENS + best[ends]
            if self.tokens is not None:  # over the budget: only alone
                costs[(rows * width[first] > self.tokens) & (rows > 1)] = np.iinfo(np.int64).max
            pick = len(costs) - 1 - int(np.argmin(costs[::-1]))  # the last minimum: the fullest batch
            best[first], end[first] = costs[pick], ends[pick]
        batches: list[list[int]] = []
        first = 0
        while first < count:
            batches.append(order[first:int(end[first])])
            first = int(end[first])
        return batches

    def halved(self) -> BatchPlan | None:
        """Half the batch after an out-of-memory error; ``None`` when it is one sequence already."""
        if self.sequences <= 1:
            return None
        return BatchPlan(self.sequences // 2, None if self.tokens is None else max(1, self.tokens // 2))

    def __str__(self) -> str:
        return f"{self.sequences} sequences" + (f" / {self.tokens} tokens" if self.tokens is not None else "")


@dataclass(frozen=True)
class Work:
    """What one pass over a task's sequences computes, for estimates of its cost (benchmarks' FLOP limits).

    Attributes:
        lengths: each sequence's tokens, the shared prefix included.
        read: each sequence's output rows read (vocabulary rows of a log-prob readout; 0 otherwise).
        prefix: tokens of the prefix every sequence shares, computed once per condition.
        batches: per batch, its rows and the padded tokens per row a forward pass computes after the prefix.
    """

    lengths: tuple[int, ...]
    read: tuple[int, ...]
    prefix: int
    batches: tuple[tuple[int, int], ...]

    @property
    def tokens(self) -> int:
        """Real tokens computed: the prefix once, each sequence's tokens after it."""
        return self.prefix + sum(length - self.prefix for length in self.lengths)

    @property
    def padded_tokens(self) -> int:
        """Token rows computed, padding included."""
        return self.prefix + sum(rows * width for rows, width in self.batches)

    def attention_pairs(self, causal: bool) -> int:
        """Query-key pairs attended: ``n (n + 1) / 2`` among ``n`` causal tokens (each sequence's after the prefix
        also attend to the prefix's), ``n^2`` in an encoder's sequence of ``n``."""
        if not causal:
            return sum(length * length for length in self.lengths)
        after = [length - self.prefix for length in self.lengths]
        return (self.prefix * (self.prefix + 1) // 2
                + sum(n * self.prefix + n * (n + 1) // 2 for n in after))


def plan_batches(lm: LoadedModel, batch_size: int | str | BatchPlan) -> BatchPlan:
    """The plan for ``--batch-size`` (a number, or ``auto``: see the module docstring), or a plan already made
    (another evaluator's, so that a second pass over the same examples batches them the same way).

    Raises:
        TaskError: a batch size that is neither ``auto`` nor a positive number.
    """
    if isinstance(batch_size, BatchPlan):
        return batch_size
    if batch_size != "auto":
        try:
            sequences = int(batch_size)
        except (TypeError, ValueError):
            sequences = 0
        if sequences < 1 or isinstance(batch_size, bool):
            raise TaskError(f"batch size must be a positive number or auto, got {batch_size!r}",
                            settings=("batch_size",))
        return BatchPlan(sequences)
    device = lm.device
    if device.type != "cuda":
        return BatchPlan(CPU_SEQUENCES, CPU_TOKENS)
    free, _ = torch.cuda.mem_get_info(device)
    return BatchPlan(MAX_AUTO_SEQUENCES, max(1, int(FREE_MEMORY_SHARE * free / bytes_per_token(lm))))


def bytes_per_token(lm: LoadedModel) -> int:
    """Activation memory one token needs in one layer (residual, norms, q/k/v/o, the MLP's three widths) plus
    its keys and values in every layer (generation keeps them): a deliberate overestimate."""
    config = lm.model.config
    hidden = int(getattr(config, "hidden_size", 0) or getattr(config, "n_embd", 768))
    inner = int(getattr(config, "intermediate_size", 0) or getattr(config, "n_inner", None) or 4 * hidden)
    cache = lm.grid.cache_width()
    size = torch.finfo(lm.dtype).bits // 8 if lm.dtype.is_floating_point else 4
    return size * (8 * hidden + 3 * inner + cache)


def is_out_of_memory(error: BaseException) -> bool:
    return isinstance(error, torch.OutOfMemoryError)


__all__ = ["BATCH_COST_TOKENS", "BatchPlan", "CPU_SEQUENCES", "CPU_TOKENS", "MAX_AUTO_SEQUENCES", "Work", "bytes_per_token",
           "is_out_of_memory", "plan_batches"]
