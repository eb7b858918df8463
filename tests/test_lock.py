"""One run per output folder: a second run on a folder another process holds is refused, naming the holder; a lock
whose holder was killed is free again, and when two processes arrive at it together exactly one wins, every time."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from headprune.core.folder_lock import FolderLock, lock_path
from headprune.errors import ResultFileError
from headprune.search.journal import JOURNAL_NAME
from helpers import build_tiny, random_choice_task, save_folder

# A process that, for each line it reads (a time on the shared monotonic clock), takes the folder's lock at that time,
# says "won" or "lost <message>", and keeps what it won until it is killed.
RACER = """
import sys, time
from headprune.core.folder_lock import FolderLock
from headprune.errors import ResultFileError
held = []
print("ready", flush=True)
for line in sys.stdin:
    start = float(line)
    while time.monotonic() < start:  # both racers leave this spin within microseconds of each other
        pass
    try:
        held.append(FolderLock(sys.argv[1], what="find").acquire())
        print("won", flush=True)
    except ResultFileError as error:
        print("lost", error, flush=True)
"""


def _racers(out, n: int = 2) -> list[subprocess.Popen]:  # noqa: ANN001
    """``n`` racer processes, started together, once each is ready."""
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True) for _ in range(n)]
    for racer in racers:
        assert racer.stdout.readline().strip() == "ready"
    return racers


# One interpreter that imports headprune once and, for each line it reads (a time on the shared monotonic clock per
# racer), forks the racers: each takes the folder's lock at its time, says "<pid> won" or "<pid> lost <message>",
# and keeps what it won until it is killed; once the test has killed them all it says "done". A fork costs about a
# millisecond where a fresh interpreter costs 80: the stale-lock test starts 102 racers.
SPAWNER = """
import os, sys, time
import filelock  # imported here, not by each racer on its way to the lock
from headprune.core.folder_lock import FolderLock
from headprune.errors import ResultFileError
print("ready", flush=True)
for line in sys.stdin:
    racers = []
    for start in map(float, line.split()):
        pid = os.fork()
        if pid == 0:
            while time.monotonic() < start:  # the racers leave this spin within microseconds of each other
                pass
            try:
                held = FolderLock(sys.argv[1], what="find").acquire()
                answer = "won"
            except ResultFileError as error:
                answer = f"lost {error}"
            except BaseException as error:  # said, not died silently: the test would wait for its line
                answer = f"failed {error!r}"
            os.write(1, f"{os.getpid()} {answer}\\n".encode())
            while True:
                time.sleep(60)
        racers.append(pid)
    for pid in racers:
        os.waitpid(pid, 0)
    print("done", flush=True)
