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

``lm-eval:`` tasks carry their own ``filter_list`` pipeline and ``exact_match`` options (``regexes_to_ignore``,
``ignore_case``, ``ignore_punctuation``, ``ignore_numbers``); :class:`AnswerRule` holds them and reproduces
lm-evaluation-harness's filter classes and ``exact_match`` step by step on one response (the parity is tested
against lm_eval's own classes). Filters that need the source document or several responses are refused.
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass

from headprune.errors import TaskError

FALLBACK = "[invalid]"  # lm-evaluation-harness's RegexFilter default
FIRST_NUMBER = r"-?[0-9]+(?:\.[0-9]+)?"
RULES = ("line", "first-number", "regex:PATTERN")
# lm-eval filter functions that act on each response alone; the selections are the identity on one response.
_PER_RESPONSE = ("regex", "remove_whitespace", "lowercase", "uppercase", "map")
_SELECTIONS = ("take_first", "majority_vote")
MATCH_OPTIONS = ("regexes_to_ignore", "ignore_case", "ignore_punctuation", "ignore_numbers")


@dataclass(frozen=True)
class AnswerRule:
    """An answer rule: ``steps`` is lm-eval's filter pipeline as ``(function, kwargs as JSON)`` pairs (the named
    rules are one regex step, or none for ``line``); ``match`` the exact-match options as ``(name, JSON)``.

    ``name`` is how the rule is written (``line``, ``first-number``, ``regex:...``, or ``lm-eval:FILTER``).
    """

    name: str
    steps: tuple[tuple[str, str], ...] = ()
    match: tuple[tuple[str, str], ...] = ()

    def extract(self, response: str) -> str:
        """The answer in ``response``, as the filter pipeline leaves it."""
        answer: object = response
        for function, raw in self.steps:
            answer = _apply(function, json.loads(raw), answer)
        return answer if isinstance(answer, str) else str(answer)

    def correct(self, response: str, target: str, *, trim: bool = True) -> bool:
        """Exact match of the extracted answer against ``target`` (lm-eval's ``exact_match`` with the rule's
        options), with surrounding whitespace trimmed when ``trim`` (headprune's own tasks; lm-eval's
        ``exact_match`` compares them as they are)."""
        answer = self.extract(response)
        if trim:
            answer, target = answer.strip(), target.strip()
        options = {name: json.loads(raw) for name, raw in self.match}
        return _normalise(answer, options) == _normalise(target, options)

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


def harness_rule(name: str, components: list, metric_kwargs: dict) -> AnswerRule:
    """An lm-eval filter pipeline (``[{"function": ..., **kwargs}, ...]``) and exact_match options as a rule.

    Raises:
        TaskError: a filter function or exact_match option this module does not reproduce (naming it).
    """
    steps = []
    for component in components:
        function = component.get("function") if isinstance(component, dict) else None
        kwargs = {k: v for k, v in component.items() if k != "function"} if isinstance(component, dict) else {}
        if function not in _PER_RESPONSE + _SELECTIONS:
            raise TaskError(f"filter {name!r} uses {function!r}; headprune reproduces lm-eval's "
                            f"{', '.join(_PER_RESPONSE + _SELECTIONS)} filters")
        if function == "regex":
            _regex_settings(kwargs)  # checked now, not at the first response
        if function in _PER_RESPONSE:
            steps.append((function, json.dumps(kwargs, sort_keys=True)))
    extra = sorted(set(metric_kwargs) - set(MATCH_OPTIONS))
    if extra:
        raise TaskError(f"exact_match option {extra[0]!r} is not reproduced; headprune reads "
                        f"{', '.join(MATCH_OPTIONS)}")
    match = tuple((key, json.dumps(metric_kwargs[key])) for key in MATCH_OPTIONS if key in metric_kwargs)
    return AnswerRule(f"lm-eval:{name}", tuple(steps), match)


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
    """One lm-eval filter step on one response (``lm_eval.filters``: extraction, transformation)."""
    if function == "regex":
        pattern, group, fallback = _regex_settings(kwargs)
        found = pattern.findall(answer if isinstance(answer, str) else "")
        if not found:
            return fallback
        match = found[group]
        if isinstance(match, tuple):
            match = next((m for m in match if m), fallback)
        return match.strip()
    if function == "remove_whitespace":
        return answer.strip()  # type: ignore[union-attr]
    if function == "lowercase":
        return answer.lower()  # type: ignore[union-attr]
    if function == "uppercase":
        return answer.upper()  # type: ignore[union-attr]
    mapping = kwargs.get("mapping_dict") or {}  # map
    return mapping.get(answer, kwargs.get("default_value"))


def _normalise(text: str, options: dict) -> str:
    """lm-eval's ``exact_match`` preprocessing (``exact_match_hf_evaluate``), in its order. It turns the texts into
    numpy strings first, which drop trailing NULs, and again after each step."""
    text = text.rstrip("\x00")
    for pattern in options.get("regexes_to_ignore") or ():
        text = re.sub(pattern, "", text)
    if options.get("ignore_case"):
        text = text.lower()
    if options.get("ignore_punctuation"):
        text = text.translate(str.maketrans("", "", string.punctuation))
    if options.get("ignore_numbers"):
        text = text.translate(str.maketrans("", "", string.digits))
    return text.rstrip("\x00")  # lm-eval compares numpy strings, which drop trailing NULs


LINE = AnswerRule("line")


def rule_to_json(rule: AnswerRule) -> list:
    """The rule as it enters a task's content hash and settings."""
    return [rule.name, [list(step) for step in rule.steps], [list(option) for option in rule.match]]
