"""Rendering a FindResult for people: the one-line verdict and ``report.md`` (the figures: ``headprune.plots``)."""

from __future__ import annotations

from pathlib import Path

from headprune.report_examples import examples_section
from headprune.search.result import Compression, ControlEffect, FindResult
from headprune.search.stats import NonInferiority, Verdict

IMPROVE_TEST = (
    "The test: the exact McNemar test (a two-sided binomial test of rescued against damaged examples, the only "
    "ones that differ) at alpha={alpha}; the CI is a percentile bootstrap 95% interval of the paired difference "
    "(10,000 resamples of the held-out examples, pairs kept together).")

NON_INFERIORITY_TEST = (
    "The test: Tango's score test for the difference of paired proportions (Tango 1998, continuity-corrected), "
    "of the hypothesis that removing the heads costs more than {margin:g} points, at one-sided {one_sided:g}% "
    "(`--alpha` {alpha:g}). On the {n} held-out examples (never used to choose), each example is rescued "
    "(wrong before, right after), damaged (the reverse) or unchanged; the test uses those counts. The set is "
    "accepted as non-inferior when the lower end of the {level:g}% score interval is above -{margin:g} points; "
    "otherwise no claim is made. Unlike a bootstrap interval, it holds its level when few answers change.")


def verdict_sentence(v: Verdict) -> str:
    """``CONFIRMED improvement: held-out accuracy 78.0% -> 81.0% (+3.0%, 95% CI [...], McNemar p=..., ...)``."""
    if v.role == "exploratory":
        outcome, p = "exploratory (not confirmable)", f"Holm-adjusted p={v.adjusted_p:.3g}"
    else:
        outcome = "CONFIRMED improvement" if v.confirmed else "no confirmed improvement"
        p = f"McNemar p={v.p_value:.3g}"
    return (f"{outcome}: held-out accuracy {v.accuracy_before:.1%} -> {v.accuracy_after:.1%} "
            f"({v.difference:+.1%}, 95% bootstrap CI [{v.ci95[0]:+.1%}, {v.ci95[1]:+.1%}], "
            f"{p}, n={v.n}, rescued {v.rescued}, damaged {v.damaged})")


def control_text(c: ControlEffect) -> str:
    """``-9.5% [-15.5%, -3.5%]`` for an accuracy, ``NLL +0.0123 [...]`` for a text task."""
    if c.metric == "accuracy":
        return f"{c.difference:+.1%} [{c.ci95[0]:+.1%}, {c.ci95[1]:+.1%}]"
    return f"NLL {c.difference:+.4f} [{c.ci95[0]:+.4f}, {c.ci95[1]:+.4f}]"


def verdict_line(result: FindResult) -> str:
    """The terminal's last line: the primary set and its held-out verdict."""
    if result.compression is not None:
        return compression_line(result.compression)
    return f"primary set {','.join(result.finalists[0].heads)}: {verdict_sentence(result.verdict)}"


