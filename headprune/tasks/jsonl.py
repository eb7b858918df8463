"""Tasks from JSONL files: the kind is read off the keys of the rows, and every row must agree."""

from __future__ import annotations

import json
from pathlib import Path

from headprune.core.io import read_regular_file
from headprune.core.limits import limit
from headprune.errors import TaskError
from headprune.tasks.answers import LINE, AnswerRule
from headprune.tasks.base import Example, Task

# Most specific first: a classify row also has the text row's key.
_KEYS = {"choice": {"prompt", "choices", "answer"}, "generate": {"prompt", "target"}, "classify": {"text", "label"},
         "text": {"text"}}
# Code rows: "tests" (a list of assert lines, MBPP's "test_list", or one string, HumanEval's "test"); an optional
# "entry_point" (HumanEval) and reference solution ("solution", HumanEval's "canonical_solution", MBPP's "code").
_TESTS_KEYS = ("tests", "test", "test_list")
_SOLUTION_KEYS = ("solution", "canonical_solution", "code")
# What `headprune tasks` shows of each kind's rows and file options (``?``: optional key). One entry per kind of
# TASK_KINDS: tests/test_tasks_listing.py fails when a kind is missing here, from the listing or from README.
FILE_LAYOUTS: dict[str, tuple[str, str]] = {
    "choice": ('{"prompt": str, "choices": [str, ...], "answer": int}', "options: length_normalize=true"),
    "generate": ('{"prompt": str, "target": str}', "options: max_new_tokens=N, answer=line|first-number|regex:PATTERN"),
    "text": ('{"text": str}', ""),
    "classify": ('{"text": str, "label": int | str, "text_pair"?: str}', "needs a sequence-classification head"),
    "code": ('{"prompt": str, "tests": str | [str, ...], "entry_point"?: str}',
             "options: max_new_tokens=N; needs --allow-code-execution"),
}


def _row_kind(row: dict) -> str | None:
    if "prompt" in row and any(key in row for key in _TESTS_KEYS):
        return "code"
    for kind, keys in _KEYS.items():
        if keys <= row.keys():
            return kind
    return None


def _example(row: dict, kind: str, index: int, path: str, line: int) -> Example:
    example_id = str(row.get("id", row.get("task_id", index)))
    if kind == "classify":
        return _classify_example(row, example_id, path, line)
    if kind == "code":
        return _code_example(row, example_id, path, line)
    if kind == "text":
        if not isinstance(row["text"], str) or not row["text"]:
            raise TaskError('"text" must be a non-empty string', path=path, line=line)
        return Example(example_id, text=row["text"])
    if not isinstance(row["prompt"], str) or not row["prompt"]:
        raise TaskError('"prompt" must be a non-empty string (a causal model scores what follows it)', path=path,
                        line=line)
    if kind == "generate":
        if not isinstance(row["target"], str) or not row["target"].strip():
            raise TaskError('"target" must be a non-empty string', path=path, line=line)
        return Example(example_id, prompt=row["prompt"], target=row["target"])
    choices, answer = row["choices"], row["answer"]
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) and c for c in choices):
        raise TaskError('"choices" must be a list of at least two non-empty strings', path=path, line=line)
    if len(set(choices)) < len(choices):
        raise TaskError('"choices" must differ from each other (two identical choices cannot be told apart)',
                        path=path, line=line)
    if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(choices):
        raise TaskError(f'"answer" must be an index into "choices" (0..{len(choices) - 1})', path=path, line=line)
    return Example(example_id, prompt=row["prompt"], choices=tuple(choices), answer=answer)


def _classify_example(row: dict, example_id: str, path: str, line: int) -> Example:
    text, pair, label = row["text"], row.get("text_pair", ""), row["label"]
    if not isinstance(text, str) or not text:
        raise TaskError('"text" must be a non-empty string', path=path, line=line)
    if not isinstance(pair, str):
        raise TaskError('"text_pair" must be a string', path=path, line=line)
    if isinstance(label, bool) or not (isinstance(label, int) and label >= 0 or isinstance(label, str) and label):
        raise TaskError('"label" must be a class index (0, 1, ...) or a label name', path=path, line=line)
    return Example(example_id, text=text, text_pair=pair, label=label)


def _code_example(row: dict, example_id: str, path: str, line: int) -> Example:
    tests = next(row[key] for key in _TESTS_KEYS if key in row)
    if isinstance(tests, list) and tests and all(isinstance(t, str) for t in tests):
        tests = "\n".join(tests)
    if not isinstance(tests, str) or not tests.strip():
        raise TaskError('"tests" must be test code or a list of assert lines', path=path, line=line)
    entry_point = row.get("entry_point", "")
    solution = next((row[key] for key in _SOLUTION_KEYS if key in row), "")
    if not isinstance(row["prompt"], str) or not isinstance(entry_point, str) or not isinstance(solution, str):
        raise TaskError('"prompt", "entry_point" and the solution must be strings', path=path, line=line)
    if not row["prompt"]:
        raise TaskError('"prompt" must be a non-empty string (the program is generated after it)', path=path,
                        line=line)
    if entry_point and not entry_point.isidentifier():
        raise TaskError(f'"entry_point" {entry_point!r} is not a Python name', path=path, line=line)
    return Example(example_id, prompt=row["prompt"], target=solution, tests=tests, entry_point=entry_point)


CODE_MAX_NEW_TOKENS = 128  # a function body; answers of generate tasks get 16


