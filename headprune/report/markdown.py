"""Rendering a FindResult for people: the one-line verdict, ``report.md`` (improve; ``compress`` renders the
compress objective's) and the run's output folder (the figures: ``plots``)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from headprune.report.compress import compression_line, render_compression
from headprune.report.examples import examples_section
from headprune.report.guards import guards_line, guards_section
from headprune.report.shrink import shrink_line, shrink_section
from headprune.report.text import (control_level, control_text, interval_text, level_text, pct, prescreen_note,
                                   stage_times_table, verdict_sentence)
from headprune.search.find_result import FindResult
from headprune.search.rules import rule_of

IMPROVE_TEST = (
    "The test: the exact McNemar test (a two-sided binomial test of rescued against damaged examples, the only "
    "ones that differ) at level {size:g}{share}; confirmed when it rejects and more were rescued than damaged, i.e. "
    "one-sided at {one_sided:g}%. The interval of the paired difference is Tango's score interval at "
    "{level}, widened to 0 where the exact test does not reject, so it lies above 0 exactly when the set's own "
    "test rejects; unlike a bootstrap interval it holds its coverage when few answers change and is never of zero "
    "width.")

def verdict_line(result: FindResult) -> str:
    """The terminal's last line: the primary set and its held-out verdict."""
    if result.compression is not None:
        return compression_line(result.compression)
    line = f"primary set {','.join(result.finalists[0].heads)}: {verdict_sentence(result.verdict)}{guards_line(result)}"
    shrunk = shrink_line(result)  # find --shrink: the smaller set's claim, or why none is made
    return line if shrunk is None else f"{line}\n{shrunk}"


def render_markdown(result: FindResult) -> str:
    """A short report: what was found, the verdict, the finalists table and the settings."""
    if result.compression is not None:
        return render_compression(result)
    v, primary, base = result.verdict, result.finalists[0], result.baseline
    model = result.model
    lines = [
        f"# headprune find: {model.name} on {result.task.name}",
        "",
        f"- Model: `{model.name}` ({model.family}, {model.shape}), weights "
        f"`{model.weight_hash[:23]}...`" + (f"; {model.quantization}" if model.quantization else ""),
        f"- Task: `{result.task.name}` ({result.task.kind}), discovery n={result.split.discovery}, "
        f"held-out n={result.split.heldout}, split seed {result.split.seed}; disjoint by input: "
        f"{result.split.duplicates_dropped} duplicate(s) and {result.split.conflicts_dropped} example(s) repeating "
        "an earlier input with another answer dropped",
        f"- Intact model: discovery {pct(base.discovery.accuracy)}, held-out {pct(base.heldout.accuracy)}",
        f"- Screened {len(result.screen)} heads exactly" + prescreen_note(result)
        + f", {len(result.nominees)} nominees, {len(result.sets)} sets evaluated on discovery; "
        f"{len(result.finalists)} finalists scored on held-out.",
        "",
        "## Verdict",
        "",
        f"**Primary set: `{','.join(primary.heads)}`** (discovery gain {primary.discovery.gain:+d}).",
        "",
        verdict_sentence(v) + ".",
        "",
        IMPROVE_TEST.format(size=v.size, one_sided=100 * v.size / 2, level=level_text(v.level), share=(
            "" if v.share == 1 else f", its share of alpha={v.alpha:g} (below)")),
        "",
    ]
    if not v.confirmed:
        lines += ["No improvement is claimed: the held-out data did not confirm the discovery gain at "
                  f"level {v.size:g}.", ""]
    elif not result.guards_held:
        lines += ["No improvement is claimed: the task's gain is confirmed, but not every guard held (below).", ""]
    lines += guards_section(result)
    lines += shrink_section(result)
    lines += rule_of(result).section(result)  # how the primary set was chosen, in the words of the rule that chose
    controls = result.control_tasks
    lines += ["## Finalists (the primary set, then the other candidates and the best other sets on discovery)", "",
              "| rank | role | heads | discovery gain | held-out before | held-out after | diff | interval (level) | "
              "p | p (adjusted) |" + "".join(f" {c.name} |" for c in controls),
              "|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(controls)]
    for f in result.finalists:
        h = f.heldout
        holm_p = "" if h.adjusted_p is None else f"{h.adjusted_p:.3g}"
        row = (f"| {f.rank} | {h.role} | `{','.join(f.heads)}` | {f.discovery.gain:+d} | {pct(h.accuracy_before)} | "
               f"{pct(h.accuracy_after)} | {h.difference:+.1%} | {interval_text(h.interval)} ({level_text(h.level)}) | "
               f"{h.p_value:.3g} | {holm_p} |")
        lines.append(row + "".join(f" {control_text(c)} |" for c in f.controls))
    if len(result.finalists) > 1:
        lines += ["", "Only the primary set, chosen by the tests above, can be confirmed. "
                  "The other finalists are exploratory: choosing among them after seeing held-out numbers is a "
                  "multiple comparison, so their p-values and intervals are Bonferroni-adjusted over the "
                  f"{len(result.finalists)} finalists (interval at 1 - alpha/{len(result.finalists)}) and none of them is "
                  "called confirmed."]
    for control, effect in zip(controls, primary.controls):
        lines += ["", f"Control task `{control.name}` (n={control.n}): how the same sets move a second capability "
                  f"(intervals: {control_level(effect)}). Removing heads that help one task often hurts another."]
    if controls:
        lines += ["", "![trade-off: held-out gain against each control's change](controls.png)"]
    lines += [""] + examples_section(result)  # generate tasks: what the model wrote, before and after
    settings = "\n".join(f"{k}: {val}" for k, val in vars(result.settings).items())
    lines += ["## Settings", "", "```", settings, "```", ""] + stage_times_table(result)
    lines += ["![single-head screen](screen.png)", ""]
    return "\n".join(lines)


def write_outputs(result: FindResult, folder: Path, *, present: Collection[str] | None = None) -> None:
    """result.json, report.md, screen.png (controls.png with controls, front.png with guards; tradeoff.png for
    compress), written to
    a staging folder and moved into ``folder`` (result.json last), once ``folder`` is checked again as at the run's
    start (``headprune.report.run_folder``; ``present``: the run files it held then).

    Raises:
        KeptOutputError: the folder changed while the run ran (or the move failed): the outputs stay in their
            staging folder, which the message names, and nothing in ``folder`` is replaced.
    """
    from headprune.core.io import atomic_folder
    from headprune.report.plots import save_control_tradeoff, save_front, save_heatmap, save_tradeoff
    from headprune.report.run_folder import check_run_destination, result_inputs
    from headprune.search.find_result import RESULT_NAME

    inputs = result_inputs(result)
    with atomic_folder(folder, last=(RESULT_NAME,),
                       check=lambda target: check_run_destination(target, inputs, present=present)) as staging:
        result.save(staging / RESULT_NAME)
        (staging / "report.md").write_text(render_markdown(result), encoding="utf-8")
        save_heatmap(result, staging / "screen.png")
        if result.control_tasks and result.compression is None:
            save_control_tradeoff(result, staging / "controls.png")
        if result.guard_tasks:
            save_front(result, staging / "front.png")
        if result.compression is not None:
            save_tradeoff(result, staging / "tradeoff.png")


__all__ = ["IMPROVE_TEST", "render_markdown", "verdict_line", "write_outputs"]
