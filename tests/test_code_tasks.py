"""Code tasks: generated programs run against their tests in a separate, limited process, and only when
code execution is allowed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from helpers.cli import invoke
from headprune.errors import TaskError
from headprune.scoring.code import program
from headprune.scoring.execution import code_execution_allowed, permit_code_execution, run_program
from headprune.tasks import load_task
from helpers import build_tiny


@pytest.fixture(autouse=True)
def _no_env_permission(monkeypatch, strongest_sandbox) -> None:  # noqa: ANN001
    monkeypatch.delenv("HF_ALLOW_CODE_EVAL", raising=False)


def _run(source: str, **limits) -> object:  # noqa: ANN003
    with permit_code_execution():
        return run_program(source, **limits)


def test_passing_failing_and_raising_programs() -> None:
    assert _run("def f(x):\n    return x + 1\nassert f(1) == 2\n").passed
    failed = _run("def f(x):\n    return x\nassert f(1) == 2\n")
    assert not failed.passed and failed.status == "failed" and "AssertionError" in failed.detail
    raised = _run("raise ValueError('boom')\n")
    assert not raised.passed and "ValueError: boom" in raised.detail
    assert not _run("def f(:\n").passed  # a syntax error


def test_a_hanging_program_is_killed_at_the_limit() -> None:
    started = time.perf_counter()
    outcome = _run("while True:\n    pass\n", time_limit_s=1.0)
    assert outcome.status == "timeout" and not outcome.passed
    assert time.perf_counter() - started < 3.0


@pytest.mark.parametrize("source", ["import socket\n", "import urllib.request\n",
                                    "import os\nos.system('true')\n", "import subprocess\n"])
def test_no_network_and_no_new_processes(source) -> None:  # noqa: ANN001
    outcome = _run(source)
    assert not outcome.passed and "PermissionError" in outcome.detail


def test_writes_stay_inside_the_temporary_folder(tmp_path) -> None:  # noqa: ANN001
    outside = tmp_path / "outside.txt"
    outcome = _run(f"open({str(outside)!r}, 'w').write('x')\n")
    assert not outcome.passed and "PermissionError" in outcome.detail
    assert not outside.exists()
    victim = tmp_path / "keep.txt"
    victim.write_text("keep")
    assert not _run(f"import os\nos.remove({str(victim)!r})\n").passed
    assert victim.read_text() == "keep"
    assert _run("open('scratch.txt', 'w').write('x')\nassert open('scratch.txt').read() == 'x'\n").passed


def test_memory_is_limited() -> None:
    outcome = _run("x = bytearray(1 << 31)\n", memory_bytes=256 << 20)
    assert not outcome.passed and "MemoryError" in outcome.detail


def test_nothing_runs_without_permission(tmp_path) -> None:  # noqa: ANN001
    marker = tmp_path / "ran"
    assert not code_execution_allowed()
    with pytest.raises(TaskError, match="--allow-code-execution"):
        run_program(f"open({str(marker)!r}, 'w')\n")
    assert not marker.exists()


def test_hf_allow_code_eval_permits(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")
    assert run_program("assert 1 + 1 == 2\n").passed


def test_mbpp_and_humaneval_rows_load(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "code.jsonl"
    rows = [{"task_id": "HumanEval/0", "prompt": "def add(a, b):\n", "canonical_solution": "    return a + b\n",
             "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n", "entry_point": "add"},
            {"task_id": 11, "prompt": "Write a function add(a, b).\n", "code": "def add(a, b):\n    return a + b",
             "test_list": ["assert add(2, 3) == 5", "assert add(0, 0) == 0"]},
            {"prompt": "Write sub.\n", "tests": "assert sub(3, 2) == 1"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = load_task(path)
    assert task.kind == "code" and task.max_new_tokens == 128
    human, mbpp, plain = task.examples
    assert (human.id, human.entry_point, mbpp.id) == ("HumanEval/0", "add", "11")
    assert mbpp.tests == "assert add(2, 3) == 5\nassert add(0, 0) == 0"
    with permit_code_execution():
        # The reference solutions pass under each row's convention; a wrong one fails.
        assert run_program(program(human, human.target)).passed
        assert run_program(program(mbpp, mbpp.target)).passed
        assert not run_program(program(mbpp, "def add(a, b):\n    return a - b")).passed
        assert run_program(program(plain, "def sub(a, b):\n    return a - b")).passed


@pytest.fixture(scope="module")
def code_file(tmp_path_factory) -> Path:  # noqa: ANN001
    """Whatever the random model writes lands inside a string literal, so the rows pass or fail on the code
    in their prompts: "right" passes, "wrong" fails."""
    path = tmp_path_factory.mktemp("code") / "code.jsonl"
    check = "'''\ndef check(candidate):\n    assert candidate(2, 3) == 5\n"
    rows = [{"id": name, "prompt": f"def add(a, b):\n    return a {op} b\nNOTE = '''", "test": check,
             "entry_point": "add"} for name, op in (("right", "+"), ("wrong", "-"))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture()
def started(monkeypatch) -> list:  # noqa: ANN001
    """The processes the code runner starts (passed on to the real ``Popen``); the sandbox is probed first."""
    from headprune.scoring import sandbox
    from headprune.scoring.execution import code_isolation

    with permit_code_execution():
        code_isolation()  # as the runner chooses (the mode HEADPRUNE_SANDBOX_MODE names here)
    calls: list = []
    real = sandbox.subprocess.Popen

    def popen(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(sandbox.subprocess, "Popen", popen)
    return calls


def test_cli_without_permission_runs_nothing_and_exits_2(tiny_folder, code_file, tmp_path, started) -> None:
    for command in (["eval", str(tiny_folder), "--task", str(code_file)],
                    ["find", str(tiny_folder), "--task", str(code_file), "--out", str(tmp_path / "run")]):
        result = invoke(*command)
        assert result.exit_code == 2, result.output
        assert "--allow-code-execution" in result.output and "Traceback" not in result.output
    assert started == []
    assert not (tmp_path / "run").exists()
    assert "DANGEROUS" in invoke("eval", "--help").output and "DANGEROUS" in invoke("find", "--help").output


def test_cli_with_permission_scores_pass_at_1(tiny_folder, code_file, tmp_path, started) -> None:
    out = tmp_path / "results.jsonl"
    result = invoke("eval", str(tiny_folder), "--task", str(code_file), "--allow-code-execution", "--out", str(out))
    assert result.exit_code == 0, result.output
    rows = {row["id"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert (rows["right"]["correct"], rows["wrong"]["correct"]) == (True, False)
    assert (rows["right"]["margin"], rows["wrong"]["margin"]) == (1.0, -1.0)  # no reference solution given
    assert len(started) == 2  # one process per example
    assert not code_execution_allowed()  # the permission ended with the command


def test_completions_end_at_the_stop_strings(tokenizer) -> None:  # noqa: ANN001
    import torch

    from headprune.scoring.code import CodeScorer
    from headprune.tasks import Example, Task

    human = Example("h", prompt="def add(a, b):\n", tests="def check(f):\n    assert f(2, 3) == 5\n", entry_point="add")
    mbpp = Example("m", prompt="Write add.\n", tests="assert add(2, 3) == 5")
    with permit_code_execution():
        scorer = CodeScorer(Task("code", "code", (human, mbpp)), build_tiny("llama", tokenizer))
        judge = lambda example, text: scorer.judge(example, [torch.zeros(2)], text)  # noqa: E731
        assert judge(human, "    return a + b\n\ndef junk(:\n") == (True, 1.0)  # cut before the next def
        assert judge(human, "    return a - b\n") == (False, -1.0)
        assert judge(mbpp, "```python\ndef add(a, b):\n    return a + b\n```\njunk(")[0]  # a fenced block
        assert judge(mbpp, "def add(a, b):\n    return a + b\n[DONE] junk(")[0]
        assert not judge(mbpp, "def add(a, b):\n    return a + b\njunk(")[0]  # nothing cuts the junk off


def test_a_program_runs_once_per_run_and_a_condition_writing_it_again_gets_its_outcome(tokenizer, code_file,
                                                                                         started) -> None:  # noqa: ANN001
    from headprune.evaluation import Evaluator
    from headprune.heads import Head
    from headprune.scoring.code import program

    with permit_code_execution():
        task = load_task(code_file)
        evaluator = Evaluator(build_tiny("llama", tokenizer), task, batch_size=2)
        conditions = [(), (), (Head(0, 0),), (Head(1, 1),), ()]
        results = [evaluator.run(heads) for heads in conditions]
    programs = {program(example, text) for result in results for example, text in zip(task.examples, result.texts)}
    assert len(started) == len(programs) < len(conditions) * len(task.examples)  # each program ran once
    assert all(list(r.correct) == [True, False] for r in results)  # "right" passes and "wrong" fails every time


def test_cli_prints_the_sandbox_mode_and_refuses_one_that_cannot_contain_a_program(tiny_folder, code_file,
                                                                                   monkeypatch) -> None:
    """--allow-code-execution says which mode programs run in; where the strongest mode here cannot keep the user's
    files and HF_TOKEN unreadable (here: only the plain mode runs), nothing runs until --sandbox-mode names it."""
    from headprune.scoring import sandbox
    from headprune.scoring.sandbox import Isolation

    monkeypatch.setattr(sandbox, "_chosen", {})
    run = ["eval", str(tiny_folder), "--task", str(code_file), "--allow-code-execution"]
    done = invoke(*run)  # in the strongest mode here, named (strongest_sandbox)
    assert done.exit_code == 0 and f"programs run in the {sandbox.best_isolation().mode} mode" in done.stderr
    monkeypatch.delenv("HEADPRUNE_SANDBOX_MODE")
    monkeypatch.setattr(sandbox, "_chosen", {})
    monkeypatch.setattr(sandbox, "candidates", lambda: [Isolation()])  # no namespaces, Landlock or seccomp here
    refused = invoke(*run)
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1, refused.output
    assert "the strongest sandbox here is the plain mode" in refused.stderr
    assert "give --sandbox-mode plain (or HEADPRUNE_SANDBOX_MODE=plain) to run in it all the same" in refused.stderr
    named = invoke(*run, "--sandbox-mode", "plain")
    assert named.exit_code == 0 and "programs run in the plain mode (as asked), behind no kernel isolation" in \
        named.stderr, named.output
    unused = invoke("eval", str(tiny_folder), "--task", "sentiment:n=2", "--sandbox-mode", "plain")
    assert unused.exit_code == 2 and "--sandbox-mode applies only with --allow-code-execution" in unused.stderr
