"""The units a sliced set grows by, and what a sliced set saves: shared by ``find --objective compress``
(``headprune.search.compress``) and ``find --shrink`` (``headprune.search.shrink``), which never import each other.

The screen orders heads from least to most harmful alone (:func:`head_queue`); :func:`units_of` turns that queue
into single heads or whole key/value groups, the unit a sliced export of a grouped-query model can drop;
:func:`savings` counts what the sliced export of a set saves, on the sliced model itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from headprune.heads import ATTENTION, Head, HeadGrid
from headprune.loading.models import LoadedModel
from headprune.search.find_result import Prescreen, Savings
from headprune.search.growth import Unit
from headprune.search.paired import Paired


def head_queue(screened: Sequence[tuple[Head, Paired, float | None]], prescreen: Prescreen | None,
               grid: HeadGrid, rank: Callable[[Paired, tuple[Head, ...]], tuple]) -> list[Head]:
    """Every head, least harmful first: those screened exactly by find's ranking key, then the rest by the
    pre-screen (attribution estimate, or the later halving round and its ranking)."""
    exact = [head for head, _, _ in sorted(screened, key=lambda row: rank(row[1], (row[0],)))]
    rest = [h for h in grid.all_heads() if h not in set(exact)]
    if prescreen is not None and prescreen.estimates:
        rest.sort(key=lambda h: (-prescreen.estimates[str(h)], h))
    elif prescreen is not None and prescreen.rounds:
        rounds = prescreen.rounds
        rest.sort(key=lambda h: (-rounds[str(h)].round, rank(rounds[str(h)].paired, (h,))))
    return exact + rest


def units_of(queue: Sequence[Head], grid: HeadGrid, prefer: str) -> list[Unit]:
    """The queue in units: single heads, or whole key/value groups ordered by their heads' mean place."""
    if prefer == "heads":
        return [(h,) for h in queue]
    place = {h: i for i, h in enumerate(queue)}
    groups = [tuple(Head(index, kv * layer.group + q) for q in range(layer.group))
              for index, layer in enumerate(grid.layers) for kv in range(layer.kv_heads if layer.heads else 0)]
    return sorted(groups, key=lambda g: (sum(place[h] for h in g) / len(g), g))


def savings(lm: LoadedModel, heads: Sequence[Head]) -> Savings:
    """Parameters and weight bytes of the sliced export of ``heads``, counted on the sliced model itself, and the
    key/value heads of its attention layers (those a key/value cache holds)."""
    from headprune.core.devices import dtype_name
    from headprune.surgery.plan import plan_layers
    from headprune.surgery.slicing import count_parameters
    from headprune.surgery.slicing import slice_model

    grid, itemsize = lm.grid, lm.model.dtype.itemsize
    before = count_parameters(lm.model)
    cached = [index for index, layer in enumerate(grid.layers) if layer.kind == ATTENTION and layer.kv_source is None]
    kv_before = sum(grid.layers[index].kv_heads for index in cached)
    if not heads:
        return Savings(before, before, before * itemsize, before * itemsize, dtype_name(lm.dtype), kv_before,
                       kv_before)
    plans = plan_layers(grid, heads)
    sliced = slice_model(lm, plans, heads)  # a copy; shapes do not depend on the ablation's means
    after = count_parameters(sliced)
    del sliced
    return Savings(before, after, before * itemsize, after * itemsize, dtype_name(lm.dtype), kv_before,
                   sum(len(plans[index].kv_heads) for index in cached))


__all__ = ["head_queue", "savings", "units_of"]
