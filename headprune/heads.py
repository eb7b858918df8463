"""Head names: ``L{layer}.H{head}``, zero-based, everywhere (CLI, JSON, reports, model cards)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from headprune.errors import HeadSpecError

_HEAD_NAME = re.compile(r"^L(\d+)\.H(\d+)$")


@dataclass(frozen=True, order=True)
class Head:
    """One query head of one layer. Ordered by layer, then head."""

    layer: int
    head: int

    def __str__(self) -> str:
        return f"L{self.layer}.H{self.head}"

    @classmethod
    def parse(cls, name: str) -> Head:
        """Parse ``L3.H7``; raise :class:`HeadSpecError` for anything else."""
        match = _HEAD_NAME.match(name.strip())
        if match is None:
            raise HeadSpecError(f"malformed head name {name.strip()!r}: expected L<layer>.H<head>, e.g. L3.H7")
        return cls(int(match.group(1)), int(match.group(2)))


@dataclass(frozen=True)
class HeadGrid:
    """The shape of a model's attention: layers x query heads, with KV grouping and head size."""

    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int

    @property
    def total(self) -> int:
        return self.num_layers * self.num_heads

    def all_heads(self) -> list[Head]:
        return [Head(layer, head) for layer in range(self.num_layers) for head in range(self.num_heads)]

    def check(self, heads: Iterable[Head]) -> tuple[Head, ...]:
        """Return the heads sorted and de-duplicated, or raise naming the first one out of range."""
        checked = sorted(set(heads))
        for head in checked:
            if head.layer >= self.num_layers:
                raise HeadSpecError(
                    f"head {head} is out of range: the model has {self.num_layers} layers (L0..L{self.num_layers - 1})"
                )
            if head.head >= self.num_heads:
                raise HeadSpecError(
                    f"head {head} is out of range: layer {head.layer} has {self.num_heads} heads "
                    f"(H0..H{self.num_heads - 1})"
                )
        return tuple(checked)


def parse_heads(spec: str | Iterable[str | Head]) -> tuple[Head, ...]:
    """Parse ``"L0.H1,L3.H2"`` (or an iterable of names or heads) into sorted, unique heads."""
    items: Iterable[str | Head] = spec.split(",") if isinstance(spec, str) else spec
    heads = {item if isinstance(item, Head) else Head.parse(item) for item in items if str(item).strip()}
    return tuple(sorted(heads))


def format_heads(heads: Iterable[Head]) -> str:
    """``L0.H1,L3.H2``; the empty set is ``(none)``."""
    names = [str(head) for head in sorted(heads)]
    return ",".join(names) if names else "(none)"
