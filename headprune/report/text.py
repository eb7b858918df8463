"""The words and numbers every report shares: levels and intervals, a verdict in one sentence, controls, the
pre-screen's note, stage times. ``markdown`` (improve) and ``compress`` build on them."""

from __future__ import annotations

from headprune.search.effects import ControlEffect
from headprune.search.find_result import FindResult
from headprune.search.rules import rule_confirming
from headprune.search.stats import Verdict


def level_text(level: float) -> str:
    """``95%``, ``99.5%``, ``98.3%``: a confidence level as people write it."""
    return f"{100 * level:.3g}%"


def interval_text(interval: tuple[float, float], fmt: str = "+.1%") -> str:
    return f"[{interval[0]:{fmt}}, {interval[1]:{fmt}}]"


def verdict_sentence(v: Verdict) -> str:
    """``CONFIRMED improvement: held-out accuracy 78.0% -> 81.0% (+3.0%, 95% CI [...], McNemar p=..., ...)``."""
    if v.role == "exploratory":
        outcome, p = "exploratory (not confirmable)", f"Bonferroni-adjusted p={v.adjusted_p:.3g}"
    else:
        outcome = "CONFIRMED improvement" if v.confirmed else "no confirmed improvement"
        p = f"McNemar p={v.p_value:.3g}" + (f" at level {v.size:g}" if v.share != 1 and not v.steps else "")
    rule = rule_confirming(v)
    if v.role != "exploratory" and rule is not None:  # the claim is the rule's steps; the set's own p is beside it
        p = f"{rule.claim(v)}; the set's own {p}"
    gate = "" if v.gate is None else (f"; the proposed set {','.join(v.gate.heads)}: rescued {v.gate.rescued}, "
                                      f"damaged {v.gate.damaged}, p={v.gate.p_value:.3g}")
    # A set chosen by held-out (where the rule's steps stopped, a cut-down set): its estimate reads the data that
    # chose it; its claim holds all the same.
    estimate = " (exploratory estimate: held-out chose these heads)" if v.selected else ""
    adjusted = f" simultaneous over {v.family} {rule.shipped}" if rule is not None and v.family > 1 else ""
    return (f"{outcome}: held-out accuracy {v.accuracy_before:.1%} -> {v.accuracy_after:.1%}{estimate} "
            f"({v.difference:+.1%}, {level_text(v.level)} CI{adjusted} {interval_text(v.interval)}, "
            f"{p}, n={v.n}, rescued {v.rescued}, damaged {v.damaged}{gate})")


def control_text(c: ControlEffect) -> str:
    """``-9.5% [-15.5%, -3.5%]`` for an accuracy, ``NLL +0.0123 [...]`` for a text task."""
    if c.metric == "accuracy":
        return f"{c.difference:+.1%} {interval_text(c.interval)}"
    return f"NLL {c.difference:+.4f} {interval_text(c.interval, '+.4f')}"


def control_level(c: ControlEffect) -> str:
    """How a control's interval was made: its level, its method, and the adjustment over several controls."""
    method = "exact McNemar/score interval" if c.metric == "accuracy" else "paired t interval"
    adjusted = f", simultaneous over {c.family} controls (Bonferroni)" if c.family > 1 else ""
    return f"{level_text(c.level)} {method}{adjusted}"


def prescreen_note(result: FindResult) -> str:
    pre = result.prescreen
    total = result.model.total_heads
    if pre is None:
        return ""
    if pre.method == "attribution":
        rho = pre.spearman_on_candidates
        return (f" (the best by a one-pass attribution estimate of all {total} heads; Spearman of estimate vs "
                f"exact margin change on them: {'undefined' if rho is None else f'{rho:.2f}'})")
    return f" (the survivors of successive halving over all {total} heads on growing shares of discovery)"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


# ------------------------------------------------------------------ stage times

STAGE_LABELS = {
    "setup": "set-up (task, model, journal)",
    "baseline": "baseline and determinism check",
    "prescreen": "pre-screen",
    "screen": "screen (single heads)",
    "joint": "joint search",
    "parsimony": "parsimony (0.2: admission on the check half)",
    "membership": "membership (each head of the proposal, check half and held-out)",
    "reconfirm": "re-confirmation on discovery (--protocol cel)",
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


__all__ = ["STAGE_LABELS", "control_level", "control_text", "interval_text", "level_text", "pct", "prescreen_note",
           "stage_times", "stage_times_line", "stage_times_table", "verdict_sentence"]
