"""``code``: ``{"prompt", "tests", "entry_point"?}``, greedy generation, then the program run against the tests in a
separate, limited process (pass@1); runs only with code execution allowed.

Rows: ``"tests"`` (a list of assert lines, MBPP's ``"test_list"``, or one string, HumanEval's ``"test"``); an
optional ``"entry_point"`` (HumanEval) and reference solution (``"solution"``, HumanEval's ``"canonical_solution"``,
MBPP's ``"code"``).
"""

from __future__ import annotations

from headprune.errors import TaskError
from headprune.tasks.example import Example
from headprune.tasks.kinds.spec import TaskKindSpec, register

TESTS_KEYS = ("tests", "test", "test_list")
SOLUTION_KEYS = ("solution", "canonical_solution", "code")
CODE_MAX_NEW_TOKENS = 128  # a function body; answers of generate tasks get 16


def read(row: dict, example_id: str, path: str, line: int) -> Example:
    tests = next(row[key] for key in TESTS_KEYS if key in row)
    if isinstance(tests, list) and tests and all(isinstance(t, str) for t in tests):
        tests = "\n".join(tests)
    if not isinstance(tests, str) or not tests.strip():
        raise TaskError('"tests" must be test code or a list of assert lines', path=path, line=line)
    entry_point = row.get("entry_point", "")
    solution = next((row[key] for key in SOLUTION_KEYS if key in row), "")
    if not isinstance(row["prompt"], str) or not isinstance(entry_point, str) or not isinstance(solution, str):
        raise TaskError('"prompt", "entry_point" and the solution must be strings', path=path, line=line)
    if not row["prompt"]:
        raise TaskError('"prompt" must be a non-empty string (the program is generated after it)', path=path,
                        line=line)
    if entry_point and not entry_point.isidentifier():
        raise TaskError(f'"entry_point" {entry_point!r} is not a Python name', path=path, line=line)
    return Example(example_id, prompt=row["prompt"], target=solution, tests=tests, entry_point=entry_point)


def write(example: Example) -> dict:
    return {"prompt": example.prompt, "tests": example.tests,
            **{k: v for k, v in (("entry_point", example.entry_point), ("solution", example.target)) if v}}


CODE = register(TaskKindSpec(
    "code", (("prompt",), TESTS_KEYS), read, write,
    layout='{"prompt": str, "tests": str | [str, ...], "entry_point"?: str}',
    listing="options: max_new_tokens=N; needs --allow-code-execution", file_options=("max_new_tokens",),
    max_new_tokens=CODE_MAX_NEW_TOKENS, runs_code=True, precedence=1))
