"""Rendering a FindResult for people: the one-line verdict, ``report.md`` and the ``screen.png`` heatmap."""

from __future__ import annotations

from pathlib import Path

from headprune.heads import Head
from headprune.search.result import ControlEffect, FindResult
from headprune.search.stats import Verdict


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
    settings = "\n".join(f"{k}: {val}" for k, val in vars(result.settings).items())
    lines += ["", "## Settings", "", "```", settings, "```", "", f"Timings (s): {result.timings}", "",
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


def write_outputs(result: FindResult, folder: Path) -> None:
    """result.json, report.md and screen.png, written to a staging folder and moved into ``folder``."""
    from headprune.io import atomic_folder
    from headprune.search.result import RESULT_NAME

    with atomic_folder(folder) as staging:
        result.save(staging / RESULT_NAME)
        (staging / "report.md").write_text(render_markdown(result), encoding="utf-8")
        save_heatmap(result, staging / "screen.png")
