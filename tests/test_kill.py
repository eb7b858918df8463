"""kill -9 at random moments leaves nothing half-written: ``find`` leaves a journal that ``--resume`` finishes
with exactly the uninterrupted result, and ``export`` leaves either no folder at its target or a whole,
verified one. Several runs, each killed after a random delay (seeded, so a failure can be replayed)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from headprune.exporter import verify_record
from headprune.tasks.jsonl import write_jsonl_task
from helpers import build_tiny, random_choice_task

SEARCH = ["--discovery", "60", "--heldout", "40", "--nominees", "4", "--max-heads", "3", "--finalists", "3",
          "--device", "cpu", "--batch-size", "8"]
KILLS = 3


def headprune(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headprune", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def killed_after(delay: float, *args: str) -> int:
    """Start ``headprune ARGS``, SIGKILL it after ``delay`` seconds (unless it ended); its return code."""
    process = subprocess.Popen([sys.executable, "-m", "headprune", *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        process.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    return process.returncode


def result_of(folder: Path) -> dict:
    result = json.loads((folder / "result.json").read_text())
    result.pop("timings", None)
    return result


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    folder = tmp_path_factory.mktemp("kill")
    build_tiny("llama", tokenizer, seed=6).model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    write_jsonl_task(random_choice_task(120, seed=2), folder / "task.jsonl")
    done = headprune("find", str(folder / "model"), "--task", str(folder / "task.jsonl"), *SEARCH,
                     "--out", str(folder / "whole"))
    assert done.returncode in (0, 1), done.stderr
    return folder


@pytest.mark.slow  # several processes started and killed: about a minute
def test_find_killed_anywhere_resumes_to_the_uninterrupted_result(inputs) -> None:  # noqa: ANN001
    rng = random.Random(13)
    args = ["find", str(inputs / "model"), "--task", str(inputs / "task.jsonl"), *SEARCH]
    for run in range(KILLS):
        out = inputs / f"find-{run}"
        code = killed_after(rng.uniform(2.0, 9.0), *args, "--out", str(out))
        if (out / "result.json").exists():  # finished, or killed after writing it (atomically): it is final
            assert result_of(out) == result_of(inputs / "whole"), f"exit {code}"
        journal = out / "journal.jsonl"
        again = headprune(*args, "--out", str(out), *(["--resume"] if journal.is_file() else []))
        assert again.returncode in (0, 1), again.stderr
        assert result_of(out) == result_of(inputs / "whole")


@pytest.mark.slow
def test_export_killed_anywhere_leaves_no_partial_folder(inputs) -> None:  # noqa: ANN001
    rng = random.Random(29)
    target = inputs / "exported"
    args = ["export", str(inputs / "model"), "--heads", "L0.H1,L1.H2", "--verify-task", str(inputs / "task.jsonl"),
            "--verify-limit", "40", "--out", str(target)]
    for _ in range(KILLS):
        code = killed_after(rng.uniform(2.0, 10.0), *args)
        if target.exists():  # whatever is at the target is a whole export that verifies
            verify_record(target)
        else:
            assert code == -signal.SIGKILL, "an export that ended by itself left its folder"
    done = headprune(*args)
    assert done.returncode == 0, done.stderr
    verify_record(target)
