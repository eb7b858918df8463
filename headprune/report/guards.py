"""The guards of a find run for people: their part of the verdict line, report.md's section (the claim, each guard's
test, the sets the search checked, the front of every finalist) and the front's points (``plots`` draws them)."""

from __future__ import annotations

from dataclasses import dataclass

from headprune.report.text import interval_text, level_text
from headprune.search.find_result import FindResult
from headprune.search.guards import GUARD_TRIES, GuardEffect, non_dominated


def estimate_text(effect: GuardEffect) -> str:
    """``-1.5%`` for an accuracy guard, ``NLL +0.0123`` for a text guard."""
    return f"{effect.difference:+.1%}" if effect.metric == "accuracy" else f"NLL {effect.difference:+.4f}"


def change_text(effect: GuardEffect) -> str:
    """The estimate and its interval: ``-1.5% [-4.0%, +1.0%]``, ``NLL +0.0123 [+0.0050, +0.0196]``."""
    fmt = "+.1%" if effect.metric == "accuracy" else "+.4f"
    return f"{estimate_text(effect)} {interval_text(effect.interval, fmt)}"


def margin_text(effect: GuardEffect) -> str:
    """The bound the change must stay within: ``-5 points`` or ``NLL +0.05``."""
    return f"-{100 * effect.margin:g} points" if effect.metric == "accuracy" else f"NLL +{effect.margin:g}"


def test_text(effect: GuardEffect) -> str:
    """The guard's test and its level, as the verdict states it."""
    return f"{effect.test}, one-sided at {effect.alpha / effect.family / 2:g}, n={effect.n}"


def guard_clause(effect: GuardEffect) -> str:
    """One guard of the primary set, as the verdict line says it."""
    state = "held" if effect.held else "NOT shown to hold"
    return f"guard {effect.task} {state}: {change_text(effect)} against {margin_text(effect)} ({test_text(effect)})"


def guards_line(result: FindResult) -> str:
    """What the verdict line adds for a run with guards (empty without): each guard of the primary set, and when
    no candidate kept them on discovery, that and the best trade."""
    guarding = result.guarding
    if guarding is None:
        return ""
    parts = [guard_clause(effect) for effect in result.finalists[0].guards]
    if not guarding.kept:
        trade = next((t for t in guarding.tried if t.heads == guarding.best_trade), None)
        worst = "" if trade is None else " (discovery: " + ", ".join(
            f"{e.task} {estimate_text(e)} against {margin_text(e)}" for e in trade.effects) + ")"
        parts.insert(0, f"no candidate set keeps the guards on discovery ({len(guarding.tried)} sets checked); the "
                        f"best trade found is {','.join(guarding.best_trade)}{worst}; nothing is confirmed")
    else:
        broke = sum(not t.kept for t in guarding.tried if t.candidate != "culprit")
        if broke:
            parts.append(f"{broke} better-ranked set{'s' if broke > 1 else ''} broke the guards on discovery and "
                         f"{'were' if broke > 1 else 'was'} passed over")
        stop = result.selection.guard_stop if result.selection is not None else ()
        if stop:
            parts.append(f"the next confirmed set {','.join(stop)} did not keep the guards on held-out ("
                         + ", ".join(f"{e.task} {change_text(e)}" for e in result.selection.guard_stop_effects)
                         + "): the guards' fixed sequence over the confirmed sets stopped there")
        if result.verdict.confirmed and not result.guards_held:
            parts.append("the claim is not confirmed: a guard did not hold")
    return "; " + "; ".join(parts)


@dataclass(frozen=True)
class FrontPoint:
    """One finalist on the front: the held-out change on the task and on each guard (higher is better: accuracy
    points, or minus the NLL change), each with its interval, and whether no other finalist dominates it."""

    rank: int
    heads: tuple[str, ...]
    task: tuple[float, float, float]  # change, low, high (points)
    guards: tuple[tuple[float, float, float], ...]
    front: bool