def load_jsonl_task(path: Path, *, length_normalize: bool = False, max_new_tokens: int | None = None,
                    answer: AnswerRule = LINE) -> Task:
    """Read a JSONL task file.

    Raises:
        TaskError: unreadable file, bad JSON, missing keys, mixed kinds or no rows, naming file and line.
    """
    name = str(path)
    kind: str | None = None
    examples: list[Example] = []
    most = limit("HEADPRUNE_MAX_EXAMPLES")
    for line_number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        row = _parse_row(line, name, line_number)
        row_kind = _row_kind(row)
        if row_kind is None:
            raise TaskError(
                'row has none of the task layouts: {"prompt","choices","answer"}, {"prompt","target"}, '
                '{"text","label"}, {"text"} or {"prompt","tests"}',
                path=name,
                line=line_number,
            )
        if kind is not None and row_kind != kind:
            raise TaskError(f"row is a {row_kind} example but earlier rows are {kind}", path=name, line=line_number)
        kind = row_kind
        examples.append(_example(row, row_kind, len(examples), name, line_number))
        if len(examples) > most:
            raise TaskError(f"more than {most:,} examples (raise the limit with HEADPRUNE_MAX_EXAMPLES=N)", path=name)
    if kind is None:
        raise TaskError("task file has no examples", path=name)
    ids = [e.id for e in examples]
    if len(set(ids)) != len(ids):
        raise TaskError("example ids are not unique", path=name)
    if max_new_tokens is not None and kind not in ("generate", "code"):
        raise TaskError(f"option max_new_tokens applies to generate and code tasks; this file holds {kind} rows",
                        path=name)
    if length_normalize and kind != "choice":
        raise TaskError(f"option length_normalize applies to choice tasks; this file holds {kind} rows", path=name)
    if max_new_tokens is None:
        max_new_tokens = CODE_MAX_NEW_TOKENS if kind == "code" else 16
    if answer != LINE and kind != "generate":
        raise TaskError(f"option answer applies to generate tasks; this file holds {kind} rows", path=name)
    return Task(name, kind, tuple(examples), length_normalize=length_normalize, max_new_tokens=max_new_tokens,
                description=f"{kind} task from {path.name}", answer=answer)  # type: ignore[arg-type]


def read_lines(path: Path) -> list[str]:
    """The lines of a task file, read only when it is a regular file within the size and line-length limits
    (``headprune.core.limits``): a FIFO or a device is refused before it can block or stream forever, and it is opened
    without blocking in case it became one after the check. Lines end at ``\\n`` (JSON Lines), so characters JSON
    allows inside a string (U+2028, U+0085, a form feed) stay in their line.

    Raises:
        TaskError: not a regular file, unreadable, too large, a line too long, or not UTF-8.
    """
    name = str(path)
    try:
        text = read_regular_file(path, limit("HEADPRUNE_MAX_TASK_MB") * 10**6).decode("utf-8")
    except OSError as error:
        raise TaskError(f"cannot read task file ({error.strerror or error})", path=name) from error
    except UnicodeDecodeError as error:
        raise TaskError(f"not UTF-8 text (byte {error.start:,}: {error.reason})", path=name) from error
    except ValueError as error:
        more = " (raise it with HEADPRUNE_MAX_TASK_MB=N)" if "limit" in str(error) else ": cannot be a task file"
        raise TaskError(f"{error}{more}", path=name) from None
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    longest = limit("HEADPRUNE_MAX_LINE_CHARS")
    for number, line in enumerate(lines, start=1):
        if len(line) > longest:
            raise TaskError(f"line of {len(line):,} characters, more than the limit of {longest:,} (raise it with "
                            "HEADPRUNE_MAX_LINE_CHARS=N)", path=name, line=number)
    return lines


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _parse_row(line: str, path: str, line_number: int) -> dict:
    """One line as a JSON object, strictly: nesting too deep for the parser, numbers too long to convert, NaN or
    Infinity, and strings that are not Unicode text (lone surrogates) are refused by line number.

    Raises:
        TaskError
    """
    try:
        row = json.loads(line, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise TaskError(f"invalid JSON ({error.msg})", path=path, line=line_number) from error
    except RecursionError:
        raise TaskError("invalid JSON (nested too deeply)", path=path, line=line_number) from None
    except ValueError as error:  # a number of more than 4,300 digits (Python's limit), NaN, Infinity
        why = "a number too long to read" if "digits" in str(error) else str(error)
        raise TaskError(f"invalid JSON ({why})", path=path, line=line_number) from None
    if not isinstance(row, dict):
        raise TaskError("each line must be a JSON object", path=path, line=line_number)
    try:
        json.dumps(row, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise TaskError("a string holds a lone surrogate (\\ud800-\\udfff without its pair): not Unicode text",
                        path=path, line=line_number) from None
    except RecursionError:
        raise TaskError("invalid JSON (nested too deeply)", path=path, line=line_number) from None
    return row


def write_jsonl_task(task: Task, path: Path) -> None:
    """Write a task as JSONL in the layout :func:`load_jsonl_task` reads."""
    with path.open("w", encoding="utf-8") as handle:
        for example in task.examples:
            row: dict = {"id": example.id}
            if task.kind == "classify":
                row.update(text=example.text, label=example.label)
                if example.text_pair:
                    row["text_pair"] = example.text_pair
            elif task.kind == "text":
                row["text"] = example.text
            elif task.kind == "generate":
                row.update(prompt=example.prompt, target=example.target)
            elif task.kind == "code":
                row.update(prompt=example.prompt, tests=example.tests)
                row.update({k: v for k, v in (("entry_point", example.entry_point), ("solution", example.target)) if v})
            else:
                row.update(prompt=example.prompt, choices=list(example.choices), answer=example.answer)
            handle.write(json.dumps(row) + "\n")
