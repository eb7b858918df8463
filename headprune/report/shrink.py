"""Rendering ``find --shrink``: the claim line the terminal prints and the section of ``report.md``
(``headprune.search.shrink`` says what is grown and tested)."""

from __future__ import annotations

from headprune.report.text import interval_text, level_text
from headprune.search.find_result import FindResult
from headprune.search.shrink_record import KV_CONTEXT, Shrink, ShrinkSize


def _smaller(size: ShrinkSize) -> str:
    """``1,234 fewer parameters (0.9%), 6 of 90 key/value groups, key/value cache at 4k 1.0 MiB smaller (6.7%)``."""
    saved = size.parameters_original - size.parameters
    groups = size.kv_heads_original - size.kv_heads
    cache = size.kv_cache_bytes_original - size.kv_cache_bytes
    return (f"{saved:,} fewer parameters ({saved / size.parameters_original:.2%}), {groups} of "
            f"{size.kv_heads_original} key/value groups gone, key/value cache at {KV_CONTEXT // 1024}k "
            f"{cache / 2**20:.2f} MiB smaller ({cache / max(size.kv_cache_bytes_original, 1):.1%}, f16)")


def shrink_line(result: FindResult) -> str | None:
    """The terminal's line for ``--shrink``: the claim, or why none is made; None without ``--shrink``."""
    s = result.shrink
    if s is None:
        return None
    if s.note is not None:
        return s.note
    v = s.verdict
    assert v is not None
    low, _ = v.interval
    tested = (f"no worse than the improving set by more than {s.margin:g} points (fresh n={v.n}: "
              f"{v.accuracy_before:.1%} -> {v.accuracy_after:.1%}, {100 * v.level:g}% score CI lower end {low:+.1%}, "
              f"Tango's score test one-sided {100 * v.alpha / 2:g}%)")
    if not s.claimed(result.confirmed):
        why = ("the improving set's own claim does not hold" if not result.confirmed
               else "a guard did not hold for it on held-out guard examples" if v.accepted
               else "it was not shown non-inferior to the improving set")
        return (f"shrink: {','.join(s.heads)} is not claimed: {why} "
                f"({v.difference:+.1%} on {v.n} fresh examples, CI lower end {low:+.1%}, margin -{s.margin:g} points)")
    better = result.verdict
    return (f"shrink: {len(s.heads)} heads {','.join(s.heads)}: better than the original by {better.difference:+.1%} "
            f"(the improving set's held-out verdict, {interval_text(better.interval)} at {level_text(better.level)}), "
            f"{tested}; {_smaller(s.size)}; export it with --pick {s.rank}")


def shrink_section(result: FindResult) -> list[str]:
    """``report.md``'s section for ``--shrink``: the claim, the test stated exactly, the sizes and the growth."""
    s = result.shrink
    if s is None:
        return []
    lines = ["## Smaller: the improving set grown by key/value groups (--shrink)", "", shrink_line(result) or "", ""]
    lines += [f"Grown on discovery from the improving set `{','.join(s.improving)}` by whole key/value groups (and "
              f"the rest of each group it touched), least harmful first by the screen, while discovery stayed within "
              f"{s.margin:g} points of the improving set as the fresh test would judge it"
              + (" and each guard's discovery part within its margin" if result.guard_tasks else "")
              + f": {len(s.added)} of {s.queue} units added ({', '.join(s.added) or 'none'}), "
              f"{len(s.rejected)} rejected, {s.searched} sets evaluated.", ""]
    if s.note is None and s.verdict is not None:
        v = s.verdict
        lines += [f"The test reads {v.n} fresh examples of the task ({s.fresh_asked} asked for), on neither side of "
                  "the split: discovery grew the set and held-out chose the improving set, so neither can test one "
                  "against the other; having chosen nothing, they also estimate each set without selection bias"
                  + ("" if s.original is None else f" (accuracy: the original {s.original:.1%}, the improving set "
                     f"{v.accuracy_before:.1%}, the grown set {v.accuracy_after:.1%})")
                  + f". Tango's score test of non-inferiority at one-sided {100 * v.alpha / 2:g}%: "
                  f"rescued {v.rescued}, damaged {v.damaged} (the grown set against the improving set). The claim "
                  "is made only when every part holds: the improving set's own verdict, this test"
                  + (", and each guard's held-out test for the grown set" if result.guard_tasks else "")
                  + " (each at its full level: an intersection-union test).", ""]
        for g in s.guards:
            lines += [f"Guard `{g.task}` for the grown set: {g.before:.3g} -> {g.after:.3g}, "
                      f"{'held' if g.held else 'not shown'} within {100 * g.margin:g} points"
                      if g.metric == "accuracy" else
                      f"Guard `{g.task}` for the grown set: mean NLL {g.before:.4f} -> {g.after:.4f}, "
                      f"{'held' if g.held else 'not shown'} within {g.margin:g} nats", ""]
    lines += ["| sliced export | original | improving set | grown set |", "|---|---|---|---|",
              _row("parameters", s, lambda z: z.parameters, lambda z: z.parameters_original),
              _row("key/value groups", s, lambda z: z.kv_heads, lambda z: z.kv_heads_original),
              _row(f"key/value cache at {KV_CONTEXT // 1024}k (f16, bytes)", s, lambda z: z.kv_cache_bytes,
                   lambda z: z.kv_cache_bytes_original), ""]
    if s.rank is not None:
        lines += [f"The grown set is finalist {s.rank}; `headprune export MODEL --heads result.json --pick {s.rank}` "
                  "writes it (GGUF and ONNX slice whole key/value groups).", ""]
    return lines


def _row(label: str, s: Shrink, after, before) -> str:  # noqa: ANN001
    return f"| {label} | {before(s.size):,} | {after(s.improving_size):,} | {after(s.size):,} |"


__all__ = ["shrink_line", "shrink_section"]