"""


def test_two_processes_racing_onto_a_stale_lock_exactly_one_wins_every_time(tmp_path) -> None:
    """Each round two new processes go for the lock at the same instant (one up to half a millisecond later, at
    random), after the winner of the round before was killed holding it: a stale lock, its holder record naming a
    dead process. One wins, the other is refused and names the winner. (headprune's former lock, which read a
    dead holder's record and unlinked it, let both win in about one round in twenty here.)"""
    out = tmp_path / "run"
    rng = random.Random(5)
    stale_rounds = 0
    spawner = subprocess.Popen([sys.executable, "-c", SPAWNER, str(out)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    racers: list[int] = []
    try:
        assert spawner.stdout.readline().strip() == "ready"
        for round_ in range(51):
            start = time.monotonic() + 0.02
            spawner.stdin.write(f"{start + rng.uniform(0, 5e-4)} {start + rng.uniform(0, 5e-4)}\n")
            spawner.stdin.flush()
            answers = [spawner.stdout.readline().split(" ", 2) for _ in range(2)]
            racers = [int(answer[0]) for answer in answers]
            winners = [i for i, answer in enumerate(answers) if answer[1].strip() == "won"]
            assert len(winners) == 1, f"round {round_}: {answers}"
            winner, message = racers[winners[0]], answers[1 - winners[0]][2]
            assert f"pid {winner} on host {socket.gethostname()}" in message, message
            stale_rounds += round_ > 0
            for pid in racers:  # the winner dies holding the lock: the next round races onto a stale one
                os.kill(pid, signal.SIGKILL)
            assert spawner.stdout.readline().strip() == "done"
    finally:
        for pid in racers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        spawner.kill()
        spawner.wait()
    assert stale_rounds >= 50


def test_a_killed_holders_lock_is_free_even_when_its_pid_runs_again(tmp_path) -> None:
    """pid reuse: the holder was killed and its pid now names another live process. The lock is the operating
    system's, not the record, so it is free; the record only names holders in messages."""
    import json

    from headprune.core.folder_lock import HOLDER_SUFFIX

    out = tmp_path / "run"
    (holder,) = _racers(out, 1)
    holder.stdin.write("0\n")
    holder.stdin.flush()
    assert holder.stdout.readline().strip() == "won"
    holder.kill()
    holder.wait()
    record = lock_path(out).with_name(f".run{HOLDER_SUFFIX}")
    reused = json.loads(record.read_text())
    reused["pid"] = os.getpid()  # a live process now has the dead holder's pid
    record.write_text(json.dumps(reused))
    with FolderLock(out, what="export"):
        assert json.loads(record.read_text())["command"] == "export"


def test_a_second_find_on_the_same_folder_is_refused_and_a_killed_holders_lock_is_free(tmp_path, tokenizer) -> None:
    from helpers.cli import invoke
    from headprune.tasks import write_jsonl_task

    lm = build_tiny("llama", tokenizer, seed=1)
    save_folder(lm.model, tokenizer, tmp_path / "model")
    write_jsonl_task(random_choice_task(40), tmp_path / "t.jsonl")
    out = tmp_path / "run"
    script = ("import time\nfrom headprune.core.folder_lock import FolderLock\n"
              f"lock = FolderLock({str(out)!r}).acquire()\nprint('locked', flush=True)\ntime.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        args = ["find", str(tmp_path / "model"), "--task", str(tmp_path / "t.jsonl"), "--discovery", "24",
                "--heldout", "16", "--nominees", "2", "--max-heads", "2", "--finalists", "1", "--out", str(out)]
        refused = invoke(*args, catch_exceptions=True)
        assert refused.exit_code == 2 and refused.output.count("\n") == 1
        assert f"in use by another find (pid {holder.pid} on host {socket.gethostname()}, since 20" in refused.output
        assert not (out / JOURNAL_NAME).exists()
        os.kill(holder.pid, signal.SIGKILL)  # dies holding the lock
        holder.wait()
        assert lock_path(out).exists()
        taken = invoke(*args, catch_exceptions=True)
        assert taken.exit_code in (0, 1), taken.output
        assert f"taking over the lock of find (pid {holder.pid}" in taken.output
        with FolderLock(out):  # released when the run ended
            pass
    finally:
        if holder.poll() is None:
            holder.kill()


def test_a_process_may_take_its_own_folder_again_another_thread_may_not(tmp_path) -> None:
    out = tmp_path / "run"
    with FolderLock(out, what="export"):
        with FolderLock(out / ".." / "run"):  # the same folder, spelled otherwise: taken again, not refused
            pass
        errors = []

        def other() -> None:
            try:
                FolderLock(out).acquire()
            except ResultFileError as error:
                errors.append(str(error))

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert errors and "in use by another export in this process" in errors[0]
        probe = subprocess.run([sys.executable, "-c", "import sys\nfrom headprune.core.folder_lock import FolderLock\n"
                                f"FolderLock({str(out)!r}).acquire()"], capture_output=True, text=True)
        assert probe.returncode != 0 and "in use by another export" in probe.stderr  # the inner release kept it
    with FolderLock(out):  # the outer one let it go
        pass


def test_a_lock_file_of_an_older_headprune_inside_the_folder(tmp_path) -> None:
    """The lock an older release wrote inside the folder: refused while its process runs (and the new lock given
    back), removed once that process is gone."""
    import json

    from filelock import FileLock

    out = tmp_path / "run"
    out.mkdir()
    legacy = out / ".headprune.lock"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        legacy.write_text(json.dumps({"pid": sleeper.pid, "host": socket.gethostname(), "command": "find"}))
        with pytest.raises(ResultFileError, match=f"older headprune find \\(pid {sleeper.pid}"):
            FolderLock(out).acquire()
        free = FileLock(str(lock_path(out)), timeout=0)
        free.acquire()  # given back: free to anyone
        free.release()
    finally:
        sleeper.kill()
        sleeper.wait()
    with FolderLock(out):
        assert not legacy.exists()
