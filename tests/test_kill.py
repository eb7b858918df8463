"""kill -9 mid-run leaves nothing half-written: ``find`` leaves a journal that ``--resume`` finishes with exactly
the uninterrupted result, and ``export`` leaves either no folder at its target or a whole, verified one.

Each kill is aimed inside the run, not at a clock time (a loaded machine may not have imported torch yet after a
fixed delay): ``find`` is killed once its journal holds a random number of the uninterrupted run's records,
``export`` a random moment after its staging folder appeared; each test asserts that its kills landed there
(killed by the signal, the journal or staging folder present, no final result yet). Seeded, so a failure can be
replayed."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from headprune.exporter import verify_record
from headprune.tasks.jsonl import write_jsonl_task
from helpers import build_tiny, random_choice_task, save_folder
from helpers.cli import comparable_result, headprune

SEARCH = ["--discovery", "60", "--heldout", "40", "--nominees", "4", "--max-heads", "3", "--finalists", "3",
          "--device", "cpu", "--batch-size", "8"]
KILLS = 3


def killed_when(ready: Callable[[], bool], delay: float, *args: str) -> tuple[int, bool]:
    """Start ``headprune ARGS``; once ``ready()`` holds, wait ``delay`` seconds more and SIGKILL it (unless it
    ended). Its return code, and whether ``ready()`` held at the kill."""
    process = subprocess.Popen([sys.executable, "-m", "headprune", *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 600
    while process.poll() is None and not ready() and time.monotonic() < deadline:
        time.sleep(0.005)
    try:
        process.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        held = ready()
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        return process.returncode, held
    return process.returncode, False


def staged_for(staging: Callable[[], bool], *args: str) -> float:
    """Run ``headprune ARGS`` to its end; the seconds ``staging()`` held (from first to last seen)."""
    process = subprocess.Popen([sys.executable, "-m", "headprune", *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    first = last = None
    while process.poll() is None:
        if staging():
            last = time.monotonic()
            first = first or last
        time.sleep(0.005)
    assert process.returncode == 0 and first is not None, f"export exit {process.returncode}"
    return last - first


def new_staging(target: Path) -> Callable[[], bool]:
    """Whether an export to ``target`` has made its staging folder (one that was not there already: a killed
    export leaves its own behind)."""
    before = set(target.parent.glob(f".{target.name}.tmp-*"))
    return lambda: bool(set(target.parent.glob(f".{target.name}.tmp-*")) - before)


def records(journal: Path) -> int:
    """How many whole records (lines) the journal holds."""
    try:
        return journal.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    folder = tmp_path_factory.mktemp("kill")
    save_folder(build_tiny("llama", tokenizer, seed=6).model, tokenizer, folder / "model")
    write_jsonl_task(random_choice_task(120, seed=2), folder / "task.jsonl")
    done = headprune("find", str(folder / "model"), "--task", str(folder / "task.jsonl"), *SEARCH,
                     "--out", str(folder / "whole"))
    assert done.returncode in (0, 1), done.stderr
    return folder


@pytest.mark.slow  # several processes started and killed: about a minute
def test_find_killed_mid_run_resumes_to_the_uninterrupted_result(inputs) -> None:  # noqa: ANN001
    rng = random.Random(13)
    args = ["find", str(inputs / "model"), "--task", str(inputs / "task.jsonl"), *SEARCH]
    total = records(inputs / "whole" / "journal.jsonl")
    assert total >= 4, total
    for run in range(KILLS):
        out = inputs / f"find-{run}"
        journal = out / "journal.jsonl"
        kept = rng.randint(1, total - 2)  # killed with records still to write: mid-run
        code, held = killed_when(lambda: records(journal) >= kept, 0.0, *args, "--out", str(out))
        assert code == -signal.SIGKILL and held, f"run {run}: the kill did not land mid-run (exit {code})"
        assert kept <= records(journal) < total and not (out / "result.json").exists()
        again = headprune(*args, "--out", str(out), "--resume")
        assert again.returncode in (0, 1), again.stderr
        assert comparable_result(out) == comparable_result(inputs / "whole")


@pytest.mark.slow
def test_export_killed_mid_run_leaves_no_partial_folder(inputs) -> None:  # noqa: ANN001
    rng = random.Random(29)
    target = inputs / "exported"
    plain = ["export", str(inputs / "model"), "--heads", "L0.H1,L1.H2", "--verify-task", str(inputs / "task.jsonl"),
             "--verify-limit", "40"]
    args = [*plain, "--out", str(target), "--overwrite"]  # a kill after the swap leaves a whole export to replace
    # How long an uninterrupted export keeps its staging folder (written elsewhere: the target stays absent).
    window = staged_for(new_staging(inputs / "timed"), *plain, "--out", str(inputs / "timed"))
    assert window > 0 and not target.exists()
    mid_run = 0
    for _ in range(KILLS):
        code, held = killed_when(new_staging(target), rng.uniform(0.0, 0.5 * window), *args)
        if target.exists():  # whatever is at the target is a whole export that verifies (the last whole one)
            verify_record(target)
        else:
            assert code == -signal.SIGKILL, "an export that ended by itself left its folder"
        mid_run += code == -signal.SIGKILL and held
    assert mid_run >= KILLS - 1, f"only {mid_run} of {KILLS} kills landed while the export was being written"
    done = headprune(*args)
    assert done.returncode == 0, done.stderr
    verify_record(target)
