"""Head names: ``L{layer}.H{head}``, zero-based, everywhere (CLI, JSON, reports, model cards); and where a model has
them: :class:`HeadGrid`, one :class:`LayerHeads` a layer.

A head is named by its layer and its place among that layer's heads, whatever the layer is: ``L3.H1`` is query head 1
of an attention layer, or value head 1 of a Gated DeltaNet layer (``kind`` says which), and a layer without heads
(a Mamba or convolution layer) has no names at all. Names are checked against the layer's own count.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from headprune.errors import HeadSpecError

_HEAD_NAME = re.compile(r"^L(\d+)\.H(\d+)$")
ATTENTION = "attention"  # the kind of a layer of softmax attention: query heads over grouped key/value heads


@dataclass(frozen=True, order=True)
class Head:
    """One head of one layer. Ordered by layer, then head."""

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
class LayerHeads:
    """One layer's heads, as headprune removes them.

    Attributes:
        heads: the heads named in this layer (``L{i}.H0`` ...): query heads of attention, value heads of a Gated
            DeltaNet; 0 for a layer without any (a Mamba or convolution layer), which headprune never touches.
        kv_heads: the key/value heads they read, in even groups: head ``h`` reads key/value head
            ``h // (heads // kv_heads)``.
        head_dim: a query (and key) head's width.
        out_dim: a head's width at the output projection's input, the slice ablation silences (``head_dim`` for
            attention; MLA's ``v_head_dim``, a Gated DeltaNet's value head width).
        kind: where the layer keeps its heads: ``"attention"`` or the name of another of its adapter's mixers
            (``"linear_attention"``); for a layer without heads, what it is instead (``"mamba"``, ``"conv"``).
        kv_map: whether this layer's kept heads may read unevenly many per key/value head in a sliced export (the
            exported attention repeats key/value heads by a map; a Gated DeltaNet's stock code cannot).
        kv_source: the earlier layer whose keys and values this layer's heads read, where it has none of its own
            (Gemma 4's key/value-sharing layers, which read the last earlier layer of their type); None: its own.
            Its ``kv_heads`` are that layer's, in the same even groups.
    """

    heads: int
    kv_heads: int
    head_dim: int
    out_dim: int
    kind: str = ATTENTION
    kv_map: bool = True
    kv_source: int | None = None

    @property
    def group(self) -> int:
        """Heads a key/value head serves (0 in a layer without heads)."""
        return self.heads // self.kv_heads if self.heads else 0


@dataclass(frozen=True)
class HeadGrid:
    """Where a model's heads are: one :class:`LayerHeads` a layer, in order. Layers may differ in kind, counts and
    sizes (hybrids, Gemma 4, MLA); :meth:`uniform` builds the grid of a model whose layers are all alike.
    ``stateful``: every layer also carries a recurrent state beside its heads, which its kind does not say (Falcon-H1's
    Mamba2 mixer runs beside the attention of each layer)."""

    layers: tuple[LayerHeads, ...]
    stateful: bool = False

    @classmethod
    def uniform(cls, num_layers: int, num_heads: int, num_kv_heads: int, head_dim: int) -> HeadGrid:
        """``num_layers`` attention layers of ``num_heads`` query heads over ``num_kv_heads``, ``head_dim`` wide."""
        return cls((LayerHeads(num_heads, num_kv_heads, head_dim, head_dim),) * num_layers)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def total(self) -> int:
        """Heads in all layers."""
        return sum(layer.heads for layer in self.layers)

    @property
    def is_uniform(self) -> bool:
        """Every layer is an attention layer like the first (what a grid of one count per model describes)."""
        return len(set(self.layers)) <= 1 and all(layer.kind == ATTENTION and layer.heads and layer.kv_map
                                                  and layer.out_dim == layer.head_dim for layer in self.layers)

    def _the(self, field: str) -> int:
        if not self.is_uniform:
            raise ValueError(f"the layers of this model differ ({self.describe()}): read grid.layers[i].{field}")
        return getattr(self.layers[0], field)

    # One count for every layer, where every layer has it (simulations, tests, models alike in every layer); code
    # that serves any model reads ``layers``.
    num_heads = property(lambda self: self._the("heads"), doc="Query heads of every layer (uniform grids only).")
    num_kv_heads = property(lambda self: self._the("kv_heads"), doc="Key/value heads of every layer (uniform grids).")
    head_dim = property(lambda self: self._the("head_dim"), doc="The head size of every layer (uniform grids only).")

    @property
    def recurrent(self) -> bool:
        """Some layer carries a state from token to token besides keys and values (a Gated DeltaNet, a Mamba or
        convolution layer, or one beside attention: ``stateful``): its cache cannot be masked back, cut or shared by
        rows as keys and values can."""
        return self.stateful or any(layer.kind != ATTENTION for layer in self.layers)

    @property
    def widest(self) -> tuple[int, int]:
        """(most heads of a layer, widest head output): the shape of per-head tensors of every layer, such as head
        means ``(layers, heads, out_dim)``, padded where a layer has fewer or narrower."""
        return max((layer.heads for layer in self.layers), default=0), max(
            (layer.out_dim for layer in self.layers if layer.heads), default=0)

    def cache_width(self, kv_heads: Sequence[int] | None = None) -> int:
        """Numbers a token adds to a key/value cache: each attention layer's key/value heads (``kv_heads``: a sliced
        export's, a count a layer; default the layer's own) times a key's and a value's width."""
        counts = kv_heads if kv_heads is not None else [layer.kv_heads for layer in self.layers]
        return sum(n * (layer.head_dim + layer.out_dim) for n, layer in zip(counts, self.layers, strict=True)
                   if layer.kind == ATTENTION and layer.kv_source is None)  # a sharing layer caches nothing

    def starts_at(self, layer: int) -> bool:
        """Whether a pass may begin at ``layer`` with the layers below it skipped: no layer from there on reads keys
        and values a layer below it computes (:attr:`LayerHeads.kv_source`)."""
        return all(shape.kv_source is None or shape.kv_source >= layer for shape in self.layers[layer:])

    def all_heads(self) -> list[Head]:
        return [Head(index, head) for index, layer in enumerate(self.layers) for head in range(layer.heads)]

    def check(self, heads: Iterable[Head]) -> tuple[Head, ...]:
        """Return the heads sorted and de-duplicated, or raise naming the first one out of range (by its layer's
        own count)."""
        checked = sorted(set(heads))
        for head in checked:
            if head.layer >= self.num_layers:
                raise HeadSpecError(
                    f"head {head} is out of range: the model has {self.num_layers} layers (L0..L{self.num_layers - 1})"
                )
            layer = self.layers[head.layer]
            if not layer.heads:
                raise HeadSpecError(f"head {head} is out of range: layer {head.layer} is a {layer.kind} layer, "
                                    "without heads headprune removes")
            if head.head >= layer.heads:
                raise HeadSpecError(
                    f"head {head} is out of range: layer {head.layer} has {layer.heads} "
                    f"{'' if layer.kind == ATTENTION else layer.kind + ' '}heads (H0..H{layer.heads - 1})"
                )
        return tuple(checked)

    def describe(self) -> str:
        """``2 layers x 4 heads``; where layers differ, each run of alike layers: ``4 layers: 1 attention x 4 heads,
        3 linear_attention x 8 heads`` (in order of first appearance, counted)."""
        if self.is_uniform:
            return f"{self.num_layers} layers x {self.layers[0].heads if self.layers else 0} heads"
        runs: dict[tuple[str, int], int] = {}
        for layer in self.layers:
            runs[layer.kind, layer.heads] = runs.get((layer.kind, layer.heads), 0) + 1
        parts = [f"{n} {kind} x {heads} heads" if heads else f"{n} {kind} without heads"
                 for (kind, heads), n in runs.items()]
        return f"{self.num_layers} layers: {', '.join(parts)}"


def parse_heads(spec: str | Iterable[str | Head]) -> tuple[Head, ...]:
    """Parse ``"L0.H1,L3.H2"`` (or an iterable of names or heads) into sorted, unique heads."""
    items: Iterable[str | Head] = spec.split(",") if isinstance(spec, str) else spec
    heads = {item if isinstance(item, Head) else Head.parse(item) for item in items if str(item).strip()}
    return tuple(sorted(heads))


def format_heads(heads: Iterable[Head]) -> str:
    """``L0.H1,L3.H2``; the empty set is ``(none)``."""
    names = [str(head) for head in sorted(heads)]
    return ",".join(names) if names else "(none)"
