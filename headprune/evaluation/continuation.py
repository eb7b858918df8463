"""Where an ablated condition's greedy text is the intact run's so far, decode it from the ablated layer up.

Below the lowest ablated layer, a token's hidden states and keys and values depend only on the tokens up to it and
their positions: wherever an ablated condition's text is the intact run's so far, they are the intact run's. The
intact run (find's first condition) decodes each row its teacher-forced pass did not settle; then one more pass over
each such row's decoded text, on the same keys and values, as one drafted step (:meth:`IntactContinuations.capture`),
keeps per item the inputs of the layer cache's checkpoint layers at those positions and every layer's keys and values
there. An ablated condition whose teacher-forced pass leaves a row where the intact run's left it (the same known
tokens) reads the whole intact text as its first drafted step (``Generation._step``), computed from the checkpoint
below the ablation only: that layer is fed the kept inputs, the layers below it pass through, and their keys and
values are the kept ones (:meth:`IntactContinuations.replayed`); where the pass starts at the first layer, the step is a
plain one over the whole text. Greedy keeps the drafted tokens it chooses too and decodes on after the last it keeps, as
after any drafted step, with the other rows (:func:`rows_of`, :func:`joined`: the decoding state of some rows, and of
two side by side): a plain decoding's text, up to float rounding (the contract of ``headprune.evaluation.contract``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from headprune.core.compat import appended_below, cache_of, passing_cache, right_padded, stacked
from headprune.evaluation.layer_cache import inputs_of, starting_at
from headprune.loading.models import LoadedModel

BUDGET_MB = 1024  # the kept inputs and keys and values of the intact run's decoded texts


@dataclass(frozen=True)
class _Text:
    """One item's decoded text in the intact run, from its last known token."""

    known: tuple[int, ...]  # the item's known greedy tokens where the intact run's decoding of it began
    inputs: dict[int, torch.Tensor]  # per checkpoint layer, its input at the text's positions: (positions, D)
    keys_values: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # per layer: (kv heads, positions, head size) each

    @property
    def length(self) -> int:
        """Positions: the last known token and the tokens the intact run wrote after it."""
        return self.keys_values[0][0].shape[1]

    @property
    def bytes(self) -> int:
        tensors = [*self.inputs.values(), *(t for pair in self.keys_values for t in pair)]
        return sum(t.numel() * t.element_size() for t in tensors)