def _better(effect: GuardEffect) -> tuple[float, float, float]:
    low, high = effect.interval
    if effect.metric == "accuracy":
        return 100 * effect.difference, 100 * low, 100 * high
    return -effect.difference, -high, -low


def front_points(result: FindResult) -> list[FrontPoint]:
    """Every finalist's point, the non-dominated ones marked (on the estimates: the front is exploratory)."""
    rows = []
    for f in result.finalists:
        low, high = f.heldout.interval
        rows.append((f, (100 * f.heldout.difference, 100 * low, 100 * high), tuple(_better(g) for g in f.guards)))
    marks = non_dominated([(task[0], *(g[0] for g in guards)) for _, task, guards in rows])
    return [FrontPoint(f.rank, f.heads, task, guards, mark) for (f, task, guards), mark in zip(rows, marks)]


def guards_section(result: FindResult) -> list[str]:
    """report.md's section on the guards (empty without guards)."""
    guarding = result.guarding
    if guarding is None or not result.guard_tasks:
        return []
    primary = result.finalists[0]
    lines = ["## Guards", "",
             "What must not break. Each guard's examples were split: a third read by the search, which proposes a set "
             f"only once it keeps every guard (its discovery change, judged at the held-out size, passes the held-out "
             f"test; the best {GUARD_TRIES} sets are checked in the search's order), the rest held out for the verdict.",
             "",
             "The claim is that the task improves **and** every guard is non-inferior at its margin: an "
             "intersection-union test, false whenever one part is false, and then made only if that part's own test "
             "rejected wrongly. Each part is therefore tested at the full level, with no split of alpha, and the "
             "guards' held-out examples were read only after the primary set was fixed.", ""]
    for task, effect, searched in zip(result.guard_tasks, primary.guards, guarding.discovery):
        kept = "**held**" if effect.held else "**not shown to hold**"
        lines.append(f"- `{task.task.name}` ({task.metric}, margin {margin_text(effect)}; {searched} examples for the "
                     f"search, {effect.n} held out): {change_text(effect)} ({level_text(effect.level)} interval), "
                     f"{kept} ({test_text(effect)}).")
    if not guarding.kept:
        lines += ["", f"No candidate set kept the guards on discovery; the best trade found is "
                      f"`{','.join(guarding.best_trade)}`, shipped unconfirmed."]
    lines += ["", "Sets checked on the guards' discovery examples, in order:", "",
              "| for | heads | " + " | ".join(t.task.name for t in result.guard_tasks) + " | keeps all |",
              "|---|---|" + "---|" * len(result.guard_tasks) + "---|"]
    for tried in guarding.tried:
        lines.append(f"| {tried.candidate} | `{','.join(tried.heads)}` | "
                     + " | ".join(estimate_text(e) for e in tried.effects)
                     + f" | {'yes' if tried.kept else 'no'} |")
    lines += ["", "### The front", "",
              "Every finalist's held-out change on the task and on each guard, with intervals (the primary set's at "
              "its own level; the others' exploratory, simultaneous over the finalists). **Bold**: no other finalist "
              "is at least as good on every axis and better on one (by the estimates). Another finalist can be "
              "exported with `headprune export MODEL --heads result.json --pick RANK --allow-unconfirmed`; its figures "
              "are exploratory: it was chosen after the held-out look.", "",
              f"| rank | heads | {result.task.name} |" + "".join(f" {t.task.name} |" for t in result.guard_tasks),
              "|---|---|---|" + "---|" * len(result.guard_tasks)]
    for point, finalist in zip(front_points(result), result.finalists):
        heads = f"`{','.join(point.heads)}`"
        lines.append(f"| {point.rank} | {f'**{heads}**' if point.front else heads} | "
                     f"{finalist.heldout.difference:+.1%} {interval_text(finalist.heldout.interval)} |"
                     + "".join(f" {change_text(g)} |" for g in finalist.guards))
    lines += ["", "![the front: task gain against each guard's change](front.png)", ""]
    return lines


__all__ = ["FrontPoint", "change_text", "estimate_text", "front_points", "guard_clause", "guards_line", "guards_section",
           "margin_text", "test_text"]
