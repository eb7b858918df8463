"""The per-layer layout of a sliced export: which query and key/value heads each layer keeps.

Design decision 4, for grouped-query attention: a KV head whose query heads are all removed goes too. If the
remaining query heads still split evenly over the remaining KV heads, that is the layout (``grouped``).
Otherwise the layer's query heads read unevenly many per KV head, and the smallest exact layout is ``mapped``:
every removed query head goes, every KV head with a kept query head stays, and ``kv_slots`` records which KV
slot each query slot reads (the exported modeling code repeats each KV head for its own query heads).
Runtimes that repeat KV heads evenly (llama.cpp) cannot take a map; for them (``kv_map=False``) the smaller
of two even layouts is chosen: ``duplicate-kv`` gives every kept query head its own copy of its KV head;
``keep-zeroed`` keeps some removed query heads (output columns zeroed) so that every KV group has the same
count. Each layer is planned by its own counts (:class:`~headprune.heads.LayerHeads`); a layer without heads, or whose
kind cannot take a map (``kv_map`` false: a Gated DeltaNet), is planned as such. Plain data, no torch: export records
carry the plans.

Key/value sharing (Gemma 4: a layer with a ``kv_source`` reads that earlier layer's keys and values and has none of
its own). The source keeps every KV head that its own kept query heads or any reader's kept query heads read, so
removing a head never takes keys or values from a layer that still reads them: a KV head kept for readers alone has
no query head in the source (``mapped``: none repeats it; ``keep-zeroed``: removed query heads of its group are kept
zeroed, so that every group is even). A reader's KV slots are its source's (``kv_heads``: the source's), and its
kept query heads are grouped over them, mapped, or padded with zeroed ones, as any layer's; a source read by others
never duplicates its KV heads (its readers would read the copies). Each of these is exact: the readers' heads read
the keys and values they read before, and a kept head's output is what it was.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from headprune.errors import HeadSpecError
from headprune.heads import Head, HeadGrid, LayerHeads

LAYOUTS = ("unchanged", "grouped", "mapped", "duplicate-kv", "keep-zeroed")


@dataclass(frozen=True)
class LayerPlan:
    layer: int
    q_heads: tuple[int, ...]  # original query heads kept, in slot order
    kv_heads: tuple[int, ...]  # original KV head behind each KV slot
    zeroed: tuple[int, ...]  # kept query heads whose output is zeroed (keep-zeroed layout)
    layout: str  # one of LAYOUTS
    kv_slots: tuple[int, ...] = ()  # mapped layout: the KV slot each query slot reads (others: even groups)


def plan_layers(grid: HeadGrid, heads: Sequence[Head], *, kv_map: bool = True) -> list[LayerPlan]:
    """The per-layer sliced layout for removing ``heads``; ``kv_map=False`` for runtimes whose layers need an
    even number of query heads per KV head (a layer whose kind cannot take a map gets an even layout anyway).

    Raises:
        HeadSpecError: a head is out of range, or every head of a layer would go.
    """
    removed = grid.check(heads)
    kept: list[list[int]] = []
    for layer, shape in enumerate(grid.layers):
        gone = {h.head for h in removed if h.layer == layer}
        if shape.heads and len(gone) == shape.heads:
            raise HeadSpecError(f"cannot remove every head of layer {layer} ({shape.heads} heads)")
        kept.append([h for h in range(shape.heads) if h not in gone])
    read = _read_by_others(grid, kept)
    plans: list[LayerPlan] = []
    for layer, shape in enumerate(grid.layers):
        even = not (kv_map and shape.kv_map)
        if shape.kv_source is not None:
            plans.append(_plan_reader(layer, shape, kept[layer], plans[shape.kv_source], even=even))
        elif len(kept[layer]) == shape.heads:
            plans.append(LayerPlan(layer, tuple(kept[layer]), tuple(range(shape.kv_heads)), (), "unchanged"))
        else:
            plans.append(_plan_layer(layer, shape, kept[layer], kv_map=not even, shared=read.get(layer, set())))
    return plans


def _read_by_others(grid: HeadGrid, kept: list[list[int]]) -> dict[int, set[int]]:
    """For each layer other layers read keys and values of, the KV heads their kept query heads read."""
    read: dict[int, set[int]] = {}
    for layer, shape in enumerate(grid.layers):
        if shape.kv_source is not None:
            read.setdefault(shape.kv_source, set()).update(h // shape.group for h in kept[layer])
    return read


def _plan_layer(layer: int, shape: LayerHeads, kept: list[int], *, kv_map: bool, shared: Collection[int] = ()
                ) -> LayerPlan:
    """The smallest exact layout of a layer that keeps query heads ``kept`` (some of its heads go) and the KV heads
    ``shared`` that other layers read."""
    group = shape.group
    by_kv = {kv: [h for h in kept if h // group == kv] for kv in range(shape.kv_heads)}
    by_kv = {kv: qs for kv, qs in by_kv.items() if qs or kv in shared}
    if len({len(qs) for qs in by_kv.values()}) == 1:
        return LayerPlan(layer, tuple(q for qs in by_kv.values() for q in qs), tuple(by_kv), (), "grouped")
    if kv_map:
        slots = tuple(slot for slot, qs in enumerate(by_kv.values()) for _ in qs)
        return LayerPlan(layer, tuple(q for qs in by_kv.values() for q in qs), tuple(by_kv), (), "mapped", slots)
    widest = max(len(qs) for qs in by_kv.values())
    # Parameter cost beyond the grouped ideal: duplicate-kv adds k and v rows, keep-zeroed adds q rows
    # and output columns; both add head_dim * hidden per head, so compare head counts.
    extra_duplicate = 2 * (len(kept) - len(by_kv))
    extra_zeroed = 2 * (widest * len(by_kv) - len(kept))
    if extra_duplicate < extra_zeroed and not shared:  # (readers would read the copies)
        return LayerPlan(layer, tuple(kept), tuple(h // group for h in kept), (), "duplicate-kv")
    return _keep_zeroed(layer, group, by_kv, widest)


def _keep_zeroed(layer: int, group: int, by_kv: dict[int, list[int]], widest: int) -> LayerPlan:
    """Each KV head's kept query heads padded with removed ones of its group (kept, their output zeroed) to
    ``widest``, so that every group is even."""
    q_heads, zeroed = [], []
    for kv, qs in by_kv.items():
        padding = [h for h in range(kv * group, (kv + 1) * group) if h not in qs][: widest - len(qs)]
        q_heads += sorted(qs + padding)
        zeroed += padding
    return LayerPlan(layer, tuple(q_heads), tuple(by_kv), tuple(sorted(zeroed)), "keep-zeroed")


def _plan_reader(layer: int, shape: LayerHeads, kept: list[int], source: LayerPlan, *, even: bool) -> LayerPlan:
    """The layout of a layer that reads ``source``'s keys and values (its KV slots are the source's, which keeps
    every KV head ``kept`` reads: :func:`_read_by_others`)."""
    if len(kept) == shape.heads and source.kv_heads == tuple(range(shape.kv_heads)):
        return LayerPlan(layer, tuple(kept), source.kv_heads, (), "unchanged")
    by_kv = {kv: [h for h in kept if h // shape.group == kv] for kv in source.kv_heads}
    if len({len(qs) for qs in by_kv.values()}) == 1:
        return LayerPlan(layer, tuple(kept), source.kv_heads, (), "grouped")
    if not even:
        slots = tuple(slot for slot, qs in enumerate(by_kv.values()) for _ in qs)
        return LayerPlan(layer, tuple(kept), source.kv_heads, (), "mapped", slots)
    return _keep_zeroed(layer, shape.group, by_kv, max(len(qs) for qs in by_kv.values()))
