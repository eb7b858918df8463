"""Selection rules, one registered :class:`~headprune.search.rules.base.SelectionRule` a module: how find chooses its
primary set among the candidates discovery fixed, and what people are told of it (``base`` says what a rule owns).

``FIND_RULE`` names the rule find runs; the others are the rules of earlier releases, kept for the records those
releases wrote and for the simulation's comparisons (``headprune.search.simulation``). A record names the rule that
wrote it (``Selection.rule``, ``Verdict.rule``); records written before rules had names are known by their shape
(:func:`rule_of`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headprune.search.rules import admission, fallback, parts, sequence  # noqa: F401 - each registers its rule
from headprune.search.rules.base import RULES, Ran, SelectionRule, register

if TYPE_CHECKING:
    from headprune.search.find_result import FindResult
    from headprune.search.stats import Verdict

FIND_RULE = "fallback"  # the rule find runs; its journal sentence is in every find journal


def find_rule() -> SelectionRule:
    """The rule find runs."""
    return RULES[FIND_RULE]


def rule_of(result: FindResult) -> SelectionRule:
    """The rule whose choice ``result`` records: the name it carries, or, in a file written before rules had names,
    the one its shape says (schema 5: the sequence; 3 and 4: the rule of parts; no selection: 0.2's admission on the
    check half, or before it admission on discovery)."""
    sel = result.selection
    if sel is not None:
        return RULES[sel.rule or ("parts" if sel.favoured else "sequence")]
    halves = result.parsimony is not None and result.parsimony.check is not None
    return RULES["admission" if halves else "same"]


def rule_confirming(verdict: Verdict) -> SelectionRule | None:
    """The rule whose tests are ``verdict``'s claim (its ``steps``; files of schema 5 name none: the sequence's), or
    None where the claim is the set's own test."""
    return RULES[verdict.rule or "sequence"] if verdict.steps else None


__all__ = ["FIND_RULE", "RULES", "Ran", "SelectionRule", "find_rule", "register", "rule_confirming", "rule_of"]
