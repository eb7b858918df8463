"""``report.md``'s account of how the primary set was chosen: the candidates fixed on discovery, each head of the
proposed set tested on the check half and held-out, and the held-out tests (``headprune.search.selection``); for
a file of 0.2, its admission on the check half."""

from __future__ import annotations

from headprune.search.find_result import FindResult
from headprune.search.membership import FIRST_SHARE
from headprune.search.selection import BRANCH_SHARE, Selection

# Files of schema 3 and 4 (the rule of parts): the favoured candidate's share, the prefixes' part, the support's p.
OLD_FAVOURED_SHARE, OLD_PREFIX_PART, OLD_SUPPORT_P = 0.9, 0.8, 0.3


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
             f"of discovery, `{sel.single}`."]
    if sel.favoured:  # files of schema 3 and 4
        lines[-1] += (f" Tested first: the **{sel.favoured}** ({sel.support} of the proposal's heads help on the "
                      f"check half: drop-one, one-sided p <= {OLD_SUPPORT_P:g}), with {OLD_FAVOURED_SHARE:.0%} of "
                      f"alpha={sel.alpha:g}, the other with the rest.")
    else:
        lines[-1] += (f" Each is a branch with {BRANCH_SHARE:.0%} of alpha={sel.alpha:g}; a branch whose claims are "
                      "all made passes its share on to the other (a fallback: no level is spent twice).")
    lines.append("")
    lines += sequence_table(sel, measure)
    if sel.contributions:
        lines += [f"**Which heads of the proposal stay.** Each head against the proposal without it, on {measure}, on "
                  f"the check half ({sel.check}) and held-out ({sel.heldout}) together, which did not propose it: "
                  f"b = better with the head removed, c = worse, p the one-sided exact binomial test of b against c. "
                  f"The heads are tested in the order shown (fixed on the search half): the first at "
                  f"{FIRST_SHARE:.0%} of alpha={sel.alpha:g}, the others at equal shares of the rest, each passing "
                  "its level on to the next when it earns its place (a fallback procedure: a head with no effect "
                  f"stays with probability at most {sel.alpha:g})."
                  + ("" if sel.favoured else " These tests confirm nothing: where nothing is confirmed, the kept set "
                     "of two heads or more is the primary set shown."), "",
                  "| order | head | check b | check c | held-out b | held-out c | p | level | stays |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {c.rank} | `{c.head}` | {c.check_rescued} | {c.check_damaged} | {c.heldout_rescued} | "
                  f"{c.heldout_damaged} | {c.p_value:.3g} | {c.level:.3g} | {'yes' if c.earned else 'no'} |"
                  for c in sel.contributions]
        lines += ["", f"Kept: `{','.join(sel.kept) or 'none'}`.", ""]
    if sel.favoured:  # files of schema 3 and 4: the kept set tested at its part
        lines += ["**The held-out tests**, in order (a fallback procedure: a test that rejects passes its share on to "
                  "the next, so the chance of confirming a set that does not improve stays at most alpha): "
                  "the exact McNemar test of the single head, and of the proposal's kept set at its part of the "
                  "proposal's share (each subset of the proposal of two heads or more has a part fixed on discovery, "
                  f"the prefixes of the test order {OLD_PREFIX_PART:.0%} of it together, so held-out choosing the kept "
                  "set costs the test nothing; a kept set of fewer than two heads is not tested).", ""]
    else:
        lines += ["**The single head's test**: exact McNemar on held-out, at its branch's share.", ""]
    lines += ["| candidate | heads | share of alpha | part | level | rescued | damaged | p | rejects |",
              "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {t.candidate} | `{','.join(t.heads)}` | {t.share:g} | {t.part:.3g} | {t.level:.3g} | {t.rescued} | "
              f"{t.damaged} | {t.p_value:.3g} | {'yes' if t.rejected else 'no'} |" for t in sel.tests]
    if sel.favoured and sel.kept and tuple(sel.kept) != tuple(sel.proposal):
        lines += ["", "The kept set was cut down from the proposal by the membership tests, which read held-out: "
                  "its held-out change is an exploratory estimate (it reads the examples that chose it and runs "
                  "high); its test and interval account for the choice."]
    chosen = {"proposal": "the proposal's kept heads" if sel.favoured else "the last prefix the sequence reached",
              "single": "the single head",
              "none": "no candidate passed; the primary set is reported, not confirmed"
              + ("" if sel.favoured else " (the kept set where it has two heads or more, else the single head; "
                 "where held-out chose it, its estimate is exploratory)")}[sel.chosen]
    return lines + ["", f"Primary set: {chosen}.", ""]


def sequence_table(sel: Selection, measure: str) -> list[str]:
    """The proposal's fixed sequence (files of schema 5): each increment tested, in order."""
    if not sel.steps:
        return []
    lines = [f"**The proposal's fixed sequence** (its claim): the heads in the order `{','.join(sel.sequence)}` "
             "(each head's gain on the search half, its own or, where larger, within the proposal). It starts with a "
             "block, the shortest prefix holding half the best prefix's gain on the search half (one head, or heads "
             "that act together), against the intact model; each head of a block of several against the block "
             "without it; then each later prefix against the one before it. Each on "
             f"{measure}, on the check half ({sel.check}) and held-out ({sel.heldout}) together: b = better with the "
             "set removed than with the one it is tested against, c = worse, p the one-sided exact sign test, at "
             f"alpha/2 x the branch's share ({sel.share:g}); the sequence stops at the first step that does not "
             "reject, and the last prefix reached of two heads or more is the set it confirms: it improves, and each "
             "of its heads adds to the heads beside it in the block or before it.", "",
             "| step | set | against | check b | check c | held-out b | held-out c | p | level | rejects |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for i, t in enumerate(sel.steps, start=1):
        against = ",".join(h for h in t.prefix if h not in t.added.split(","))
        lines.append(f"| {i} | `{','.join(t.prefix)}` | {f'`{against}`' if against else 'intact'} | "
                     f"{t.check_rescued} | {t.check_damaged} | {t.heldout_rescued} | {t.heldout_damaged} | "
                     f"{t.p_value:.3g} | {t.level:.3g} | {'yes' if t.rejected else 'no'} |")
    # The block's step, its heads' steps where it has several, then one step per later head.
    untested = 1 + (sel.block if sel.block > 1 else 0) + len(sel.sequence) - sel.block - len(sel.steps)
    return lines + ([""] if not untested else ["", f"Not tested (after the first that did not reject): {untested}.", ""])


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


__all__ = ["admission_table", "selection_section", "sequence_table"]
