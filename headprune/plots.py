"""The figures of a find run: the single-head screen (``screen.png``), the finalists' trade-off against the
control tasks (``controls.png``) and the compress search's curve (``tradeoff.png``). Matplotlib is imported
inside each function (Agg backend), so importing this module costs nothing."""

from __future__ import annotations

from pathlib import Path

from headprune.heads import Head
from headprune.search.result import FindResult


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
