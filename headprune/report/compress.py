"""Rendering a ``find --objective compress`` result: the terminal line and ``report.md``."""

from __future__ import annotations

from headprune.report.examples import examples_section
from headprune.report.text import control_level, control_text, pct, prescreen_note, stage_times_table
from headprune.search.find_result import Compression, FindResult
from headprune.search.stats import NonInferiority

NON_INFERIORITY_TEST = (
    "The test: Tango's score test for the difference of paired proportions (Tango 1998, continuity-corrected), "
    "of the hypothesis that removing the heads costs more than {margin:g} points, at one-sided {one_sided:g}% "
    "(`--alpha` {alpha:g}). On the {n} held-out examples (never used to choose), each example is rescued "
    "(wrong before, right after), damaged (the reverse) or unchanged; the test uses those counts. The set is "
    "accepted as non-inferior when the lower end of the {level:g}% score interval is above -{margin:g} points; "
    "otherwise no claim is made. Unlike a bootstrap interval, it holds its level when few answers change.")



def non_inferiority_sentence(v: NonInferiority) -> str:
    """``NON-INFERIOR within 2 points: held-out accuracy 80.0% -> 79.5% (-0.5%, 95% score CI [-1.6%, +0.6%],
    lower end > -2 points: Tango's score test, one-sided 2.5%; n=..., rescued ..., damaged ...)``."""
    margin = 100 * v.margin
    if v.removed == 0:
        outcome = "nothing to test (no head could go within the budget)"
    else:
        outcome = (f"NON-INFERIOR within {margin:.3g} points" if v.accepted
                   else f"not shown non-inferior within {margin:.3g} points")
    low, high = v.interval
    relation = ">" if low > -v.margin else "<="
    return (f"{outcome}: held-out accuracy {v.accuracy_before:.1%} -> {v.accuracy_after:.1%} ({v.difference:+.1%}, "
            f"{100 * v.level:g}% score CI [{low:+.1%}, {high:+.1%}], lower end {relation} -{margin:.3g} points: "
            f"Tango's score test, one-sided {100 * v.alpha / 2:g}%; n={v.n}, rescued {v.rescued}, "
            f"damaged {v.damaged})")


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


STOPPED = {"queue": "the search ended with its queue",
           "patience": "the search ended after --patience units in a row were rejected",
           "cost": "the search ended at its cost cap (2 distinct sets per unit taken, plus 2 per --patience)"}


def _search_note(c: Compression) -> str:
    """How the set was grown and what that cost: ``beam search of width 4: 31 distinct sets evaluated``."""
    how = f"beam search of width {c.beam_width}" if c.search == "beam" else "galloping greedy search"
    cost = f"{c.searched} distinct sets evaluated" if c.searched is not None else f"{len(c.curve)} sets evaluated"
    if c.rounds is not None:
        cost += f" in {c.rounds} rounds"
    if c.sets_per_head is not None:
        cost += f", {c.sets_per_head:.2f} per head removed"
    return f"{how}: {cost}"


def compression_line(c: Compression) -> str:
    """The terminal's last line for a compress run: what goes, what it saves, and the verdict."""
    s = c.savings
    return (f"compress: {len(c.heads)} heads removed, {s.parameters_saved:,} parameters "
            f"({s.parameters_saved / s.parameters_before:.1%}, {_size(s.bytes_saved)} in {s.dtype}) saved by the "
            f"sliced export; {non_inferiority_sentence(c.verdict)}")