class IntactContinuations:
    """The intact run's decoded texts of one evaluator's items, and where a condition's decoding starts."""

    def __init__(self, lm: LoadedModel) -> None:
        self.lm = lm
        self.texts: dict[int, _Text] = {}
        self.checkpoints: list[int] = []
        self.start = 0  # the layer this condition's passes start at (0: the first)
        self.capturing = False  # this condition is the intact run that keeps the texts
        self.replayed_rows = 0  # rows whose first step ran from the start layer, over this object's life (a statistic)

    def condition(self, checkpoints: Sequence[int], start: int, intact: bool) -> None:
        """Set for one condition: the layer cache's ``checkpoints``, the one its passes start at, whether it is the
        intact model (the first intact run keeps the texts)."""
        self.checkpoints = list(checkpoints)
        self.start = start
        self.capturing = intact and bool(self.checkpoints) and not self.texts

    def follows(self, index: int, tokens: Sequence[int]) -> bool:
        """Whether item ``index``'s decoding, from its known ``tokens``, begins where the intact run's did, with its
        text kept for this condition's start (at the first layer, the text alone: its step is a plain one)."""
        text = self.texts.get(index)
        return text is not None and text.known == tuple(tokens) and (self.start == 0 or self.start in text.inputs)

    @torch.inference_mode()
    def capture(self, indices: Sequence[int], knowns: Sequence[Sequence[int]], cache: object, ids: torch.Tensor,
                mask: torch.Tensor, positions: torch.Tensor) -> None:
        """One pass of the intact model over the decoded texts of items ``indices`` (``ids``: each row's last known
        token and what the intact run wrote after it, right-padded; ``mask`` over ``cache`` and them, their
        ``positions``; ``cache``, the rows' keys and values before decoding, is consumed); keeps each text within
        :data:`BUDGET_MB`."""
        inputs: dict[int, torch.Tensor] = {}
        with inputs_of(self.lm, self.checkpoints, inputs):
            out = self.lm.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                logits_to_keep=1, **passing_cache(cache))
        width = ids.shape[1]
        layers = cache_of(out).layers
        spent = sum(text.bytes for text in self.texts.values())
        for row, (index, known) in enumerate(zip(indices, knowns)):
            length = int(mask[row, -width:].sum())  # the last known token and the tokens after it
            text = _Text(tuple(known), {c: hidden[row, :length].clone() for c, hidden in inputs.items()},
                         tuple((layer.keys[row, :, -width:][:, :length].clone(),
                                layer.values[row, :, -width:][:, :length].clone()) for layer in layers))
            if spent + text.bytes > BUDGET_MB * 2**20:
                return
            self.texts[index] = text
            spent += text.bytes

    def groups(self, rows: list[int], indices: Sequence[int]) -> list[list[int]]:
        """``rows`` (of items ``indices``, each with a kept text) in groups whose texts are at least 2/3 as long as
        the group's longest (a step pads each row to it), longest first."""
        lengths = {k: self.texts[indices[k]].length for k in rows}
        groups: list[list[int]] = []
        for k in sorted(rows, key=lambda k: -lengths[k]):
            if groups and 3 * lengths[k] >= 2 * lengths[groups[-1][0]]:
                groups[-1].append(k)
            else:
                groups.append([k])
        return groups

    @contextmanager
    def replayed(self, indices: Sequence[int], width: int) -> Iterator[None]:
        """A drafted step over the kept texts of items ``indices`` (right-padded to ``width`` positions), run from
        :attr:`start` on; :meth:`complete` its keys and values after it. At the first layer, a plain step."""
        self.replayed_rows += len(indices)
        if self.start == 0:
            yield
            return
        hidden = right_padded([self.texts[i].inputs[self.start][None] for i in indices], width, 1)
        with starting_at(self.lm, self.start, hidden, "a step over the intact run's text"):
            yield

    def complete(self, cache: object, indices: Sequence[int], width: int) -> None:
        """Give ``cache`` (after a :meth:`replayed` step) the kept keys and values of the layers below the start."""
        texts = [self.texts[i] for i in indices]
        appended_below(cache, [(right_padded([t.keys_values[layer][0][None] for t in texts], width),
                                right_padded([t.keys_values[layer][1][None] for t in texts], width))
                               for layer in range(self.start)], self.start)


def rows_of(state: tuple, rows: list[int], width: int) -> tuple | None:
    """The decoding state of some ``rows`` of ``state`` (their keys and values a copy, ``width`` positions), or
    ``None`` for no rows."""
    if not rows:
        return None
    batch, texts, ids, mask, positions, cache = state
    select = torch.tensor(rows, device=ids.device)
    return ([batch[k] for k in rows], [texts[k] for k in rows], ids[select], mask[select], positions[select],
            stacked([cache], width, select))


def joined(first: tuple | None, second: tuple | None) -> tuple | None:
    """One decoding state of the rows of two (either may be ``None``): keys and values side by side, each mask
    widened before its latest column to the wider cache."""
    if first is None or second is None:
        return first or second
    width = max(state[3].shape[1] - 1 for state in (first, second))

    def widened(mask: torch.Tensor) -> torch.Tensor:
        gap = mask.new_zeros((len(mask), width + 1 - mask.shape[1]))
        return torch.cat([mask[:, :-1], gap, mask[:, -1:]], dim=1)

    return (first[0] + second[0], first[1] + second[1], torch.cat([first[2], second[2]]),
            torch.cat([widened(first[3]), widened(second[3])]), torch.cat([first[4], second[4]]),
            stacked([first[5], second[5]], width))
