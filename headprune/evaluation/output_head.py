"""The output head applied once to the read rows of many batches, so that its weights are read once, not per batch.

A batch reads the vocabulary's log-probs at a few positions per row. Applying the output head (vocabulary x
hidden: 113 MB in float32 for SmolLM2-135M's 49,152 x 576) to those few rows is a matrix product bound by reading
the weights, not by its arithmetic: about 17 ms per batch on 2 CPU threads, as much as one layer's work on the
whole batch. So a batch's pass runs with the head swapped for a recorder that keeps the rows it is given (and
returns a stand-in the evaluator does not read), and :meth:`OutputHead.flush` applies the real head to the rows
of every waiting batch in one more pass of the model, over a single token, whose head returns those rows' logits:
whatever the model does to its head's output (a soft cap, a scale) is done to them as in a normal pass, so the
logits are a normal pass's up to float rounding. A model whose pass does not call its head module (or that is not
a torch module: an ONNX session, llama.cpp) keeps its own logits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from headprune.core.compat import cache_of

MAX_WAITING_BYTES = 256 * 2**20  # the float32 logits of the waiting rows; a flush when more would wait


class _Recorder(nn.Module):
    """Stands in for the head during a batch's pass: keeps its input rows, returns zero logits of the head's shape."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head
        self.rows: torch.Tensor | None = None

    @property
    def weight(self) -> torch.Tensor:  # models that read the head's weight (its dtype) still find it
        return self.head.weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        self.rows = hidden
        return hidden.new_zeros((*hidden.shape[:-1], self.head.out_features))


class _Replay(_Recorder):
    """Stands in for the head during the flush's pass: returns the head's logits of the recorded rows."""

    def __init__(self, head: nn.Module, rows: torch.Tensor) -> None:
        super().__init__(head)
        self.rows = rows

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(self.rows)


class Waiting:
    """A batch's read-out: ready at once (:meth:`ready`), or after the flush that applies the head to its rows."""

    def __init__(self, finish: Callable[[torch.Tensor], list[torch.Tensor]], rows: torch.Tensor) -> None:
        self.finish, self.rows = finish, rows
        self.outputs: list[torch.Tensor] | None = None
        self.keys_values: object | None = None  # the pass's own key/value cache, where it was asked to keep it

    @classmethod
    def ready(cls, outputs: list[torch.Tensor]) -> Waiting:
        waiting = cls(lambda logits: outputs, torch.empty(0))
        waiting.outputs = outputs
        return waiting

    def result(self) -> list[torch.Tensor]:
        if self.outputs is None:
            raise RuntimeError("the output head was not flushed")  # an internal misuse, not a user's error
        return self.outputs


class OutputHead:
    """Defers a causal LM's output head over batches (see the module docstring)."""

    def __init__(self, model: object, pad_id: int, device: torch.device) -> None:
        self.model, self.pad_id, self.device = model, pad_id, device
        getter = getattr(model, "get_output_embeddings", None) if isinstance(model, nn.Module) else None
        head = getter() if callable(getter) else None
        self.head = head if isinstance(head, nn.Linear) and hasattr(model, "set_output_embeddings") else None
        self.waiting: list[Waiting] = []
        self.rows = 0  # the waiting rows

    def reset(self) -> None:
        """Forget any waiting batch (a pass cut short)."""
        self.waiting, self.rows = [], 0

    @contextmanager
    def _swapped(self, stand_in: nn.Module) -> Iterator[None]:
        self.model.set_output_embeddings(stand_in)  # type: ignore[union-attr]
        try:
            yield
        finally:
            self.model.set_output_embeddings(self.head)  # type: ignore[union-attr]

    def run(self, call: dict, finish: Callable[[torch.Tensor], list[torch.Tensor]], *, defer: bool = True,
            keep_cache: bool = False) -> Waiting:
        """The model's pass with keywords ``call``; ``finish`` turns its logits into the batch's read-out, at once
        unless ``defer`` (then after :meth:`flush`). ``keep_cache``: an at-once read-out keeps the pass's own
        key/value cache (``Waiting.keys_values``)."""
        if not defer or self.head is None:
            out = self.model(**call)  # type: ignore[operator]
            waiting = Waiting.ready(finish(out.logits))
            waiting.keys_values = cache_of(out) if keep_cache else None
            return waiting
        recorder = _Recorder(self.head)
        with self._swapped(recorder):
            out = self.model(**call)  # type: ignore[operator]
        if recorder.rows is None:  # the pass computed its logits without the head module
            return Waiting.ready(finish(out.logits))
        waiting = Waiting(finish, recorder.rows)
        self.waiting.append(waiting)
        self.rows += recorder.rows.shape[:-1].numel()
        return waiting

    @property
    def full(self) -> bool:
        """Whether the waiting rows' logits would take more than :data:`MAX_WAITING_BYTES`."""
        return self.head is not None and self.rows * self.head.out_features * 4 >= MAX_WAITING_BYTES

    def flush(self) -> None:
        """Apply the head to every waiting batch's rows in one pass; their read-outs are then ready."""
        if not self.waiting:
            return
        rows = torch.cat([w.rows.reshape(-1, w.rows.shape[-1]) for w in self.waiting])[None]  # (1, R, H)
        ids = torch.tensor([[self.pad_id]], device=self.device)
        with self._swapped(_Replay(self.head, rows)):
            logits = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False,  # type: ignore[operator]
                                logits_to_keep=1).logits[0]  # (R, V)
        start = 0
        for waiting in self.waiting:
            shape = waiting.rows.shape[:-1]
            waiting.outputs = waiting.finish(logits[start:start + shape.numel()].reshape(*shape, -1))
            waiting.rows, start = None, start + shape.numel()
        self.waiting, self.rows = [], 0