def _prescreen_note(result: FindResult) -> str:
    pre = result.prescreen
    total = result.model.total_heads
    if pre is None:
        return ""
    if pre.method == "attribution":
        rho = pre.spearman_on_candidates
        return (f" (the best by a one-pass attribution estimate of all {total} heads; Spearman of estimate vs "
                f"exact margin change on them: {'undefined' if rho is None else f'{rho:.2f}'})")
    return f" (the survivors of successive halving over all {total} heads on growing shares of discovery)"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def render_markdown(result: FindResult) -> str:
    """A short report: what was found, the verdict, the finalists table and the settings."""
    if result.compression is not None:
        return render_compression(result)
    v, primary, base = result.verdict, result.finalists[0], result.baseline
    model = result.model
    lines = [
        f"# headprune find: {model.name} on {result.task.name}",
        "",
        f"- Model: `{model.name}` ({model.family}, {model.layers} layers x {model.heads} heads), weights "
        f"`{model.weight_hash[:23]}...`",
        f"- Task: `{result.task.name}` ({result.task.kind}), discovery n={result.split.discovery}, "
        f"held-out n={result.split.heldout}, split seed {result.split.seed}; disjoint by input: "
        f"{result.split.duplicates_dropped} duplicate(s) and {result.split.conflicts_dropped} example(s) repeating "
        "an earlier input with another answer dropped",
        f"- Intact model: discovery {_pct(base.discovery.accuracy)}, held-out {_pct(base.heldout.accuracy)}",
        f"- Screened {len(result.screen)} heads exactly" + _prescreen_note(result)
        + f", {len(result.nominees)} nominees, {len(result.sets)} sets evaluated on discovery; "
        f"{len(result.finalists)} finalists scored on held-out.",
        "",
        "## Verdict",
        "",
        f"**Primary set (discovery rank 1): `{','.join(primary.heads)}`** (discovery gain "
        f"{primary.discovery.gain:+d}).",
        "",
        verdict_sentence(v) + ".",
        "",
        IMPROVE_TEST.format(alpha=v.alpha),
        "",
    ]
    if not v.confirmed:
        lines += ["No improvement is claimed: the held-out data did not confirm the discovery gain at "
                  f"alpha={v.alpha}.", ""]
    lines += contributions_table(result)
    controls = result.control_tasks
    lines += ["## Finalists (chosen on discovery; held-out shown, never used to choose)", "",
              "| rank | role | heads | discovery gain | held-out before | held-out after | diff | 95% bootstrap CI | "
              "p | p (Holm) |" + "".join(f" {c.name} |" for c in controls),
              "|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(controls)]
    for f in result.finalists:
        h = f.heldout
        holm_p = "" if h.adjusted_p is None else f"{h.adjusted_p:.3g}"
        row = (f"| {f.rank} | {h.role} | `{','.join(f.heads)}` | {f.discovery.gain:+d} | {_pct(h.accuracy_before)} | "
               f"{_pct(h.accuracy_after)} | {h.difference:+.1%} | [{h.ci95[0]:+.1%}, {h.ci95[1]:+.1%}] | "
               f"{h.p_value:.3g} | {holm_p} |")
        lines.append(row + "".join(f" {control_text(c)} |" for c in f.controls))
    if len(result.finalists) > 1:
        lines += ["", "Only the primary set, fixed on discovery before any held-out number was seen, can be confirmed. "
                  "The other finalists are exploratory: choosing among them after seeing held-out numbers is a "
                  "multiple comparison, so their p-values are Holm-adjusted over the finalists and none of them is "
                  "called confirmed."]
    for control in controls:
        lines += ["", f"Control task `{control.name}` (n={control.n}): how the same sets move a second capability. "
                  "Removing heads that help one task often hurts another."]
    if controls:
        lines += ["", "![trade-off: held-out gain against each control's change](controls.png)"]
    lines += [""] + examples_section(result)  # generate tasks: what the model wrote, before and after
    settings = "\n".join(f"{k}: {val}" for k, val in vars(result.settings).items())
    lines += ["## Settings", "", "```", settings, "```", ""] + stage_times_table(result)
    lines += ["![single-head screen](screen.png)", ""]
    return "\n".join(lines)


def contributions_table(result: FindResult) -> list[str]:
    """The primary set head by head: what each adds on discovery against the set without it (the test that
    let it stay), and the same drop-one comparison on held-out, exploratory (measured after the verdict)."""
    primary, rule = result.finalists[0], result.parsimony
    if rule is None or not primary.contributions:
        return []
    measure = ("answers" if rule.measure == "accuracy" else "margins (up / down beyond float tolerance)")
    against = "the intact model" if len(primary.heads) == 1 else "the set without it"
    lines = ["## Each head of the primary set", "",
             f"Each head against {against}, on {measure}: b = better with the head removed, c = worse; p is the "
             f"one-sided exact binomial test of b against c, Holm-adjusted over the set's heads. A head stays in a "
             f"set only when b - c >= 1 and its adjusted p <= {rule.level:g} on discovery "
             f"({rule.examined} multi-head sets tested, {rule.dropped} dropped, {rule.conditions} extra discovery "
             "conditions).", "",
             "| head | discovery b | discovery c | p | p (Holm) | held-out b (exploratory) | held-out c (exploratory) "
             "| held-out p (exploratory) |", "|---|---|---|---|---|---|---|---|"]
    for c in primary.contributions:
        held = ("| n/a | n/a | n/a |" if c.heldout_rescued is None else
                f"| {c.heldout_rescued} | {c.heldout_damaged} | {c.heldout_p:.3g} |")
        lines.append(f"| `{c.head}` | {c.rescued} | {c.damaged} | {c.p_value:.3g} | {c.adjusted_p:.3g} {held}")
    if len(primary.heads) > 1:
        lines += ["", "The held-out columns compare the primary set with the set without each head on held-out "
                  "data after the verdict; they are exploratory and were never used to choose anything."]
    return lines + [""]


# ------------------------------------------------------------------ stage times

STAGE_LABELS = {
    "setup": "set-up (task, model, journal)",
    "baseline": "baseline and determinism check",
    "prescreen": "pre-screen",
    "screen": "screen (single heads)",
    "joint": "joint search",
    "parsimony": "parsimony",
    "compress": "compress search",
    "heldout": "held-out and controls",
    "other": "the rest (record, savings, held-out texts)",
}


def stage_times(result: FindResult) -> list[tuple[str, float]]:
    """(stage, seconds) in the order the run went through them, then ``other`` (what no stage timed: the
    record, the held-out texts) and ``total``; empty for a result without timings. A pre-screen that did not
    run (``--screen exact``) is left out."""
    timings = dict(result.timings)
    total = timings.pop("total", None)
    if total is None:
        return []
    if result.settings.screen == "exact":
        timings.pop("prescreen", None)
    rows = list(timings.items())
    other = total - sum(seconds for _, seconds in rows)
    if other >= 0.0005:
        rows.append(("other", other))
    return rows + [("total", total)]


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 600 else f"{value / 60:.1f} min"


def stage_times_line(result: FindResult) -> str:
    """``stage times: setup 2.1 s, baseline 41.0 s, screen 6.2 min, ..., total 9.8 min`` for the terminal."""
    rows = stage_times(result)
    return "stage times: " + (", ".join(f"{stage} {_seconds(seconds)}" for stage, seconds in rows) or "not recorded")


def stage_times_table(result: FindResult) -> list[str]:
    """``report.md``'s stage times: one row per stage with its share of the run."""
    rows = stage_times(result)
    if not rows:
        return []
    total = rows[-1][1]
    lines = ["## Stage times", "", "| stage | seconds | share |", "|---|---|---|"]
    for stage, seconds in rows:
        share = f"{seconds / total:.1%}" if total > 0 else "n/a"
        name = "**total**" if stage == "total" else STAGE_LABELS.get(stage, stage)
        lines.append(f"| {name} | {seconds:.1f} | {share} |")
    return lines + [""]


def write_outputs(result: FindResult, folder: Path) -> None:
    """result.json, report.md, screen.png (controls.png with controls; tradeoff.png for compress), written to
    a staging folder and moved into ``folder``."""
    from headprune.io import atomic_folder
    from headprune.plots import save_control_tradeoff, save_heatmap, save_tradeoff
    from headprune.search.result import RESULT_NAME

    with atomic_folder(folder) as staging:
        result.save(staging / RESULT_NAME)
        (staging / "report.md").write_text(render_markdown(result), encoding="utf-8")
        save_heatmap(result, staging / "screen.png")
        if result.control_tasks and result.compression is None:
            save_control_tradeoff(result, staging / "controls.png")
        if result.compression is not None:
            save_tradeoff(result, staging / "tradeoff.png")


# ------------------------------------------------------------------ find --objective compress


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
        f"- Model: `{model.name}` ({model.family}, {model.layers} layers x {model.heads} heads, "
        f"{model.kv_heads} key/value heads per layer), weights `{model.weight_hash[:23]}...`",
        f"- Task: `{result.task.name}` ({result.task.kind}), discovery n={result.split.discovery}, "
        f"held-out n={result.split.heldout}, split seed {result.split.seed}",
        f"- Intact model: discovery {_pct(base.discovery.accuracy)}, held-out {_pct(base.heldout.accuracy)}",
        f"- Budget: discovery accuracy at most {c.max_drop:g} points below the intact model; grown by "
        f"{c.prefer} from the screen's least harmful; {len(result.screen)} heads screened exactly"
        + _prescreen_note(result) + f"; {c.queue} {c.prefer} in the queue; {_search_note(c)}, "
        f"{len(c.rejected)} {c.prefer} rejected ({', '.join(c.rejected) or 'none'})"
        + ("" if c.stopped is None else f"; {STOPPED[c.stopped]}") + ".",
        "", "## Result", "",
        f"**{len(c.heads)} of {model.total_heads} heads removed** (set fixed on discovery: accuracy "
        f"{c.discovery.accuracy_before:.1%} -> {c.discovery.accuracy_after:.1%}, rescued {c.discovery.rescued}, "
        f"damaged {c.discovery.damaged}): `{','.join(c.heads) or '(none)'}`", "",
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
        lines += [f"Control `{task.name}` (n={effect.n}): {control_text(effect)} (95% bootstrap CI), the cost of "
                  "removing the same heads on a second task.", ""]
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
