"""Data-parallel find under torchrun (Gloo, 2 CPU processes) gives the one-process result, and survives a
killed worker: the run stops with one line, and --resume (on another number of processes) finishes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headprune.tasks.jsonl import write_jsonl_task
from helpers import build_tiny, random_choice_task, save_folder
from helpers.cli import comparable_result, headprune

SEARCH = ["--discovery", "48", "--heldout", "32", "--nominees", "6", "--max-heads", "3", "--finalists", "3",
          "--device", "cpu", "--batch-size", "8"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    folder = tmp_path_factory.mktemp("distributed")
    save_folder(build_tiny("llama", tokenizer, seed=3).model, tokenizer, folder / "model")
    write_jsonl_task(random_choice_task(80, seed=5), folder / "task.jsonl")
    return folder


@pytest.fixture(scope="module")
def alone(inputs):  # noqa: ANN001, ANN201
    out = inputs / "alone"
    done = headprune("find", str(inputs / "model"), "--task", str(inputs / "task.jsonl"), *SEARCH, "--out", str(out))
    assert done.returncode in (0, 1), done.stderr
    return comparable_result(out)


@pytest.mark.slow  # two launches of torchrun with two processes each: ~1 min
def test_two_processes_give_the_one_process_result(inputs, alone) -> None:  # noqa: ANN001
    out = inputs / "two"
    done = headprune("find", str(inputs / "model"), "--task", str(inputs / "task.jsonl"), *SEARCH,
                     "--out", str(out), processes=2)
    assert done.returncode == 0, done.stderr  # under a launcher the verdict is in the output, not the code
    assert "2 processes share every stage" in done.stderr
    assert comparable_result(out) == alone
    lines = (out / "journal.jsonl").read_text().splitlines()
    keys = [json.loads(line)["key"] for line in lines[1:]]
    assert len(keys) == len(set(keys)), "every condition journalled once, by rank 0 alone"


def kill_a_worker(args: list[str], *launcher_options: str) -> subprocess.CompletedProcess:
    """Launch two processes, SIGKILL rank 1 once the journal has some conditions, and wait for the end."""
    launcher = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone", *launcher_options,
         "-m", "headprune", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    journal = Path(args[args.index("--out") + 1]) / "journal.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (not journal.is_file() or len(journal.read_text().splitlines()) < 10):
        time.sleep(0.1)
    workers = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True, text=True).stdout.split()
    assert len(workers) == 2, "torchrun started two workers"
    os.kill(int(max(workers, key=int)), signal.SIGKILL)  # the second worker started: rank 1
    stdout, stderr = launcher.communicate(timeout=300)
    return subprocess.CompletedProcess(launcher.args, launcher.returncode, stdout, stderr)


@pytest.mark.slow
def test_killed_worker_stops_the_run_and_resume_finishes_it(inputs, alone) -> None:  # noqa: ANN001
    out = inputs / "killed"
    args = ["find", str(inputs / "model"), "--task", str(inputs / "task.jsonl"), *SEARCH, "--out", str(out)]
    killed = kill_a_worker(args)
    assert killed.returncode != 0
    ours = [line for line in killed.stderr.splitlines() if line.startswith("headprune:")]
    assert any("process of this run stopped" in line and "--resume" in line for line in ours), killed.stderr[-3000:]
    assert not (out / "result.json").exists()
    resumed = headprune(*args, "--resume")  # on one process now
    assert resumed.returncode in (0, 1), resumed.stderr
    assert comparable_result(out) == alone


@pytest.mark.slow
def test_workers_restarted_by_torchrun_resume_by_themselves(inputs, alone) -> None:  # noqa: ANN001
    out = inputs / "restarted"
    args = ["find", str(inputs / "model"), "--task", str(inputs / "task.jsonl"), *SEARCH, "--out", str(out)]
    restarted = kill_a_worker(args, "--max-restarts", "1")
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert "restarted by the launcher: resuming" in restarted.stderr
    assert comparable_result(out) == alone


@pytest.mark.slow  # two launches (one and two processes) of a beam search: ~40 s
def test_compress_beam_on_two_processes_gives_the_one_process_result(inputs) -> None:  # noqa: ANN001
    args = ["find", str(inputs / "model"), "--task", str(inputs / "task.jsonl"), "--discovery", "48", "--heldout",
            "32", "--device", "cpu", "--batch-size", "8", "--objective", "compress", "--max-drop", "2",
            "--compress-search", "beam", "--beam-width", "2"]
    one = headprune(*args, "--out", str(inputs / "beam-one"))
    assert one.returncode in (0, 1), one.stderr
    two = headprune(*args, "--out", str(inputs / "beam-two"), processes=2)
    assert two.returncode == 0, two.stderr
    assert comparable_result(inputs / "beam-two") == comparable_result(inputs / "beam-one")
    compression = comparable_result(inputs / "beam-one")["compression"]
    assert compression["search"] == "beam" and compression["searched"] >= 2  # rounds of two sets were dealt out
