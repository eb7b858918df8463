"""A prompt prefix shared by every sequence of a task (a few-shot prompt), computed once per condition.

Causal language models only: the keys and values of the common prefix are computed in one row under the current
ablation, then copied into every batch, whose rows carry only their own tokens after it. The results are those
of the full sequences up to float rounding (the contract of ``headprune.evaluation.contract``).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence

import torch

from headprune.core.compat import cache_of
from headprune.scoring import Item

MIN_SHARED_PREFIX = 16  # tokens; shorter shared prefixes are not worth a separate pass


class SharedPrefix:
    """The token prefix common to every item (empty when there is none worth sharing)."""

    def __init__(self, tokens: tuple[int, ...] = ()) -> None:
        self.tokens = tokens

    @classmethod
    def of(cls, items: Sequence[Item], readout: str) -> SharedPrefix:
        """The longest prefix common to every input, if long enough to be worth sharing (log-prob readouts)."""
        if readout != "logprobs" or len(items) < 2:
            return cls()
        common = os.path.commonprefix([item.tokens for item in items])  # type: ignore[type-var]
        # Every read position must lie after the prefix.
        length = min(len(common), min(len(item.tokens) - item.read for item in items))
        return cls(tuple(common[:length]) if length >= MIN_SHARED_PREFIX else ())

    def __len__(self) -> int:
        return len(self.tokens)

    def __bool__(self) -> bool:
        return bool(self.tokens)

    def cache(self, model: torch.nn.Module, device: torch.device) -> object | None:
        """Keys and values of the prefix under the current ablation (one row); ``None`` without a prefix."""
        if not self.tokens:
            return None
        ids = torch.tensor([self.tokens], device=device)
        return cache_of(model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True, logits_to_keep=1))

    @staticmethod
    def rows(cache: object, count: int, *, consume: bool = False) -> object:
        """``cache`` repeated for ``count`` rows: a copy, unless ``consume`` says it was made for this use alone."""
        rows = cache if consume else copy.deepcopy(cache)
        rows.batch_repeat_interleave(count)  # type: ignore[attr-defined]
        return rows

    def suffixes(self, sequences: Sequence[Sequence[int]], pad_id: int, *, left: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each sequence's tokens after the prefix, padded to one width (on the right, or on the ``left`` for
        decoding), as ``(ids (B, W), mask over prefix and suffix (B, P + W), position ids (B, W))``."""
        start = len(self.tokens)
        suffixes = [list(tokens[start:]) for tokens in sequences]
        width = max(len(t) for t in suffixes)
        ids = torch.full((len(suffixes), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(suffixes), start + width), dtype=torch.long)
        mask[:, :start] = 1
        for row, tokens in enumerate(suffixes):
            span = slice(width - len(tokens), width) if left else slice(0, len(tokens))
            ids[row, span] = torch.tensor(tokens, dtype=torch.long)
            mask[row, start + span.start: start + span.stop] = 1
        positions = (start + mask[:, start:].cumsum(-1) - 1).clamp(min=start) if left else \
            torch.arange(start, start + width).expand(len(suffixes), width)
        return ids, mask, positions
