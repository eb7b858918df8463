"""Rendering a FindResult for people: the one-line verdict, ``report.md`` and the ``screen.png`` heatmap."""

from __future__ import annotations

from pathlib import Path

from headprune.heads import Head
from headprune.report_examples import examples_section
from headprune.search.result import Compression, ControlEffect, FindResult
from headprune.search.stats import NonInferiority, Verdict


def verdict_sentence(v: Verdict) -> str:
    """``CONFIRMED improvement: held-out accuracy 78.0% -> 81.0% (+3.0%, 95% CI [...], McNemar p=..., ...)``."""
    if v.role == "exploratory":
        outcome, p = "exploratory (not confirmable)", f"Holm-adjusted p={v.adjusted_p:.3g}"
    else:
        outcome = "CONFIRMED improvement" if v.confirmed else "no confirmed improvement"
        p = f"McNemar p={v.p_value:.3g}"
    return (f"{outcome}: held-out accuracy {v.accuracy_before:.1%} -> {v.accuracy_after:.1%} "
            f"({v.difference:+.1%}, 95% CI [{v.ci95[0]:+.1%}, {v.ci95[1]:+.1%}], "
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
        return (f" (the best by a one-pass attribution estimate of all {total} heads; Spearman of estimate vs "
                f"exact margin change on them: {pre.spearman_on_candidates:.2f})")
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
    ]
    if not v.confirmed:
        lines += ["No improvement is claimed: the held-out data did not confirm the discovery gain at "
                  f"alpha={v.alpha}.", ""]
    controls = result.control_tasks
    lines += ["## Finalists (chosen on discovery; held-out shown, never used to choose)", "",
              "| rank | role | heads | discovery gain | held-out before | held-out after | diff | 95% CI | p | "
              "p (Holm) |" + "".join(f" {c.name} |" for c in controls),
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
    lines += ["## Settings", "", "```", settings, "```", "", f"Timings (s): {result.timings}", "",
              "![single-head screen](screen.png)", ""]
    return "\n".join(lines)


def save_heatmap(result: FindResult, path: Path) -> None:
    """Layer x head heatmap of single-head discovery gain; finalists' heads outlined, the primary's starred."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    layers, heads = result.model.layers, result.model.heads
    grid = np.full((layers, heads), np.nan)  # heads not screened exactly stay blank
    for row in result.screen:
        head = Head.parse(row.head)
        grid[head.layer, head.head] = row.paired.gain
    limit = max(1.0, float(np.nanmax(np.abs(grid))))
    fig, ax = plt.subplots(figsize=(max(4.0, heads * 0.55 + 2), max(3.0, layers * 0.28 + 1.5)))
    cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="#d0d0d0")  # grey: heads a pre-screen passed over
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-limit, vmax=limit, aspect="auto", origin="upper")
    fig.colorbar(image, ax=ax, label="discovery gain (rescued - damaged)")
    for name in {name for f in result.finalists for name in f.heads}:
        h = Head.parse(name)
        ax.add_patch(plt.Rectangle((h.head - 0.5, h.layer - 0.5), 1, 1, fill=False, edgecolor="black", lw=1.2))
    for h in result.primary:
        ax.plot(h.head, h.layer, marker="*", color="gold", markersize=12, markeredgecolor="black")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(heads))
    ax.set_yticks(range(0, layers, max(1, layers // 15)))
    title = f"{result.model.name} on {result.task.name}: single-head ablation"
    if result.prescreen:
        title += f"\n(grey: not screened exactly; {result.prescreen.method} pre-screen)"
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save_control_tradeoff(result: FindResult, path: Path) -> None:
    """Each finalist's held-out change on the task (x) against its change on every control task (y)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    for index, control in enumerate(result.control_tasks):
        points = [(f.rank, f.heldout.difference, f.controls[index]) for f in result.finalists]
        accuracy = points[0][2].metric == "accuracy"
        ys = [100 * c.difference if accuracy else -c.difference for _, _, c in points]
        xs = [100 * x for _, x, _ in points]
        label = f"{control.name} ({'accuracy, points' if accuracy else '-mean NLL'})"
        ax.scatter(xs, ys, label=label, marker="os^Dv"[index % 5])
        for (rank, _, _), x, y in zip(points, xs, ys):
            ax.annotate(str(rank), (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
    ax.axhline(0, color="grey", lw=0.6)
    ax.axvline(0, color="grey", lw=0.6)
    ax.set_xlabel(f"held-out change on {result.task.name} (accuracy points)")
    ax.set_ylabel("change on the control (higher is better)")
    ax.set_title("finalists: the gain and what it costs elsewhere (labels: rank)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(result: FindResult, folder: Path) -> None:
    """result.json, report.md, screen.png (controls.png with controls; tradeoff.png for compress), written to
    a staging folder and moved into ``folder``."""
    from headprune.io import atomic_folder
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
    """``NON-INFERIOR within 0.5 points: held-out accuracy 80.0% -> 79.5% (-0.5%, 95% CI [...] > -0.5%...)``."""
    margin = 100 * v.margin
    if v.removed == 0:
        outcome = "nothing to test (no head could go within the budget)"
    else:
        outcome = (f"NON-INFERIOR within {margin:.3g} points" if v.accepted
                   else f"not shown non-inferior within {margin:.3g} points")
    relation = ">" if v.ci95[0] > -v.margin else "<="
    return (f"{outcome}: held-out accuracy {v.accuracy_before:.1%} -> {v.accuracy_after:.1%} ({v.difference:+.1%}, "
            f"95% CI [{v.ci95[0]:+.1%}, {v.ci95[1]:+.1%}], lower end {relation} -{margin:.3g} points; n={v.n}, "
            f"rescued {v.rescued}, damaged {v.damaged})")


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _search_note(c: Compression) -> str:
    """How the set was grown and what that cost: ``beam search of width 4: 31 distinct sets evaluated``."""
    how = f"beam search of width {c.beam_width}" if c.search == "beam" else "galloping greedy search"
    cost = f"{c.searched} distinct sets evaluated" if c.searched is not None else f"{len(c.curve)} sets evaluated"
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
        f"{len(c.rejected)} {c.prefer} rejected ({', '.join(c.rejected) or 'none'}).",
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
        f"The test: on the {v.n} held-out examples (never used to choose), the paired difference per example is "
        "correct after removal minus correct before (-1, 0 or +1). Its mean has a percentile bootstrap 95% "
        "confidence interval (10,000 resamples of examples, pairs kept together). The set is accepted as "
        f"non-inferior when the interval's lower end is above -{c.max_drop:g} points, a one-sided test at the "
        "2.5% level; otherwise no claim is made.", "",
    ]
    finalist = result.finalists[0]
    if finalist.heldout.confirmed:
        lines += [f"The removal also improves held-out accuracy significantly (exact McNemar p = "
                  f"{finalist.heldout.p_value:.3g}).", ""]
    else:
        lines += ["No improvement is claimed (this objective does not look for one).", ""]
    for task, effect in zip(result.control_tasks, finalist.controls):
        lines += [f"Control `{task.name}` (n={effect.n}): {control_text(effect)} (95% CI), the cost of removing "
                  "the same heads on a second task.", ""]
    lines += ["## Trade-off explored on discovery", "",
              f"{len(within)} of {len(c.curve)} evaluated sets stayed within the budget; the largest has "
              f"{max((p.removed for p in within), default=0)} heads.", "",
              "| heads removed | discovery accuracy | within budget | taken |", "|---|---|---|---|"]
    lines += [f"| {p.removed} | {p.accuracy:.1%} | {'yes' if p.within else 'no'} | {'yes' if p.accepted else ''} |"
              for p in c.curve]
    lines += [""] + examples_section(result)[:-1]  # generate tasks: what the model wrote, before and after
    settings = "\n".join(f"{k}: {val}" for k, val in vars(result.settings).items())
    lines += ["", "![heads removed against discovery accuracy](tradeoff.png)", "",
              "## Settings", "", "```", settings, "```", "", f"Timings (s): {result.timings}", "",
              "![single-head screen](screen.png)", ""]
    return "\n".join(lines)


def save_tradeoff(result: FindResult, path: Path) -> None:
    """Heads removed against discovery accuracy for every set the compress search evaluated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = result.compression
    assert c is not None
    intact = result.baseline.discovery.accuracy
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for within, colour, label in ((True, "tab:blue", "within budget"), (False, "tab:red", "over budget")):
        points = [p for p in c.curve if p.within == within]
        ax.scatter([p.removed for p in points], [100 * p.accuracy for p in points], color=colour, s=18, label=label)
    path_points = sorted((p.removed, 100 * p.accuracy) for p in c.curve if p.accepted)
    ax.plot([0] + [x for x, _ in path_points], [100 * intact] + [y for _, y in path_points], color="tab:blue",
            lw=1, alpha=0.6, label="sets taken")
    ax.axhline(100 * intact, color="grey", lw=0.8, ls=":", label="intact")
    ax.axhline(100 * intact - c.max_drop, color="black", lw=0.8, ls="--", label=f"budget (-{c.max_drop:g} points)")
    ax.set_xlabel("heads removed")
    ax.set_ylabel("discovery accuracy (%)")
    ax.set_title(f"{result.model.name} on {result.task.name}: compress by {c.prefer}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
