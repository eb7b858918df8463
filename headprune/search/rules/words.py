"""Words and tables the selection rules share: the candidates discovery fixed, a procedure's steps, the single head's
test and the membership tests, as ``report.md`` and the terminal show them (each rule says what they decided)."""

from __future__ import annotations

from collections.abc import Sequence

from headprune.search.membership import FIRST_SHARE
from headprune.search.selection import Selection
from headprune.search.stats import Step


def measure_words(sel: Selection) -> str:
    """What b and c count."""
    return "answers" if sel.measure == "accuracy" else "margins (up / down beyond float tolerance)"


def candidates(sel: Selection) -> str:
    """The candidates discovery fixed before any held-out number was read."""
    proposal = f"`{','.join(sel.proposal)}`" if sel.proposal else "none (no set of several heads was evaluated)"
    return (f"Fixed on discovery before any held-out number was read: the **proposal**, the best set of several heads "
            f"on the search half ({sel.search} examples), {proposal}; the **single**, the best single head on all "
            f"of discovery, `{sel.single}`.")


def against(step: Step) -> str:
    """The set a step's tested set is compared with (empty: the intact model)."""
    return ",".join(h for h in step.prefix if h not in step.added.split(","))


def step_words(step: Step) -> str:
    """One step as the terminal names it: what it adds to what, and its p."""
    base = against(step)
    return f"{step.added} {'added to ' + base if base else 'against the original'} p={step.p_value:.2g}"


def steps_table(steps: Sequence[Step]) -> list[str]:
    """Each step tested, in order: the set, the set it is tested against, its counts, p, level and outcome."""
    lines = ["| step | set | against | check b | check c | held-out b | held-out c | p | level | rejects |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for i, t in enumerate(steps, start=1):
        base = against(t)
        lines.append(f"| {i} | `{','.join(t.prefix)}` | {f'`{base}`' if base else 'intact'} | "
                     f"{t.check_rescued} | {t.check_damaged} | {t.heldout_rescued} | {t.heldout_damaged} | "
                     f"{t.p_value:.3g} | {t.level:.3g} | {'yes' if t.rejected else 'no'} |")
    return lines


def tests_table(sel: Selection) -> list[str]:
    """The held-out tests of candidates (the single head's; in files of schema 3 and 4 also the kept set's)."""
    lines = ["| candidate | heads | share of alpha | part | level | rescued | damaged | p | rejects |",
             "|---|---|---|---|---|---|---|---|---|"]
    return lines + [f"| {t.candidate} | `{','.join(t.heads)}` | {t.share:g} | {t.part:.3g} | {t.level:.3g} | "
                    f"{t.rescued} | {t.damaged} | {t.p_value:.3g} | {'yes' if t.rejected else 'no'} |"
                    for t in sel.tests]


def membership(sel: Selection, title: str) -> list[str]:
    """The membership tests of the proposal's heads (``headprune.search.membership``) under ``title``, with the kept
    set; empty without them."""
    if not sel.contributions:
        return []
    lines = [f"{title} Each head against the proposal without it, on {measure_words(sel)}, on the check half "
             f"({sel.check}) and held-out ({sel.heldout}) together, which did not propose it: b = better with the head "
             f"removed, c = worse, p the one-sided exact binomial test of b against c. The heads are tested in the "
             f"order shown (fixed on the search half): the first at {FIRST_SHARE:.0%} of alpha={sel.alpha:g}, the "
             "others at equal shares of the rest, each passing its level on to the next when it earns its place (a "
             f"fallback procedure: a head with no effect stays with probability at most {sel.alpha:g}).", "",
             "| order | head | check b | check c | held-out b | held-out c | p | level | stays |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {c.rank} | `{c.head}` | {c.check_rescued} | {c.check_damaged} | {c.heldout_rescued} | "
              f"{c.heldout_damaged} | {c.p_value:.3g} | {c.level:.3g} | {'yes' if c.earned else 'no'} |"
              for c in sel.contributions]
    return lines + ["", f"Kept: `{','.join(sel.kept) or 'none'}`.", ""]


def membership_shown(sel: Selection) -> list[str]:
    """The membership tests where they chose the set shown (nothing confirmed), else one line saying they are a
    diagnostic: a rule whose claim is its steps decides nothing by them."""
    if not sel.contributions:
        return []
    if sel.chosen == "none" and len(sel.kept) >= 2:
        return membership(sel, "**The set shown, since nothing is confirmed** (not a claim): the proposal's heads "
                               "that earn their place in it.")
    return ["The membership tests of the proposal's heads (each against the proposal without it) decided nothing "
            "here; `result.json` keeps them as a diagnostic (`selection.contributions`).", ""]


__all__ = ["against", "candidates", "measure_words", "membership", "membership_shown", "step_words", "steps_table",
           "tests_table"]
