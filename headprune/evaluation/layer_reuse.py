"""When an evaluator captures and replays the intact model's layer inputs (``headprune.evaluation.layer_cache``).

The first intact run captures the checkpoint layers' inputs batch by batch; once every batch is captured, an
ablated run starts each batch at the checkpoint below its lowest ablated layer. Halving the batches after an
out-of-memory error drops what was captured (it was per batch), so the next ablated run captures it again first.

The shared prompt prefix (``evaluation.prefix``) is replayed the same way: the intact run keeps its keys and values
and captures its layer inputs; an ablated run computes its keys and values from the checkpoint layer on and takes
the layers below it from the intact run's (they are the same), where the cache allows (``compat.full_length``).
A generating task's teacher-forced pass is completed the same way (:meth:`LayerReuse.forced_keys_values`): the
intact run keeps each batch's keys and values after the prefix, within :data:`KEYS_VALUES_BUDGET_MB`, and an
ablated run's pass, which began at the checkpoint, takes the layers below it from them, so that greedy decoding
can go on from that pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext

import torch

from headprune.core.compat import appended_below, full_length, positions_after, with_layers_below
from headprune.evaluation.layer_cache import LayerInputCache
from headprune.evaluation.prefix import SharedPrefix
from headprune.heads import Head
from headprune.loading.models import LoadedModel

PREFIX = -1  # the layer cache's batch index for the shared prefix's pass
KEYS_VALUES_BUDGET_MB = 1024  # the intact teacher-forced keys and values kept for generating tasks


class LayerReuse:
    """The layer cache of one evaluator's batches (nothing when ``enabled`` is false)."""

    def __init__(self, lm: LoadedModel, enabled: bool) -> None:
        self.lm = lm
        self.enabled = enabled
        self.cache: LayerInputCache | None = None
        self.intact_prefix: object | None = None  # the intact model's keys/values of the shared prefix
        self.intact_forced: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}  # per batch, after the prefix
        self.batch_count = 0
        self.recapture = False  # set when halving the batches dropped a captured layer cache

    def reset(self, batch_widths: Sequence[tuple[int, int]]) -> None:
        """A fresh cache for batches of ``(rows, padded tokens per row)``; remembers to recapture when the old
        one held anything."""
        self.recapture = self.recapture or (self.cache is not None and not self.cache.empty)
        self.batch_count = len(batch_widths)
        self.cache = (LayerInputCache.for_budget(self.lm, sum(rows * width for rows, width in batch_widths))
                      if self.enabled else None)
        self.intact_prefix = None
        self.intact_forced = {}

    @property
    def active(self) -> bool:
        return self.cache is not None and bool(self.cache.checkpoints)

    @property
    def complete(self) -> bool:
        """Every batch's layer inputs are captured."""
        return self.active and self.cache.complete(self.batch_count)  # type: ignore[union-attr]

    @property
    def checkpoints(self) -> list[int]:
        """The layers whose inputs are captured (none when the cache is off)."""
        return self.cache.checkpoints if self.active else []  # type: ignore[union-attr]

    def start(self, heads: tuple[Head, ...]) -> int:
        """The layer an ablated pass of ``heads`` begins at: the checkpoint below the lowest (0: the first)."""
        return self.cache.start_for(min(h.layer for h in heads)) if heads and self.complete else 0  # type: ignore

    def context(self, number: int, heads: tuple[Head, ...]) -> AbstractContextManager:
        """Batch ``number``'s pass: capture layer inputs on the first intact run; replay them for ablated runs
        once captured."""
        cache = self.cache
        if cache is None or not self.active:
            return nullcontext()
        if not heads:
            return cache.capture(number) if not self.complete else nullcontext()
        if self.complete:
            return cache.replay(number, cache.start_for(min(h.layer for h in heads)))
        return nullcontext()

    def prefix_cache(self, prefix: SharedPrefix, heads: tuple[Head, ...]) -> object | None:
        """Keys and values of the shared prefix under the current ablation of ``heads`` (see the module docstring);
        ``None`` without a prefix."""
        if not prefix:
            return None
        model, device, cache = self.lm.model, self.lm.device, self.cache
        if cache is None or not self.active:
            return prefix.cache(model, device)
        if not heads:
            with cache.capture(PREFIX):
                keys_values = prefix.cache(model, device)
            self.intact_prefix = keys_values if full_length(keys_values) == len(prefix) else None
            return keys_values
        start = cache.start_for(min(h.layer for h in heads))
        if start == 0 or self.intact_prefix is None or not cache.holds(PREFIX):
            return prefix.cache(model, device)
        with cache.replay(PREFIX, start):
            keys_values = prefix.cache(model, device)
        return with_layers_below(keys_values, self.intact_prefix, start)

    def forced_keys_values(self, number: int, heads: tuple[Head, ...], keys_values: object, prefix: int
                           ) -> object | None:
        """Batch ``number``'s teacher-forced keys and values in every layer (``keys_values``, its pass's own, on a
        shared prefix of ``prefix`` positions, completed below the layer the pass began at), or ``None`` where they
        cannot be (the intact run's were not kept, or the cache is not plain full layers)."""
        began = self.start(heads)
        if began > 0:
            if number not in self.intact_forced:
                return None
            appended_below(keys_values, self.intact_forced[number], began)
        if full_length(keys_values) is None:
            return None
        if not heads and self.active:
            self._keep(number, positions_after(keys_values, prefix))
        return keys_values

    def _keep(self, number: int, forced: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Keep batch ``number``'s intact keys and values after the prefix, within the budget."""
        size = sum(t.numel() * t.element_size() for pair in forced for t in pair)
        kept = sum(t.numel() * t.element_size() for number_, pairs in self.intact_forced.items() if number_ != number
                   for pair in pairs for t in pair)
        if kept + size <= KEYS_VALUES_BUDGET_MB * 2**20:
            self.intact_forced[number] = forced
