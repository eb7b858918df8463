"""Figures and the comparison report of the experiment, rendered from the per-seed records and histories."""

from __future__ import annotations

import json
from pathlib import Path

from headprune.synthetic.data import TASKS


def _histories(folders: list[Path]) -> list[dict]:
    return [json.loads((folder / "history.json").read_text(encoding="utf-8")) for folder in folders]


def plot_training(folders: list[Path], records: list[dict], out: Path) -> tuple[Path, Path]:
    """``losses.png`` (both tasks' losses against the joint optimum) and ``heads.png`` (per-head scores).

    Returns the two paths. One panel per seed; in ``heads.png`` solid lines are conflict scores, dotted
    lines last-symbol scores, and the heads the analysis named are drawn thick.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    histories = _histories(folders)
    paths = (out / "losses.png", out / "heads.png")
    width = len(histories)
    fig_loss, loss_axes = plt.subplots(1, width, figsize=(3.2 * width, 2.8), squeeze=False, sharey=True)
    fig_heads, head_axes = plt.subplots(1, width, figsize=(3.2 * width, 2.8), squeeze=False, sharey=True)
    for k, (history, record) in enumerate(zip(histories, records, strict=True)):
        steps = [s["step"] for s in history["history"]]
        ax = loss_axes[0][k]
        for task, colour in (("A", "tab:blue"), ("B", "tab:orange")):
            ax.plot(steps, [s[f"loss_{task.lower()}"] for s in history["history"]], color=colour,
                    label=f"{task} ({TASKS[task]})")
            ax.axhline(record["optimum"][f"loss_{task.lower()}"], color=colour, linestyle="--", linewidth=0.8)
        ax.set_title(f"seed {record['seed']}")
        ax.set_xlabel("step")
        ax.set_ylim(0, 0.8)
        ax = head_axes[0][k]
        heads = len(history["history"][0]["conflict"])
        for h in range(heads):
            named = h in record["conflict_heads"]
            line, = ax.plot(steps, [s["conflict"][h] for s in history["history"]], linewidth=2.2 if named else 0.9,
                            label=f"H{h}" + (" (named)" if named else ""))
            ax.plot(steps, [s["last"][h] for s in history["history"]], color=line.get_color(), linestyle=":",
                    linewidth=0.9)
        ax.axhline(0, color="grey", linewidth=0.5)
        ax.set_title(f"seed {record['seed']}: found {','.join(f'H{h}' for h in record['found_heads'])}")
        ax.set_xlabel("step")
        ax.legend(fontsize=6)
    loss_axes[0][0].set_ylabel("loss (nats); dashed: optimum")
    loss_axes[0][0].legend(fontsize=7)
    head_axes[0][0].set_ylabel("conflict (solid), last (dotted)")
    for fig, path in ((fig_loss, paths[0]), (fig_heads, paths[1])):
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return paths


def _pct(value: float) -> str:
    return f"{value:+.1%}"


def render_report(records: list[dict], figures: tuple[Path, Path]) -> str:
    """Markdown: per seed, what training reached, which heads the analysis named and which find returned."""
    lines = [
        "# headprune theory experiment: conflicting features concentrate in heads, and find recovers them",
        "",
        "Task A (copy-first) and task B (not-last) share one input format with no task marker; the first symbol "
        "answers A and is a shortcut that is wrong on B's contradicting examples (see `headprune.synthetic`). A "
        "one-layer attention-only GPT-2 is trained from small random initialisation by full-batch gradient "
        "descent on the exact joint objective. The analysis names the heads that push contradicting inputs "
        "toward the first symbol (direct logit attribution, no ablation); `find` searches task B with task A as "
        "control, without knowing any of this.",
        "",
        f"Figures: `{figures[0].name}` (losses), `{figures[1].name}` (per-head scores over training).",
        "",
        "| seed | loss A / B (optimum) | acc. A / B | named heads (share) | from step | find's set | contains | "
        "B held-out: before -> after, diff [95% CI], p | A (control): diff [95% CI] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        b, a = r["heldout_b"], r["control_a"]
        lines.append(
            f"| {r['seed']} | {r['loss']['A']:.3f} / {r['loss']['B']:.3f} ({r['optimum']['loss_a']:.3f} / "
            f"{r['optimum']['loss_b']:.3f}) | {r['accuracy']['A']:.1%} / {r['accuracy']['B']:.1%} | "
            f"{', '.join(f'H{h}' for h in r['conflict_heads'])} ({r['conflict_share_top']:.0%} in the first) | "
            f"{r['emergence_step']} | {', '.join(f'H{h}' for h in r['found_heads'])} | "
            f"{'yes' if r['found_contains_named'] else 'NO'} | {b['accuracy_before']:.1%} -> "
            f"{b['accuracy_after']:.1%}, {_pct(b['difference'])} [{_pct(b['interval'][0])}, {_pct(b['interval'][1])}], "
            f"p={b['p_value']:.2g}{' confirmed' if b['confirmed'] else ' NOT confirmed'} | "
            f"{_pct(a['difference'])} [{_pct(a['interval'][0])}, {_pct(a['interval'][1])}] |")
    lines += ["", "Reproduce one seed's find and export with the CLI:", ""]
    lines += [f"    {command}" for command in records[0]["commands"]]
    return "\n".join(lines) + "\n"
