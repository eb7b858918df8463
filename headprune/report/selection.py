"""``report.md``'s account of how the primary set was chosen: the candidates fixed on discovery, each head of the
proposed set tested on the check half and held-out, and the held-out tests (``headprune.search.selection``); for
a file of 0.2, its admission on the check half."""

from __future__ import annotations

from headprune.search.find_result import FindResult
from headprune.search.membership import FIRST_SHARE, SUPPORT_P
from headprune.search.selection import FAVOURED_SHARE, PREFIX_PART


def selection_section(result: FindResult) -> list[str]:
    """The selection of the primary set, or (files of 0.2) the admission of its heads."""
    if result.selection is None:
        return admission_table(result)
    sel = result.selection
    measure = "answers" if sel.measure == "accuracy" else "margins (up / down beyond float tolerance)"
    proposal = f"`{','.join(sel.proposal)}`" if sel.proposal else "none (no set of several heads was evaluated)"
    lines = ["## How the primary set was chosen", "",
             f"Fixed on discovery before any held-out number was read: the **proposal**, the best set of several heads "
             f"on the search half ({sel.search} examples), {proposal}; the **single**, the best single head on all "
             f"of discovery, `{sel.single}`; and which is tested first: the **{sel.favoured}** "
             f"({sel.support} of the proposal's heads help on the check half: drop-one, one-sided p <= {SUPPORT_P:g}), "
             f"with {FAVOURED_SHARE:.0%} of alpha={sel.alpha:g}, the other with the rest.", ""]
    if sel.contributions:
        lines += [f"**Which heads of the proposal stay.** Each head against the proposal without it, on {measure}, on "
                  f"the check half ({sel.check}) and held-out ({sel.heldout}) together, which did not propose it: "
                  f"b = better with the head removed, c = worse, p the one-sided exact binomial test of b against c. "
                  f"The heads are tested in the order shown (fixed on the search half): the first at "
                  f"{FIRST_SHARE:.0%} of alpha={sel.alpha:g}, the others at equal shares of the rest, each passing "
                  "its level on to the next when it earns its place (a fallback procedure: a head with no effect "
                  f"stays with probability at most {sel.alpha:g}).", "",
                  "| order | head | check b | check c | held-out b | held-out c | p | level | stays |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {c.rank} | `{c.head}` | {c.check_rescued} | {c.check_damaged} | {c.heldout_rescued} | "
                  f"{c.heldout_damaged} | {c.p_value:.3g} | {c.level:.3g} | {'yes' if c.earned else 'no'} |"
                  for c in sel.contributions]
        lines += ["", f"Kept: `{','.join(sel.kept) or 'none'}`.", ""]
    lines += ["**The held-out tests**, in order (a fallback procedure: a test that rejects passes its share on to "
              "the next, so the chance of confirming a set that does not improve stays at most alpha): "
              "the exact McNemar test of the single head, and of the proposal's kept set at its part of the "
              "proposal's share (each subset of the proposal of two heads or more has a part fixed on discovery, "
              f"the prefixes of the test order {PREFIX_PART:.0%} of it together, so held-out choosing the kept set "
              "costs the test nothing; a kept set of fewer than two heads is not tested).", "",
              "| candidate | heads | share of alpha | part | level | rescued | damaged | p | rejects |",
              "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {t.candidate} | `{','.join(t.heads)}` | {t.share:g} | {t.part:.3g} | {t.level:.3g} | {t.rescued} | "
              f"{t.damaged} | {t.p_value:.3g} | {'yes' if t.rejected else 'no'} |" for t in sel.tests]
    if sel.kept and tuple(sel.kept) != tuple(sel.proposal):
        lines += ["", "The kept set was cut down from the proposal by the membership tests, which read held-out: "
                  "its held-out change is an exploratory estimate (it reads the examples that chose it and runs "
                  "high); its test and interval account for the choice."]
    chosen = {"proposal": "the proposal's kept heads", "single": "the single head",
              "none": "no candidate passed; the primary set is reported, not confirmed"}[sel.chosen]
    return lines + ["", f"Primary set: {chosen}.", ""]


def admission_table(result: FindResult) -> list[str]:
    """A file of 0.2: the primary set head by head against the set without it on discovery's check half (the test
    that let it stay), and the same drop-one comparison on held-out, exploratory (measured after the verdict)."""
    primary, rule = result.finalists[0], result.parsimony
    if rule is None or not primary.contributions:
        return []
    measure = ("answers" if rule.measure == "accuracy" else "margins (up / down beyond float tolerance)")
    against = "the intact model" if len(primary.heads) == 1 else "the set without it"
    where = ("the check half of discovery, which chose nothing" if rule.check is not None
             else "discovery (the rule of files before 0.2)")
    short = "check-half" if rule.check is not None else "discovery"
    lines = ["## Each head of the primary set", "",
             f"Each head against {against}, on {measure}, on {where} (n={rule.check or result.split.discovery}): "
             f"b = better with the head removed, c = worse; p is the one-sided exact binomial test of b against c, "
             f"Holm-adjusted over the set's heads. A head stays in a set only when b - c >= 1 and its adjusted p <= "
             f"{rule.level:g} ({rule.examined} multi-head sets tested, {rule.dropped} lost a head or were refused, "
             f"{rule.conditions} extra discovery conditions).", "",
             f"| head | {short} b | {short} c | p | p (Holm) | held-out b (exploratory) | held-out c (exploratory) "
             "| held-out p (exploratory) |", "|---|---|---|---|---|---|---|---|"]
    for c in primary.contributions:
        held = ("| n/a | n/a | n/a |" if c.heldout_rescued is None else
                f"| {c.heldout_rescued} | {c.heldout_damaged} | {c.heldout_p:.3g} |")
        lines.append(f"| `{c.head}` | {c.rescued} | {c.damaged} | {c.p_value:.3g} | {c.adjusted_p:.3g} {held}")
    if len(primary.heads) > 1:
        lines += ["", "The held-out columns compare the primary set with the set without each head on held-out "
                  "data after the verdict; they are exploratory and were never used to choose anything."]
    return lines + [""]


__all__ = ["admission_table", "selection_section"]
