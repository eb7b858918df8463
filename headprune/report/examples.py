"""``report.md``'s section on what a generate task's model wrote: exact match beside teacher-forced accuracy,
what changed in the rescued examples, and a few of them (and of the damaged) before and after.

A gain in exact match on generated text can come from the answer's tokens (the model now computes the
result) or only from what it writes after them (it now stops, or stops putting a period after the number):
the section says in words which it was, from the teacher-forced split kept in ``FindResult.generations``.
"""

from __future__ import annotations

import json

from headprune.search.find_result import FindResult
from headprune.search.generations import GeneratedSet, transitions

SHOWN_RESCUED = 5
SHOWN_DAMAGED = 3


def _quoted(text: str) -> str:
    """A generated text as one table cell: JSON-quoted (spaces, newlines and periods visible), pipes escaped."""
    return "`" + json.dumps(text, ensure_ascii=False).replace("|", "\\|").replace("`", "'") + "`"


def what_changed(s: GeneratedSet) -> str:
    """In words: where a finalist's rescued examples changed (answer tokens, or only what follows them)."""
    rescued = s.rescued_answer + s.rescued_after_answer + s.rescued_other
    if not rescued:
        return "No held-out example was rescued."
    parts = [f"{s.rescued_answer} of {rescued} rescued examples changed the answer's tokens (teacher-forced wrong "
             f"before, right after: the model now computes the target)",
             f"{s.rescued_after_answer} changed only what follows the answer (greedy already wrote the target's "
             "tokens; it now ends the answer differently)"]
    if s.rescued_other:
        parts.append(f"{s.rescued_other} match under the answer rule without the target's tokens being greedy's")
    main = ("mostly the answer's tokens" if s.rescued_answer > rescued / 2 else
            "mostly what follows the answer, not the answer itself" if s.rescued_after_answer > rescued / 2 else
            "mostly examples whose target tokens greedy does not choose under teacher forcing, before or after"
            if s.rescued_other > rescued / 2 else "a mix")
    return f"What changed: {main}. " + "; ".join(parts) + "."


def examples_section(result: FindResult) -> list[str]:
    """The section's markdown lines (none for tasks that do not generate, or results without texts)."""
    g = result.generations
    if g is None or not g.finalists:
        return []
    lines = ["## What the model wrote (held-out)", "",
             f"Answer rule `{g.answer}`: exact match compares {g.rule} with the target (`rescued`/`damaged` below count "
             "held-out examples the primary set turns right/wrong). Teacher-forced accuracy "
             "counts the examples whose target tokens are all greedy's choice when the target is fed in "
             "(margin > 0), whatever follows them.", "",
             "| condition | exact match | teacher-forced | rescued: answer tokens / only after the answer / other | "
             "damaged: answer tokens / only after / other |", "|---|---|---|---|---|",
             f"| intact | {g.baseline.exact_match:.1%} | {g.baseline.teacher_forced:.1%} | | |"]
    for rank, s in enumerate(g.finalists, start=1):
        lines.append(f"| rank {rank} `{','.join(s.heads)}` | {s.exact_match:.1%} | {s.teacher_forced:.1%} | "
                     f"{s.rescued_answer} / {s.rescued_after_answer} / {s.rescued_other} | "
                     f"{s.damaged_answer} / {s.damaged_after_answer} / {s.damaged_other} |")
    primary = g.finalists[0]
    lines += ["", f"Primary set `{','.join(primary.heads)}`. {what_changed(primary)}", ""]
    lines += _example_rows(result, primary)
    return lines + [""]


def _example_rows(result: FindResult, primary: GeneratedSet) -> list[str]:
    """A few rescued and damaged examples of the primary set, before and after."""
    g = result.generations
    assert g is not None
    rescued, damaged = transitions(g.baseline, primary)
    if not rescued.size and not damaged.size:
        return []
    lines = ["| | example | question | target | intact wrote | with the set removed |", "|---|---|---|---|---|---|"]
    for label, picked in (("rescued", rescued[:SHOWN_RESCUED]), ("damaged", damaged[:SHOWN_DAMAGED])):
        for i in picked:
            lines.append(f"| {label} | {g.ids[i]} | {_quoted(g.prompts[i])} | {_quoted(g.targets[i])} | "
                         f"{_quoted(g.baseline.texts[i])} | {_quoted(primary.texts[i])} |")
    return lines + ["", f"({min(rescued.size, SHOWN_RESCUED)} of {rescued.size} rescued and "
                    f"{min(damaged.size, SHOWN_DAMAGED)} of {damaged.size} damaged examples shown, in held-out order.)"]
