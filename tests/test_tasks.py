"""Tasks: JSONL parsing with errors naming file and line, and the seeded built-ins."""

from __future__ import annotations

import json

import pytest

from headprune.errors import TaskError
from headprune.tasks import load_task, write_jsonl_task


def _write(tmp_path, lines: list[str], name: str = "task.jsonl"):  # noqa: ANN001, ANN202
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_jsonl_kinds_are_read_off_the_keys(tmp_path) -> None:
    choice = _write(tmp_path, [json.dumps({"prompt": "p", "choices": ["a", "b"], "answer": 1})], "c.jsonl")
    generate = _write(tmp_path, [json.dumps({"prompt": "p", "target": "t"})], "g.jsonl")
    text = _write(tmp_path, [json.dumps({"text": "hello there"})], "t.jsonl")
    assert [load_task(p).kind for p in (choice, generate, text)] == ["choice", "generate", "text"]
    assert load_task(f"{choice}:length_normalize=true").length_normalize


@pytest.mark.parametrize(("lines", "line", "message"), [
    (['{"prompt": "p", "target": "t"}', "{not json"], 2, "invalid JSON"),
    (['{"prompt": "p", "choices": ["a"], "answer": 0}'], 1, "at least two"),
    (['{"prompt": "p", "choices": ["a", "b"], "answer": 2}'], 1, "index into"),
    (['{"prompt": "p", "target": "t"}', '{"text": "x"}'], 2, "earlier rows are generate"),
    (['{"question": "p"}'], 1, "none of the task layouts"),
    (['[1, 2]'], 1, "JSON object"),
])
def test_malformed_jsonl_names_file_and_line(tmp_path, lines, line, message) -> None:
    path = _write(tmp_path, lines)
    with pytest.raises(TaskError, match=message) as error:
        load_task(path)
    assert str(error.value).startswith(f"{path}:{line}: ")


def test_empty_task_is_an_error(tmp_path) -> None:
    with pytest.raises(TaskError, match="no examples"):
        load_task(_write(tmp_path, ["", "  "]))


def test_unknown_task_and_option() -> None:
    with pytest.raises(TaskError, match="unknown task"):
        load_task("no-such-task")
    with pytest.raises(TaskError, match="no option 'colour'"):
        load_task("arithmetic:colour=red")


def test_arithmetic_is_seeded_and_correct() -> None:
    task = load_task("arithmetic:n=50,digits=3,ops=+-*,seed=7")
    assert task == load_task("arithmetic:n=50,digits=3,ops=+-*,seed=7")
    assert task != load_task("arithmetic:n=50,digits=3,ops=+-*,seed=8")
    for example in task.examples:
        question = example.prompt.rsplit("\n", 1)[-1].removesuffix(" =")
        assert eval(question) == int(example.target)  # noqa: S307 - digits and + - * only
    assert len({e.content_key() for e in task.examples}) == 50


@pytest.mark.slow
def test_sentiment_is_balanced_and_excludes_its_shots() -> None:
    task = load_task("sentiment")
    assert len(task) == 8528
    assert abs(sum(e.answer for e in task.examples) - len(task) / 2) <= 2
    shots = task.examples[0].prompt.split("\n\n")[:-1]
    texts = {e.prompt.rsplit("Review: ", 1)[-1] for e in task.examples}
    assert len(shots) == 2 and not any(s.split("\n")[0].removeprefix("Review: ") + "\nSentiment:" in texts
                                       for s in shots)


def test_jsonl_round_trip(tmp_path) -> None:
    task = load_task("arithmetic:n=5")
    write_jsonl_task(task, tmp_path / "a.jsonl")
    again = load_task(tmp_path / "a.jsonl")
    assert again.content_hash() != "" and [e.content() for e in again.examples] == [e.content() for e in task.examples]
