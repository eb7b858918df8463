"""The rule of parts: find's rule of 0.3.0 (records of schema 3 and 4), kept so that their ``report.md`` reads as it
did.

The proposal's kept set T (the membership tests, ``headprune.search.membership``) and the single head were tested on
held-out in a fallback procedure, the candidate *favoured* by the check half (the proposal when two of its heads helped
there) first with ``FAVOURED_SHARE`` of alpha; T at its Bonferroni part of its branch's share, the prefixes of the
membership order ``PREFIX_PART`` of it together (schema 3: behind the proposal's own test, its *gate*). Its level held
through the parts, but T's test read the examples whose membership tests chose it; the fixed sequence
(``headprune.search.rules.sequence``) replaced it. ``scripts/selection_designs.py`` measured it (docs/find.md).
"""

from __future__ import annotations

from headprune.search.rules.base import SelectionRule, register
from headprune.search.rules.words import candidates, membership, tests_table

FAVOURED_SHARE, PREFIX_PART, SUPPORT_P = 0.9, 0.8, 0.3  # the favoured candidate's share, the prefixes' part, support


class Parts(SelectionRule):
    """The rule of parts (the module docstring); its records only."""

    name = "parts"
    journal = "kept set at its part of the favoured candidate's share"

    def section(self, result) -> list[str]:  # noqa: ANN001 (a FindResult)
        sel = result.selection
        lines = ["## How the primary set was chosen", "",
                 candidates(sel) + f" Tested first: the **{sel.favoured}** ({sel.support} of the proposal's heads help "
                 f"on the check half: drop-one, one-sided p <= {SUPPORT_P:g}), with {FAVOURED_SHARE:.0%} of "
                 f"alpha={sel.alpha:g}, the other with the rest.", ""]
        lines += membership(sel, "**Which heads of the proposal stay.**")
        lines += ["**The held-out tests**, in order (a fallback procedure: a test that rejects passes its share on to "
                  "the next, so the chance of confirming a set that does not improve stays at most alpha): the exact "
                  "McNemar test of the single head, and of the proposal's kept set at its part of the proposal's share "
                  "(each subset of the proposal of two heads or more has a part fixed on discovery, the prefixes of the "
                  f"test order {PREFIX_PART:.0%} of it together, so held-out choosing the kept set costs the test "
                  "nothing; a kept set of fewer than two heads is not tested).", ""]
        lines += tests_table(sel)
        if sel.kept and tuple(sel.kept) != tuple(sel.proposal):
            lines += ["", "The kept set was cut down from the proposal by the membership tests, which read held-out: "
                      "its held-out change is an exploratory estimate (it reads the examples that chose it and runs "
                      "high); its test and interval account for the choice."]
        chosen = {"proposal": "the proposal's kept heads", "single": "the single head",
                  "none": "no candidate passed; the primary set is reported, not confirmed"}[sel.chosen]
        return lines + ["", f"Primary set: {chosen}.", ""]


PARTS = register(Parts())

__all__ = ["PARTS", "Parts"]