def render_compression(result: FindResult) -> str:
    """The report of a compress run: the set, its savings, the test stated exactly, controls and the curve."""
    c, model, base = result.compression, result.model, result.baseline
    assert c is not None
    v, s = c.verdict, c.savings
    within = [p for p in c.curve if p.within]
    lines = [
        f"# headprune find --objective compress: {model.name} on {result.task.name}", "",
        f"- Model: `{model.name}` ({model.family}, {model.shape}"
        f"{'' if model.grid else f', {model.kv_heads} key/value heads per layer'}), weights "
        f"`{model.weight_hash[:23]}...`",
        f"- Task: `{result.task.name}` ({result.task.kind}), discovery n={result.split.discovery}, "
        f"held-out n={result.split.heldout}, split seed {result.split.seed}",
        f"- Intact model: discovery {pct(base.discovery.accuracy)}, held-out {pct(base.heldout.accuracy)}",
        f"- Budget: at most {c.max_drop:g} points below the intact model, judged on discovery as the held-out test "
        f"will judge it (its score interval at the held-out size); grown by "
        f"{c.prefer} from the screen's least harmful; {len(result.screen)} heads screened exactly"
        + prescreen_note(result) + f"; {c.queue} {c.prefer} in the queue; {_search_note(c)}, "
        f"{len(c.rejected)} {c.prefer} rejected ({', '.join(c.rejected) or 'none'})"
        + ("" if c.stopped is None else f"; {STOPPED[c.stopped]}") + ".",
        "", "## Result", "",
        f"**{len(c.heads)} of {model.total_heads} heads removed**: `{','.join(c.heads) or '(none)'}`. What removing "
        f"them costs is the held-out verdict below; the discovery figures that chose them (accuracy "
        f"{c.discovery.accuracy_before:.1%} -> {c.discovery.accuracy_after:.1%}, rescued {c.discovery.rescued}, damaged "
        f"{c.discovery.damaged}) are biased in the set's favour: the search kept the largest set they let through.", "",
        "| sliced export | original | compressed | saved |", "|---|---|---|---|",
        f"| parameters | {s.parameters_before:,} | {s.parameters_after:,} | {s.parameters_saved:,} "
        f"({s.parameters_saved / s.parameters_before:.2%}) |",
        f"| weight bytes ({s.dtype}) | {s.bytes_before:,} | {s.bytes_after:,} | {s.bytes_saved:,} |",
        f"| key/value heads | {s.kv_heads_before} | {s.kv_heads_after} | {s.kv_heads_before - s.kv_heads_after} |",
        "", "## Held-out verdict (non-inferiority)", "",
        non_inferiority_sentence(v) + ".", "",
        NON_INFERIORITY_TEST.format(n=v.n, margin=c.max_drop, level=100 * v.level, one_sided=100 * v.alpha / 2,
                                    alpha=v.alpha), "",
    ]
    finalist = result.finalists[0]
    if finalist.heldout.confirmed:
        lines += [f"The removal also improves held-out accuracy significantly (exact McNemar p = "
                  f"{finalist.heldout.p_value:.3g}).", ""]
    else:
        lines += ["No improvement is claimed (this objective does not look for one).", ""]
    for task, effect in zip(result.control_tasks, finalist.controls):
        lines += [f"Control `{task.name}` (n={effect.n}): {control_text(effect)} ({control_level(effect)}), the cost "
                  "of removing the same heads on a second task.", ""]
    lines += ["## Trade-off explored on discovery", "",
              f"{len(within)} of {len(c.curve)} evaluated sets stayed within the budget; the largest has "
              f"{max((p.removed for p in within), default=0)} heads.", "",
              "| heads removed | discovery accuracy | within budget | taken |", "|---|---|---|---|"]
    lines += [f"| {p.removed} | {p.accuracy:.1%} | {'yes' if p.within else 'no'} | {'yes' if p.accepted else ''} |"
              for p in c.curve]
    lines += [""] + examples_section(result)[:-1]  # generate tasks: what the model wrote, before and after
    settings = "\n".join(f"{k}: {val}" for k, val in vars(result.settings).items())
    lines += ["", "![heads removed against discovery accuracy](tradeoff.png)", "",
              "## Settings", "", "```", settings, "```", ""] + stage_times_table(result)
    lines += ["![single-head screen](screen.png)", ""]
    return "\n".join(lines)


__all__ = ["NON_INFERIORITY_TEST", "compression_line", "non_inferiority_sentence", "render_compression"]
