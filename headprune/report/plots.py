"""The figures of a find run: the single-head screen (``screen.png``), the finalists' trade-off against the
control tasks (``controls.png``) and the compress search's curve (``tradeoff.png``). Matplotlib is imported
inside each function (Agg backend), so importing this module costs nothing. The data each figure draws is
computed by a function of its own (``screen_grids``, ``control_series``), which the tests read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from headprune.heads import Head
from headprune.search.find_result import FindResult

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.figure import Figure


def _pyplot():  # noqa: ANN202
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@dataclass(frozen=True)
class ScreenGrids:
    """What ``screen.png`` draws, layer x head: the exact single-head discovery gain (NaN where a pre-screen
    passed a head over) and the pre-screen's estimate of every head it scored, in its own unit."""

    exact: np.ndarray  # (layers, heads)
    estimate: np.ndarray | None  # (layers, heads); None without a pre-screen
    estimate_label: str = ""
    estimate_floor: float = 1.0  # the colour scale's least half-range (1 example for gains)


def screen_grids(result: FindResult) -> ScreenGrids:
    """The exact gains, and the pre-screen's estimates: attribution's first-order mean margin change, or the
    halving gain on the share of discovery a head was last scored on, scaled to all of discovery (so it reads
    in the exact panel's unit)."""
    import numpy as np

    shape = (result.model.layers, result.model.heads)
    exact = np.full(shape, np.nan)
    for row in result.screen:
        head = Head.parse(row.head)
        exact[head.layer, head.head] = row.paired.gain
    pre = result.prescreen
    if pre is None:
        return ScreenGrids(exact, None)
    estimate = np.full(shape, np.nan)
    if pre.estimates:
        values = pre.estimates
        label, floor = "attribution estimate: mean margin change\nif removed alone (first order)", 1e-6
    else:
        n = result.split.discovery
        values = {name: r.paired.gain * n / max(1, r.paired.n) for name, r in (pre.rounds or {}).items()}
        label, floor = "halving estimate: gain on its last share\nof discovery, scaled to all of it", 1.0
    for name, value in values.items():
        head = Head.parse(name)
        estimate[head.layer, head.head] = value
    return ScreenGrids(exact, estimate, label, floor)


