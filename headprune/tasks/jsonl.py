"""Tasks from JSONL files: the kind is read off the keys of the rows, and every row must agree. What a row of each
kind holds, how it is read and written, is the kind's (:mod:`headprune.tasks.kinds`); nothing here names a kind."""

from __future__ import annotations

import json
from pathlib import Path

from headprune.core.io import read_regular_file
from headprune.core.limits import limit
from headprune.errors import TaskError
from headprune.tasks.answers import LINE, AnswerRule
from headprune.tasks.base import Task
from headprune.tasks.example import Example
from headprune.tasks.kinds import detection_order, kind_spec, row_kind, shown_order, taking

def load_jsonl_task(path: Path, *, length_normalize: bool = False, max_new_tokens: int | None = None,
                    answer: AnswerRule = LINE) -> Task:
    """Read a JSONL task file.

    Raises:
        TaskError: unreadable file, bad JSON, missing keys, mixed kinds or no rows, naming file and line.
    """
    name = str(path)
    kind = None
    examples: list[Example] = []
    most, order = limit("HEADPRUNE_MAX_EXAMPLES"), detection_order()
    for line_number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        row = _parse_row(line, name, line_number)
        row_spec = row_kind(row, order)
        if row_spec is None:
            layouts = [spec.short_layout for spec in shown_order()]
            raise TaskError(f"row has none of the task layouts: {', '.join(layouts[:-1])} or {layouts[-1]}",
                            path=name, line=line_number)
        if kind is not None and row_spec is not kind:
            raise TaskError(f"row is a {row_spec.name} example but earlier rows are {kind.name}", path=name,
                            line=line_number)
        kind = row_spec
        examples.append(kind.read(row, str(row.get("id", row.get("task_id", len(examples)))), name, line_number))
        if len(examples) > most:
            raise TaskError(f"more than {most:,} examples (raise the limit with HEADPRUNE_MAX_EXAMPLES=N)", path=name)
    if kind is None:
        raise TaskError("task file has no examples", path=name)
    ids = [e.id for e in examples]
    if len(set(ids)) != len(ids):
        raise TaskError("example ids are not unique", path=name)
    for option, given in (("max_new_tokens", max_new_tokens is not None), ("length_normalize", length_normalize),
                          ("answer", answer != LINE)):
        if given and option not in kind.file_options:
            raise TaskError(f"option {option} applies to {' and '.join(taking(option))} tasks; this file holds "
                            f"{kind.name} rows", path=name)
    return Task(name, kind.name, tuple(examples), length_normalize=length_normalize,
                max_new_tokens=kind.max_new_tokens if max_new_tokens is None else max_new_tokens,
                description=f"{kind.name} task from {path.name}", answer=answer)


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
    spec = kind_spec(task.kind)
    with path.open("w", encoding="utf-8") as handle:
        for example in task.examples:
            row = {"id": example.id, **spec.write(example)}
            handle.write(json.dumps(row) + "\n")
