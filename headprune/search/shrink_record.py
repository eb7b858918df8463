"""The record of ``find --shrink`` (``headprune.search.shrink``): the improving set grown by whole key/value groups,
its non-inferiority test against the improving set on fresh examples, and what the grown set saves.

A value is stored apart from how it is shown (``headprune.report.shrink``). The claim is an intersection-union test
(Berger 1982): the improving set's own held-out verdict (better than the original), the grown set non-inferior to
the improving set on examples that chose neither, and each guard non-inferior on its held-out examples for the
grown set; each part at its full level, and the claim is made only when every part holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from headprune.search.guards import GuardEffect
from headprune.search.paired import Paired
from headprune.search.stats import NonInferiority

KV_CONTEXT, KV_ITEM_BYTES = 4096, 2  # the context and cache type (f16) llama.cpp's cache is given for


def kv_cache_bytes(width: int) -> int:
    """Bytes of llama.cpp's default key/value cache (f16, flash attention) holding ``width`` numbers a token (keys
    and values of every layer, ``HeadGrid.cache_width``) at a 4k context; the GGUF export measures the same from
    llama.cpp's own log (``headprune.exporter.gguf.size``)."""
    return width * KV_CONTEXT * KV_ITEM_BYTES


@dataclass(frozen=True)
class ShrinkSize:
    """A sliced set against the original: parameters, key/value heads (all layers) and the cache at 4k."""

    parameters: int
    parameters_original: int
    kv_heads: int
    kv_heads_original: int
    kv_cache_bytes: int
    kv_cache_bytes_original: int


@dataclass(frozen=True)
class Shrink:
    """``find --shrink``: the improving set ``improving`` (the primary set's heads) grown to ``heads`` on discovery by
    whole key/value groups (and the rest of groups it already touched), within ``margin`` accuracy points of it, and
    tested against it on ``fresh`` examples neither chose.

    ``note``: one line saying why no smaller set is claimed (the data cannot show it, the improving set is not
    confirmed, or no group could go); None when the test was run. ``rank``: the grown set's finalist rank, what
    ``export --pick`` takes (None when it is the improving set itself).
    """

    margin: float  # accuracy points
    improving: tuple[str, ...]
    heads: tuple[str, ...]
    added: tuple[str, ...]  # the units grown, each a group's heads joined by +
    rejected: tuple[str, ...]
    queue: int  # units it could grow from
    searched: int  # distinct sets evaluated on discovery
    fresh: int  # fresh examples the test read (or would have)
    fresh_asked: int
    discovery: Paired | None  # the grown set against the improving set, on discovery (what grew it)
    verdict: NonInferiority | None  # the grown set against the improving set, on the fresh examples
    size: ShrinkSize  # the grown set's sliced export
    improving_size: ShrinkSize  # the improving set's
    guards: tuple[GuardEffect, ...] = ()  # the grown set on each guard's held-out examples (primary: a claim part)
    rank: int | None = None
    note: str | None = None
    original: float | None = None  # the original's accuracy on the fresh examples (they chose nothing: unbiased)

    def claimed(self, improving_confirmed: bool) -> bool:
        """The claim: the improving set confirmed (with its guards), the grown set non-inferior to it on the fresh
        examples, and each guard held for the grown set."""
        return (improving_confirmed and self.note is None and self.verdict is not None and self.verdict.accepted
                and all(g.held for g in self.guards))


__all__ = ["KV_CONTEXT", "Shrink", "ShrinkSize", "kv_cache_bytes"]
