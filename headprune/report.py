"""Rendering a FindResult for people: the one-line verdict, ``report.md`` and the ``screen.png`` heatmap."""

from __future__ import annotations

from pathlib import Path

from headprune.heads import Head
from headprune.search.result import FindResult


def verdict_line(result: FindResult) -> str:
    """The terminal's last line: the primary set and its held-out verdict."""
    return f"primary set {','.join(result.verdict['heads'])}: {result.verdict['sentence']}"


def _prescreen_note(result: FindResult) -> str:
    pre = result.prescreen
    total = result.model["layers"] * result.model["heads"]
    if not pre:
        return ""
    if pre["method"] == "attribution":
        return (f" (the best by a one-pass attribution estimate of all {total} heads; Spearman of estimate vs "
                f"exact margin change on them: {pre['spearman_on_candidates']:.2f})")
    return f" (the survivors of successive halving over all {total} heads on growing shares of discovery)"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def render_markdown(result: FindResult) -> str:
    """A short report: what was found, the verdict, the finalists table and the settings."""
    v = result.verdict
    base = result.baseline
    lines = [
        f"# headprune find: {result.model['name']} on {result.task['name']}",
        "",
        f"- Model: `{result.model['name']}` ({result.model['family']}, {result.model['layers']} layers x "
        f"{result.model['heads']} heads), weights `{result.model['weight_hash'][:23]}...`",
        f"- Task: `{result.task['name']}` ({result.task['kind']}), discovery n={result.split['discovery']}, "
        f"held-out n={result.split['heldout']}, split seed {result.split['seed']}",
        f"- Intact model: discovery {_pct(base['discovery'].get('accuracy'))}, "
        f"held-out {_pct(base['heldout'].get('accuracy'))}",
        f"- Screened {len(result.screen)} heads exactly"
        + _prescreen_note(result)
        + f", {len(result.nominees)} nominees, {len(result.sets)} sets evaluated "
        f"on discovery; {len(result.finalists)} finalists scored on held-out.",
        "",
        "## Verdict",
        "",
        f"**Primary set (discovery rank 1): `{','.join(v['heads'])}`** (discovery gain {v['discovery_gain']:+d}).",
        "",
        v["sentence"] + ".",
        "",
    ]
    if not v["confirmed"]:
        lines += ["No improvement is claimed: the held-out data did not confirm the discovery gain at "
                  f"alpha={v['alpha']}.", ""]
    lines += ["## Finalists (chosen on discovery; held-out shown, never used to choose)", "",
              "| rank | heads | discovery gain | held-out before | held-out after | diff | 95% CI | p |"
              + (" control diff |" if result.control_task else ""),
              "|---|---|---|---|---|---|---|---|" + ("---|" if result.control_task else "")]
    for f in result.finalists:
        h = f.heldout
        row = (f"| {f.rank} | `{','.join(f.heads)}` | {f.discovery['gain']:+d} | {_pct(h['accuracy_before'])} | "
               f"{_pct(h['accuracy_after'])} | {h['difference']:+.1%} | [{h['ci95'][0]:+.1%}, {h['ci95'][1]:+.1%}] | "
               f"{h['p_value']:.3g} |")
        if f.control is not None:
            c = f.control
            shown = f"{c['difference']:+.1%}" if c["metric"] == "accuracy" else f"NLL {c['difference']:+.4f}"
            row += f" {shown} [{c['ci95'][0]:+.3g}, {c['ci95'][1]:+.3g}] |"
        lines.append(row)
    if result.control_task:
        lines += ["", f"Control task `{result.control_task['name']}` (n={result.control_task['n']}): how the same "
                  "sets move a second capability. Removing heads that help one task often hurts another."]
    lines += ["", "## Settings", "", "```", *(f"{k}: {val}" for k, val in result.settings.items()), "```", "",
              f"Timings (s): {result.timings}", "", "![single-head screen](screen.png)", ""]
    return "\n".join(lines)


def save_heatmap(result: FindResult, path: Path) -> None:
    """Layer x head heatmap of single-head discovery gain; finalists' heads outlined, the primary's starred."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    layers, heads = result.model["layers"], result.model["heads"]
    grid = np.full((layers, heads), np.nan)  # heads not screened exactly stay blank
    for row in result.screen:
        head = Head.parse(row["head"])
        grid[head.layer, head.head] = row["gain"]
    limit = max(1.0, float(np.nanmax(np.abs(grid))))
    fig, ax = plt.subplots(figsize=(max(4.0, heads * 0.55 + 2), max(3.0, layers * 0.28 + 1.5)))
    cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="#d0d0d0")  # grey: heads a pre-screen passed over
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-limit, vmax=limit, aspect="auto", origin="upper")
    fig.colorbar(image, ax=ax, label="discovery gain (rescued - damaged)")
    in_finalists = {name for f in result.finalists for name in f.heads}
    for name in in_finalists:
        h = Head.parse(name)
        ax.add_patch(plt.Rectangle((h.head - 0.5, h.layer - 0.5), 1, 1, fill=False, edgecolor="black", lw=1.2))
    for name in result.verdict["heads"]:
        h = Head.parse(name)
        ax.plot(h.head, h.layer, marker="*", color="gold", markersize=12, markeredgecolor="black")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(heads))
    ax.set_yticks(range(0, layers, max(1, layers // 15)))
    title = f"{result.model['name']} on {result.task['name']}: single-head ablation"
    if result.prescreen:
        title += f"\n(grey: not screened exactly; {result.prescreen['method']} pre-screen)"
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(result: FindResult, folder: Path) -> None:
    """result.json, report.md and screen.png, written to a staging folder and moved into ``folder``."""
    from headprune.io import atomic_folder, atomic_write_json

    with atomic_folder(folder) as staging:
        atomic_write_json(staging / "result.json", result.to_dict())
        (staging / "report.md").write_text(render_markdown(result), encoding="utf-8")
        save_heatmap(result, staging / "screen.png")