def _heat_panel(ax, grid: np.ndarray, label: str, fig, *, floor: float) -> None:  # noqa: ANN001
    """One layer x head panel on a symmetric red-blue scale of at least +-``floor``."""
    import matplotlib
    import numpy as np

    limit = floor if np.all(np.isnan(grid)) else max(floor, float(np.nanmax(np.abs(grid))))
    cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="#d0d0d0")  # grey: nothing measured here
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-limit, vmax=limit, aspect="auto", origin="upper")
    fig.colorbar(image, ax=ax, label=label)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(grid.shape[1]))
    ax.set_yticks(range(0, grid.shape[0], max(1, grid.shape[0] // 15)))


def screen_figure(result: FindResult) -> Figure:
    """Layer x head heatmap of single-head discovery gain, finalists' heads outlined, the primary's starred;
    with a pre-screen, a second panel shows its estimate of every head, hatched where it is all there is."""
    import numpy as np

    plt = _pyplot()
    grids = screen_grids(result)
    layers, heads = grids.exact.shape
    panels = 1 if grids.estimate is None else 2
    width = max(4.8, heads * 0.55 + 2.5)
    fig, axes = plt.subplots(1, panels, figsize=(width * panels, max(3.0, layers * 0.28 + 1.5)), squeeze=False)
    ax = axes[0, 0]
    _heat_panel(ax, grids.exact, "discovery gain (rescued - damaged)", fig, floor=1.0)
    for name in {name for f in result.finalists for name in f.heads}:
        h = Head.parse(name)
        ax.add_patch(plt.Rectangle((h.head - 0.5, h.layer - 0.5), 1, 1, fill=False, edgecolor="black", lw=1.2))
    for h in result.primary:
        ax.plot(h.head, h.layer, marker="*", color="gold", markersize=12, markeredgecolor="black")
    title = f"{result.model.name} on {result.task.name}: single-head ablation"
    if grids.estimate is not None:
        title += "\n(grey: not screened exactly)"
        est = axes[0, 1]
        _heat_panel(est, grids.estimate, grids.estimate_label, fig, floor=grids.estimate_floor)
        for layer, head in zip(*np.nonzero(np.isnan(grids.exact) & ~np.isnan(grids.estimate))):
            est.add_patch(plt.Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, hatch="///", lw=0,
                                        edgecolor="0.3", label="_estimate only"))
        est.set_title(f"ESTIMATE: {result.prescreen.method} pre-screen, all {layers * heads} heads\n"
                      "(hatched: estimated only, not screened exactly)", fontsize=8)
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    return fig


def _save(fig, path: Path) -> None:  # noqa: ANN001 - a matplotlib Figure
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)


def save_heatmap(result: FindResult, path: Path) -> None:
    """``screen.png``: :func:`screen_figure`, saved."""
    _save(screen_figure(result), path)


@dataclass(frozen=True)
class TradeoffPoint:
    """One finalist on ``controls.png``: held-out change on the task (x, accuracy points) and on a control
    (y, higher is better), each with its interval as (low, high): the verdict's interval for x, the control's
    (simultaneous over the controls) for y."""

    rank: int
    x: float
    x_ci: tuple[float, float]
    y: float
    y_ci: tuple[float, float]


def control_series(result: FindResult) -> list[tuple[str, list[TradeoffPoint]]]:
    """Per control task, its label and every finalist's point. Accuracy in points; a text task's mean NLL
    change is negated (so that up is better for both), its CI with it."""
    series = []
    for index, control in enumerate(result.control_tasks):
        points = []
        accuracy = result.finalists[0].controls[index].metric == "accuracy"
        for f in result.finalists:
            c, v = f.controls[index], f.heldout
            low, high = c.interval
            y, y_ci = ((100 * c.difference, (100 * low, 100 * high)) if accuracy else (-c.difference, (-high, -low)))
            x_low, x_high = v.interval
            points.append(TradeoffPoint(f.rank, 100 * v.difference, (100 * x_low, 100 * x_high), y, y_ci))
        series.append((f"{control.name} ({'accuracy, points' if accuracy else '-mean NLL'})", points))
    return series


def control_tradeoff_figure(result: FindResult) -> Figure:
    """Each finalist's held-out change on the task (x) against its change on every control task (y), with
    their intervals on both axes: a trade-off is resolved only where a bar stays clear of zero."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    for index, (label, points) in enumerate(control_series(result)):
        xs, ys = [p.x for p in points], [p.y for p in points]
        xerr = [[p.x - p.x_ci[0] for p in points], [p.x_ci[1] - p.x for p in points]]
        yerr = [[p.y - p.y_ci[0] for p in points], [p.y_ci[1] - p.y for p in points]]
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt="os^Dv"[index % 5], capsize=3, elinewidth=0.9,
                    alpha=0.85, label=label)
        for p in points:
            ax.annotate(str(p.rank), (p.x, p.y), textcoords="offset points", xytext=(4, 3), fontsize=7)
    ax.axhline(0, color="grey", lw=0.6)
    ax.axvline(0, color="grey", lw=0.6)
    ax.set_xlabel(f"held-out change on {result.task.name} (accuracy points)")
    ax.set_ylabel("change on the control (higher is better)")
    ax.set_title("finalists: the gain and what it costs elsewhere\n(bars: the verdicts' intervals; labels: rank)",
                 fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def save_control_tradeoff(result: FindResult, path: Path) -> None:
    """``controls.png``: :func:`control_tradeoff_figure`, saved."""
    _save(control_tradeoff_figure(result), path)


def front_figure(result: FindResult) -> Figure:
    """Each finalist's held-out change on the task (x) against its change on each guard (y, higher is better), with
    both intervals; the guard's margin dashed; the non-dominated finalists (the front) filled, the others hollow."""
    from headprune.report.guards import front_points

    plt = _pyplot()
    points = front_points(result)
    fig, axes = plt.subplots(1, len(result.guard_tasks), figsize=(5.0 * len(result.guard_tasks), 4.2), squeeze=False)
    for index, (ax, guard) in enumerate(zip(axes[0], result.guard_tasks)):
        accuracy = guard.metric == "accuracy"
        for p in points:
            y, low, high = p.guards[index]
            x, x_low, x_high = p.task
            ax.errorbar([x], [y], xerr=[[x - x_low], [x_high - x]], yerr=[[y - low], [high - y]], fmt="o",
                        capsize=3, elinewidth=0.9, color="tab:blue" if p.front else "0.55",
                        markerfacecolor="tab:blue" if p.front else "white")
            ax.annotate(str(p.rank), (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
        ax.axhline(-100 * guard.margin if accuracy else -guard.margin, color="black", lw=0.8, ls="--",
                   label=f"margin ({'-' if accuracy else 'NLL +'}{100 * guard.margin if accuracy else guard.margin:g})")
        ax.axhline(0, color="grey", lw=0.6)
        ax.axvline(0, color="grey", lw=0.6)
        ax.set_xlabel(f"held-out change on {result.task.name} (accuracy points)")
        ax.set_ylabel(f"{guard.task.name}: " + ("accuracy change, points" if accuracy else "minus the NLL change"))
        ax.set_title("the front: filled = no finalist better on every axis\n(bars: intervals; labels: rank)", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def save_front(result: FindResult, path: Path) -> None:
    """``front.png``: :func:`front_figure`, saved."""
    _save(front_figure(result), path)


def save_tradeoff(result: FindResult, path: Path) -> None:
    """Heads removed against discovery accuracy for every set the compress search evaluated."""
    plt = _pyplot()
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
    _save(fig, path)
