"""Answer extraction of generate tasks: lm-eval filter pipelines, built and scored through lm-eval's registry,
give the answers its filter classes and exact_match give one by one on the same texts; the named rules (line,
first-number, regex) do what they are for.

Without lm_eval these tests fail rather than skip (see tests/test_lm_eval_tasks.py).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headprune.errors import TaskError
from headprune.tasks import load_task
from headprune.tasks.answers import named_rule
from headprune.tasks.harness import harness_rule

try:
    from lm_eval.api.metrics import exact_match_hf_evaluate
    from lm_eval.api.registry import get_filter
    import lm_eval.filters  # noqa: F401 -- registers the filter classes
except ImportError as error:  # pragma: no cover
    pytest.fail(f"these tests compare with lm-evaluation-harness, which cannot be imported ({error})",
                pytrace=False)

# gsm8k's own pipelines and exact_match options (lm_eval/tasks/gsm8k/gsm8k.yaml), and others that use every step.
GSM8K_MATCH = {"ignore_case": True, "ignore_punctuation": False,
               "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"]}
PIPELINES = {
    "strict-match": [{"function": "regex", "regex_pattern": "#### (\\-?[0-9\\.\\,]+)"}, {"function": "take_first"}],
    "flexible-extract": [{"function": "regex", "group_select": -1, "regex_pattern": "(-?[$0-9.,]{2,})|(-?[0-9]+)"},
                         {"function": "take_first"}],
    "spaced": [{"function": "remove_whitespace"}, {"function": "lowercase"},
               {"function": "regex", "regex_pattern": "answer is (\\w+)", "fallback": "none"},
               {"function": "take_first"}],
    "mapped": [{"function": "uppercase"}, {"function": "map", "mapping_dict": {"YES": "1", "NO": "0"},
                                           "default_value": "?"}, {"function": "majority_vote"},
               {"function": "take_first"}],
    "default": [{"function": "take_first"}],
    "spaces-kept": [{"function": "regex", "regex_pattern": "=(.*)"}, {"function": "take_first"}],
}
TEXTS = ["#### 42", "The answer is $1,234.", " 46.", "so 3 + 4 = 7 #### 7\n", "#### -3.5, then 8", "", "no digits",
         "12 and 13 and 14", "The answer is Yes", " yes ", "NO", "answer is  x", "####  5", "#### 1.000,5.",
         "= 46 ", "#### 46\x00", "46\x00"]
TEXT = st.text(alphabet=st.sampled_from(list("0123456789 .,$#-=\nabYesNO\x00")), max_size=30)


def lm_eval_answer(steps: list[dict], text: str) -> str:
    """lm_eval's filter classes applied to one response of one document, as its FilterEnsemble does."""
    resps: object = [[text]]
    for step in steps:
        kwargs = {k: v for k, v in step.items() if k != "function"}
        resps = get_filter(step["function"])(**kwargs).apply(resps, [{}])
    return list(resps)[0]


@pytest.mark.parametrize("name", sorted(PIPELINES))
@settings(max_examples=300, deadline=None)
@given(drawn=TEXT)
def test_filters_agree_with_lm_eval(name: str, drawn: str) -> None:
    rule = harness_rule(name, PIPELINES[name], GSM8K_MATCH)
    for text in [drawn, *TEXTS]:
        theirs = lm_eval_answer(PIPELINES[name], text)
        assert rule.extract(text) == theirs, text
        for target in ("42", "#### 1,234", "7", "Some work.\n#### 46", "46", theirs):
            expected = bool(exact_match_hf_evaluate(predictions=[theirs], references=[target],
                                                    **GSM8K_MATCH)["exact_match"])
            assert rule.correct(text, target, trim=False) == expected, (text, target)


@settings(max_examples=300, deadline=None)
@given(drawn=TEXT, pattern=st.sampled_from(["[0-9]+", "(\\d)(\\d)?", "#+ ?(\\S*)", "(a)|(b)", "( *[0-9]+ *)"]))
def test_regex_rule_is_lm_evals_regex_filter(drawn: str, pattern: str) -> None:
    rule = named_rule(f"regex:{pattern}")
    steps = [{"function": "regex", "regex_pattern": pattern}, {"function": "take_first"}]
    assert rule.extract(drawn) == lm_eval_answer(steps, drawn)


def test_first_number_reads_the_answer_not_how_the_line_ends() -> None:
    first, line = named_rule("first-number"), named_rule("line")
    assert first.extract(" 46.") == "46" and first.correct(" 46.", "46") and not line.correct(" 46.", "46")
    assert first.correct(" 46 apples", "46") and first.correct("46", "46") and line.correct(" 46 ", "46")
    assert not first.correct(" 4 6", "46") and not first.correct(" 461", "46")
    assert first.extract("no number") == "[invalid]" and first.extract("-12.5 or 3") == "-12.5"


def test_the_builtin_arithmetic_reads_the_first_number() -> None:
    task = load_task("arithmetic:n=5")
    assert task.answer.name == "first-number" and task.settings["answer"] == "first-number"
    strict = load_task("arithmetic:n=5,answer=line")
    assert strict.answer.name == "line" and strict.content_hash() != task.content_hash()
    assert load_task("arithmetic:n=5,answer=regex:[0-9,]+").answer.extract(" 1,2.") == "1,2"


def test_jsonl_answer_option(tmp_path) -> None:
    path = tmp_path / "gen.jsonl"
    path.write_text(json.dumps({"prompt": "2 + 2 =", "target": "4"}) + "\n")
    assert load_task(str(path)).answer.name == "line"  # the default keeps the whole line
    assert load_task(f"{path}:answer=first-number").answer.name == "first-number"
    choice = tmp_path / "choice.jsonl"
    choice.write_text(json.dumps({"prompt": "x", "choices": ["a", "b"], "answer": 0}) + "\n")
    for spec, message in ((f"{path}:answer=last-number", "answer must be one of"),
                          (f"{path}:answer=regex:(", "does not compile"),
                          (f"{choice}:answer=first-number", "applies to generate tasks")):
        with pytest.raises(TaskError, match=message):
            load_task(spec)


def test_filters_and_options_lm_eval_cannot_use_are_refused_at_load() -> None:
    with pytest.raises(TaskError, match="filter 'mc' .*lm-eval cannot use it"):
        harness_rule("mc", [{"function": "no_such_filter"}], {})
    with pytest.raises(TaskError, match="lm-eval cannot use it .*ignore_spaces"):
        harness_rule("x", [{"function": "take_first"}], {"ignore_spaces": True})
