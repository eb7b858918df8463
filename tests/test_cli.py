"""The CLI: bad input gets one clear line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import json
import time

import pytest

from helpers.cli import invoke
from helpers import build_tiny, save_folder


@pytest.fixture(scope="module")
def choice_file(tmp_path_factory):  # noqa: ANN001, ANN201
    path = tmp_path_factory.mktemp("tasks") / "choice.jsonl"
    rows = [{"prompt": f"the film is {w}", "choices": [" positive", " negative"], "answer": i % 2}
            for i, w in enumerate("a dull delight lifeless finish movie".split())]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _assert_bad_input(result, fragment: str) -> None:  # noqa: ANN001
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert fragment in result.output


def test_eval_reports_accuracy_and_writes_results(tiny_folder, choice_file, tmp_path) -> None:
    out = tmp_path / "results.jsonl"
    result = invoke("eval", str(tiny_folder), "--task", str(choice_file), "--heads", "L0.H1", "--out", str(out),
                    "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary["n"] == len(rows) == 6
    assert summary["correct"] == sum(r["correct"] for r in rows)
    assert summary["heads"] == ["L0.H1"]


def test_eval_mean_ablation_and_limit(tiny_folder, choice_file) -> None:
    result = invoke("eval", str(tiny_folder), "--task", str(choice_file), "--heads", "L1.H2", "--ablation", "mean",
                    "--limit", "4")
    assert result.exit_code == 0, result.output
    assert "n=4" in result.stdout


def test_missing_model(choice_file, tmp_path) -> None:
    _assert_bad_input(invoke("eval", str(tmp_path / "nothing-here"), "--task", str(choice_file)), "not found")


def test_folder_without_config(choice_file, tmp_path) -> None:
    _assert_bad_input(invoke("eval", str(tmp_path), "--task", str(choice_file)), "no config.json")


def test_not_a_transformer(choice_file, tmp_path) -> None:
    (tmp_path / "config.json").write_text('{"hello": "world"}')
    _assert_bad_input(invoke("eval", str(tmp_path), "--task", str(choice_file)), "supported model types")


def test_unsupported_family(choice_file, tmp_path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "t5"}')
    _assert_bad_input(invoke("eval", str(tmp_path), "--task", str(choice_file)), "unsupported architecture 't5'")


def test_hub_id_not_cached(choice_file, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    _assert_bad_input(invoke("eval", "someone/some-model", "--task", str(choice_file)), "not in the local Hugging Face")


class _NoWait:
    """The ``time`` module without ``sleep``: huggingface_hub retries a refused connection five times, waiting
    1 + 2 + 4 + 8 + 8 s in between, which a test need not sit through."""

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        pass


def test_hub_unreachable(choice_file, tmp_path, monkeypatch) -> None:
    import huggingface_hub.utils._http as hub_http

    monkeypatch.setattr(hub_http, "time", _NoWait(), raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    _assert_bad_input(invoke("eval", "someone/some-model", "--task", str(choice_file)), "cannot be reached")


@pytest.mark.parametrize(("heads", "fragment"), [("L0H1", "malformed head name"), ("L5.H0", "out of range"),
                                                 ("L0.H9", "out of range")])
def test_bad_heads(tiny_folder, choice_file, heads, fragment) -> None:
    _assert_bad_input(invoke("eval", str(tiny_folder), "--task", str(choice_file), "--heads", heads), fragment)


def test_unknown_task(tiny_folder) -> None:
    _assert_bad_input(invoke("eval", str(tiny_folder), "--task", "nope"), "unknown task 'nope'")


def test_malformed_task_file(tiny_folder, tmp_path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine"}\n{"text": \n')
    _assert_bad_input(invoke("eval", str(tiny_folder), "--task", str(path)), f"{path}:2:")


def test_empty_task_file(tiny_folder, tmp_path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    _assert_bad_input(invoke("eval", str(tiny_folder), "--task", str(path)), "no examples")


def test_generate_task_on_encoder_is_refused(tmp_path, tokenizer) -> None:
    bert = build_tiny("bert", tokenizer)
    save_folder(bert.model, tokenizer, tmp_path / "bert")
    task = tmp_path / "gen.jsonl"
    task.write_text('{"prompt": "1 + 1 =", "target": "2"}\n')
    _assert_bad_input(invoke("eval", str(tmp_path / "bert"), "--task", str(task)), "need a causal language model")


def test_tasks_lists_builtins() -> None:
    result = invoke("tasks", "--json")
    assert {row["name"] for row in json.loads(result.stdout)} == {"arithmetic", "sentiment", "general"}
