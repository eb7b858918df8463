"""A task kind is one registered spec (``headprune.tasks.kinds``): the task-file reader, the writer, the listing,
``has_accuracy`` and the CLI's consent check read it, so a kind registered anywhere is read, written and listed
without editing them, and the built-in kinds read and write their files as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.cli import invoke

from headprune.errors import TaskError
from headprune.tasks import Example, Task, has_accuracy, load_task, write_jsonl_task
from headprune.tasks import base as task_base
from headprune.tasks.kinds import KINDS, TaskKindSpec, kind_spec, row_kind
from headprune.tasks.kinds.spec import register, text_field

# One example of every kind, with every field its rows carry (a kind added without one fails here).
SAMPLES = {
    "choice": Example("c1", prompt="2 + 2 =", choices=(" 4", " 5"), answer=0),
    "generate": Example("g1", prompt="2 + 2 =", target=" 4"),
    "text": Example("t1", text="The cat sat on the mat."),
    "classify": Example("k1", text="good film", text_pair="I liked it", label="positive"),
    "code": Example("p1", prompt="def f(x):\n", target="    return x\n", tests="assert f(1) == 1",
                    entry_point="f"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_writes_rows_its_reader_reads_back(kind: str, tmp_path: Path) -> None:
    task = Task("t", kind, (SAMPLES[kind], SAMPLES[kind].__class__(**{**vars(SAMPLES[kind]), "id": "second"})))
    write_jsonl_task(task, tmp_path / "t.jsonl")
    again = load_task(str(tmp_path / "t.jsonl"))
    assert again.kind == kind and again.examples == task.examples
    assert again.max_new_tokens == kind_spec(kind).max_new_tokens and has_accuracy(kind) == (kind != "text")


def test_files_written_by_the_writer_keep_their_keys(tmp_path: Path) -> None:
    """The rows are what they were before the kinds were specs (key order included)."""
    rows = {}
    for kind, example in SAMPLES.items():
        write_jsonl_task(Task("t", kind, (example,)), tmp_path / f"{kind}.jsonl")
        rows[kind] = list(json.loads((tmp_path / f"{kind}.jsonl").read_text()))
    assert rows == {"choice": ["id", "prompt", "choices", "answer"], "generate": ["id", "prompt", "target"],
                    "text": ["id", "text"], "classify": ["id", "text", "label", "text_pair"],
                    "code": ["id", "prompt", "tests", "entry_point", "solution"]}


@pytest.mark.parametrize(("keys", "kind"), [
    (("prompt", "target", "tests"), "code"),  # a code row may hold a target: still code
    (("prompt", "choices", "answer", "target"), "choice"),  # the kind with the most keys
    (("text", "label"), "classify"), (("text",), "text"), (("prompt", "test_list"), "code"),
    (("prompt", "target", "text", "label"), "generate"),  # equal keys and precedence: the order shown
])
def test_a_row_is_the_kind_whose_keys_it_has_most_specific_first(keys: tuple[str, ...], kind: str) -> None:
    assert row_kind(dict.fromkeys(keys, "")).name == kind
    assert row_kind({"question": "?"}) is None


def _pair_read(row: dict, example_id: str, path: str, line: int) -> Example:
    return Example(example_id, text=text_field(row, "left", path, line), text_pair=text_field(row, "right", path, line))


PAIR = TaskKindSpec("pair", (("left",), ("right",)), _pair_read,
                    lambda example: {"left": example.text, "right": example.text_pair},
                    layout='{"left": str, "right": str}', listing="needs nothing", file_options=("max_new_tokens",),
                    max_new_tokens=7, accuracy=False)


@pytest.fixture
def pair(monkeypatch: pytest.MonkeyPatch) -> TaskKindSpec:
    """A kind as a new module would register it, for one test (the registries are restored after it)."""
    monkeypatch.setattr(KINDS, "_entries", dict(KINDS._entries))
    monkeypatch.setattr(task_base, "TASK_KINDS", (*task_base.TASK_KINDS, "pair"))
    return register(PAIR)


def test_a_new_kind_is_read_written_listed_and_scored_from_its_spec_alone(pair, tmp_path: Path) -> None:  # noqa: ANN001
    path = tmp_path / "p.jsonl"
    path.write_text('{"left": "a", "right": "b"}\n{"id": "x", "left": "c", "right": "d"}\n')
    task = load_task(f"{path}:max_new_tokens=3")
    assert task.kind == "pair" and task.max_new_tokens == 3 and not task.has_accuracy
    assert task.examples == (Example("0", text="a", text_pair="b"), Example("x", text="c", text_pair="d"))
    assert load_task(str(path)).max_new_tokens == 7  # the kind's own default
    write_jsonl_task(task, tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_text().splitlines()[1] == '{"id": "x", "left": "c", "right": "d"}'
    with pytest.raises(TaskError, match="option length_normalize applies to choice tasks; this file holds pair rows"):
        load_task(f"{path}:length_normalize=true")
    (tmp_path / "t.jsonl").write_text('{"text": "abc"}\n')
    with pytest.raises(TaskError, match="option max_new_tokens applies to generate and code and pair tasks"):
        load_task(f"{tmp_path / 't.jsonl'}:max_new_tokens=3")
    listed = invoke("tasks").output
    assert '  pair      {"left": str, "right": str}' in listed and "needs nothing" in listed
    (tmp_path / "bad.jsonl").write_text('{"left": "a", "right": ""}\n')
    with pytest.raises(TaskError, match=r'"right" must be a non-empty string'):
        load_task(str(tmp_path / "bad.jsonl"))


def test_a_kind_claimed_twice_is_an_error_and_an_unknown_kind_lists_the_kinds() -> None:
    with pytest.raises(ValueError, match="task kind 'text' is registered twice"):
        register(KINDS["text"])
    with pytest.raises(TaskError, match="unknown task kind 'pair'; expected one of choice, generate, text, classify, "
                                        "code"):
        kind_spec("pair")


def test_the_cli_asks_for_code_execution_by_the_kind_s_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``eval`` refuses a kind whose spec runs code before any model is looked for ("absent" would be another
    error), and takes a kind that does not."""
    monkeypatch.delenv("HF_ALLOW_CODE_EVAL", raising=False)
    for kind in ("code", "generate"):
        write_jsonl_task(Task("t", kind, (SAMPLES[kind],)), tmp_path / f"{kind}.jsonl")
        result = invoke("eval", "absent-model", "--task", str(tmp_path / f"{kind}.jsonl"))
        assert result.exit_code == 2 and "Traceback" not in result.output
        assert ("allow-code-execution" in result.output) == kind_spec(kind).runs_code == (kind == "code")
