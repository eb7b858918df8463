"""How a generate task reads its answer out of the generated text, and when that answer counts as the target.

Greedy decoding runs until the task's stop strings (``until``; none: the first newline) and the text before
the first of them is the *response*. An answer rule then extracts the answer from the response, and exact match
compares it with the target:

    ``line``            the whole response (the text up to the first newline), trimmed. A model that writes
                        ``" 46."`` for 46 is wrong: the rule judges how it stops as well as what it computes.
    ``first-number``    the first number in the response (``-?[0-9]+(?:\\.[0-9]+)?``; none: ``[invalid]``), trimmed:
                        ``" 46."``, ``" 46 apples"`` and ``"46"`` all answer 46, ``" 4 6"`` answers 4. The
                        built-in ``arithmetic`` uses it (``answer=line`` gives the older, stricter rule).
    ``regex:PATTERN``   the first match of PATTERN (its first non-empty group when it has groups), trimmed; none:
                        ``[invalid]``. These are lm-evaluation-harness's ``regex`` filter semantics.

``lm-eval:`` tasks carry their own ``filter_list`` pipeline and ``exact_match`` options; their rule holds them as
data (for the task's hash and reports) and a *judge* from ``headprune.tasks.harness`` that scores through lm-eval
itself at run time: the task's filter ensemble reads the answer and ``Task.process_results`` scores it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from headprune.errors import TaskError

FALLBACK = "[invalid]"  # lm-evaluation-harness's RegexFilter default
FIRST_NUMBER = r"-?[0-9]+(?:\.[0-9]+)?"
RULES = ("line", "first-number", "regex:PATTERN")


class Judge(Protocol):
    """Another library's scoring of a response (an lm-eval task's: ``headprune.tasks.harness``); ``key`` is the
    example's id, so that it can score against the example's own source document."""

    def extract(self, response: str, key: str | None) -> object: ...

    def correct(self, response: str, target: str, key: str | None) -> bool: ...


@dataclass(frozen=True)
class AnswerRule:
    """An answer rule: ``steps`` the filter pipeline as ``(function, kwargs as JSON)`` pairs (the named rules are
    one regex step, or none for ``line``); ``match`` the exact-match options as ``(name, JSON)``; ``judge``, for
    lm-eval tasks, lm-eval's own scoring (not part of the rule's identity: the data above is).

    ``name`` is how the rule is written (``line``, ``first-number``, ``regex:...``, or ``lm-eval:FILTER``).
    """

    name: str
    steps: tuple[tuple[str, str], ...] = ()
    match: tuple[tuple[str, str], ...] = ()
    judge: Any = field(default=None, compare=False, repr=False)

    def extract(self, response: str, key: str | None = None) -> str:
        """The answer in ``response``, as the filter pipeline leaves it (``key``: the example, for a judge)."""
        if self.judge is not None:
            answer = self.judge.extract(response, key)
            return answer if isinstance(answer, str) else str(answer)
        answer: object = response
        for function, raw in self.steps:
            answer = _apply(function, json.loads(raw), answer)
        return answer if isinstance(answer, str) else str(answer)

    def correct(self, response: str, target: str, *, trim: bool = True, key: str | None = None) -> bool:
        """Whether the answer in ``response`` is ``target``: the judge's verdict, else exact match, with
        surrounding whitespace trimmed when ``trim`` (headprune's own tasks)."""
        if self.judge is not None:
            return bool(self.judge.correct(response, target, key))
        answer = self.extract(response)
        if trim:
            answer, target = answer.strip(), target.strip()
        return answer == target

    def words(self) -> str:
        """One line for reports: what is compared with the target."""
        if self.name == "line":
            return "the generated line (trimmed)"
        if self.name == "first-number":
            return "the first number in the generated line"
        if self.name.startswith("regex:"):
            return f"the first match of /{self.name[6:]}/ in the generated text"
        return f"lm-evaluation-harness's filter {self.name[len('lm-eval:'):]!r} and exact_match"


def named_rule(spec: str) -> AnswerRule:
    """``line``, ``first-number`` or ``regex:PATTERN`` as a rule.

    Raises:
        TaskError: another name, or a pattern that does not compile.
    """
    if spec == "line":
        return AnswerRule("line")
    if spec == "first-number":
        return AnswerRule("first-number", (("regex", json.dumps({"regex_pattern": FIRST_NUMBER})),))
    if spec.startswith("regex:") and spec[6:]:
        try:
            re.compile(spec[6:])
        except re.error as error:
            raise TaskError(f"answer={spec}: the pattern does not compile ({error})") from None
        return AnswerRule(spec, (("regex", json.dumps({"regex_pattern": spec[6:]})),))
    raise TaskError(f"answer must be one of {', '.join(RULES)}, not {spec!r}")


def _regex_settings(kwargs: dict) -> tuple[re.Pattern, int, str]:
    unknown = set(kwargs) - {"regex_pattern", "group_select", "fallback"}
    if unknown:
        raise TaskError(f"regex filter option {sorted(unknown)[0]!r} is not reproduced")
    try:
        pattern = re.compile(kwargs.get("regex_pattern", r"#### (\-?[0-9\.\,]+)"))
    except re.error as error:
        raise TaskError(f"regex filter pattern does not compile ({error})") from None
    return pattern, int(kwargs.get("group_select", 0)), kwargs.get("fallback", FALLBACK)


def _apply(function: str, kwargs: dict, answer: object) -> object:
    """The named rules' one step: a regex read as lm-evaluation-harness's ``regex`` filter reads it."""
    pattern, group, fallback = _regex_settings(kwargs)
    found = pattern.findall(answer if isinstance(answer, str) else "")
    if not found:
        return fallback
    match = found[group]
    if isinstance(match, tuple):
        match = next((m for m in match if m), fallback)
    return match.strip()


LINE = AnswerRule("line")


def rule_to_json(rule: AnswerRule) -> list:
    """The rule as it enters a task's content hash and settings."""
    return [rule.name, [list(step) for step in rule.steps], [list(option) for option in rule.match]]
