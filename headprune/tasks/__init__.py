"""Tasks: built-in names with options (``arithmetic:digits=3,n=500``), JSONL files, or lm-evaluation-harness
tasks.

A spec is ``NAME[:key=value,...]``, ``PATH.jsonl[:key=value,...]`` or ``lm-eval:NAME[,NAME...][:key=value,...]``
(``lm-eval:path/to/task.yaml`` for a YAML task file; see ``headprune.tasks.harness``). File options:
``length_normalize=true`` (choice), ``max_new_tokens=N`` (generate, code) and ``answer=line|first-number|regex:PATTERN``
(generate: how the answer is read out of the generated line; default ``line``, see ``headprune.tasks.answers``).
"""

from __future__ import annotations

import os
from pathlib import Path

from headprune.core.io import user_path
from headprune.core.paths import shown
from headprune.errors import TaskError
from headprune.tasks.answers import named_rule
from headprune.tasks.base import TASK_KINDS, Example, Task, TaskKind, has_accuracy, parse_options
from headprune.tasks.builtin import BUILTIN_SUMMARIES, BUILTIN_TASKS
from headprune.tasks.harness import PREFIX, load_harness_task
from headprune.tasks.jsonl import load_jsonl_task, write_jsonl_task
from headprune.tasks.kinds import KINDS, TaskKindSpec, kind_spec


def load_task(spec: str | Path, *, trust_remote_code: bool = False) -> Task:
    """Load a task from a built-in name, a JSONL path or ``lm-eval:...``, with optional ``:key=value,...``
    options.

    Args:
        trust_remote_code: let an lm-eval task file run the Python it names (``!function``, ``class:``).

    Raises:
        TaskError: unknown name, missing file, malformed rows or options, an empty task, or an lm-eval task file
            that runs Python without trust_remote_code.
    """
    text = str(spec)
    if not text.strip():
        raise TaskError("the task is empty: give a built-in name, a JSONL file or lm-eval:NAME")
    if text.startswith(PREFIX):
        return load_harness_task(text, trust_remote_code=trust_remote_code)
    base, _, option_text = text.partition(":")
    if Path(text).exists():  # a path that happens to contain ':' wins over option parsing
        base, option_text = text, ""
    options = parse_options(option_text)
    if base in BUILTIN_TASKS:
        return BUILTIN_TASKS[base](options)
    path = user_path(base)
    if not path.exists():
        raise TaskError(f"unknown task {shown(repr(base))}: not a built-in ({', '.join(BUILTIN_TASKS)}) and no such "
                        "file")
    flag = options.pop("length_normalize", "false").lower()
    if flag not in ("1", "true", "yes", "0", "false", "no"):
        raise TaskError(f"option length_normalize={flag[:20]!r} must be true or false")
    length_normalize = flag in ("1", "true", "yes")
    try:
        max_new_tokens = int(options["max_new_tokens"]) if "max_new_tokens" in options else None
        options.pop("max_new_tokens", None)
    except ValueError:
        raise TaskError("option max_new_tokens must be an integer") from None
    answer = named_rule(options.pop("answer", "line"))
    if options:
        raise TaskError(f"task files take only length_normalize, max_new_tokens and answer, not "
                        f"{sorted(options)[0]!r}")
    return load_jsonl_task(path, length_normalize=length_normalize, max_new_tokens=max_new_tokens, answer=answer)


def portable_spec(spec: str | Path) -> str:
    """``spec`` with the task files it names given by absolute paths, so that a record of it (result.json) loads
    the same task from any working folder. Built-in names, Hub names and options are kept as they are."""
    text = str(spec)
    prefix = PREFIX if text.startswith(PREFIX) else ""
    body = text[len(prefix):]

    def absolute(name: str) -> str:
        path = user_path(name.strip())
        if not name.strip() or name.strip() in BUILTIN_TASKS or not path.exists():
            return name
        spelled = os.path.abspath(path)  # the name as given, unless dropping `link/..` made it another file
        return spelled if os.path.exists(spelled) and os.path.samefile(spelled, path) else os.path.realpath(path)

    if user_path(body).exists():  # the whole spec is one path (it may contain ':')
        return prefix + absolute(body)
    names, sep, options = body.partition(":")
    return prefix + ",".join(absolute(name) for name in names.split(",")) + sep + options


def task_files(spec: str | Path | None) -> list[Path]:
    """The files on this machine a task spec reads (a JSONL file, lm-eval YAML task files), for the checks that keep
    an output off its inputs; built-in and Hub names read none. Nothing is loaded."""
    if spec is None or isinstance(spec, Task) or not str(spec).strip():
        return []
    text = str(spec)
    body = text[len(PREFIX):] if text.startswith(PREFIX) else text
    if not text.startswith(PREFIX) and (text in BUILTIN_TASKS or text.partition(":")[0] in BUILTIN_TASKS):
        return []  # a built-in wins over a file of its name (load_task)
    try:
        if user_path(body).exists():  # the whole spec is one path (it may contain ':')
            return [user_path(body)]
        names = body.partition(":")[0].split(",") if text.startswith(PREFIX) else [body.partition(":")[0]]
        return [user_path(name.strip()) for name in names if name.strip() and user_path(name.strip()).exists()]
    except OSError:  # a name too long for the system: no file was read from it
        return []


def describe_builtin_tasks() -> list[tuple[str, str, str]]:
    """``(name, kind, summary)`` of each built-in task."""
    return [(name, kind, summary) for name, (kind, summary) in BUILTIN_SUMMARIES.items()]


__all__ = ["PREFIX", "KINDS", "TASK_KINDS", "Example", "Task", "TaskKind", "TaskKindSpec", "describe_builtin_tasks",
           "has_accuracy", "kind_spec", "load_task", "load_jsonl_task", "portable_spec", "task_files",
           "write_jsonl_task", "BUILTIN_TASKS"]
