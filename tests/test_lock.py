"""One run per output folder: a second find on a folder another process holds is refused, naming the holder, and
the lock of a process that died is taken over."""

from __future__ import annotations

from headprune.search.journal import JOURNAL_NAME
from helpers import build_tiny, random_choice_task, save_folder


def test_a_second_find_on_the_same_folder_is_refused_and_a_stale_lock_taken_over(tmp_path, tokenizer) -> None:
    import os
    import signal
    import socket
    import subprocess
    import sys

    from helpers.cli import invoke
    from headprune.folder_lock import LOCK_NAME
    from headprune.tasks import write_jsonl_task

    lm = build_tiny("llama", tokenizer, seed=1)
    save_folder(lm.model, tokenizer, tmp_path / "model")
    write_jsonl_task(random_choice_task(40), tmp_path / "t.jsonl")
    out = tmp_path / "run"
    script = (f"import time\nfrom headprune.folder_lock import FolderLock\nlock = FolderLock({str(out)!r}).acquire()\n"
              "print('locked', flush=True)\ntime.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        args = ["find", str(tmp_path / "model"), "--task", str(tmp_path / "t.jsonl"), "--discovery", "24",
                "--heldout", "16", "--nominees", "2", "--max-heads", "2", "--finalists", "1", "--out", str(out)]
        refused = invoke(*args, catch_exceptions=True)
        assert refused.exit_code == 2 and refused.output.count("\n") == 1
        assert f"pid {holder.pid} on host {socket.gethostname()}" in refused.output
        assert not (out / JOURNAL_NAME).exists()
        os.kill(holder.pid, signal.SIGKILL)  # dies holding the lock
        holder.wait()
        assert (out / LOCK_NAME).exists()
        taken = invoke(*args, catch_exceptions=True)
        assert taken.exit_code in (0, 1), taken.output
        assert f"taking over the lock of find (pid {holder.pid}" in taken.output
        assert not (out / LOCK_NAME).exists()  # released when the run ended
    finally:
        if holder.poll() is None:
            holder.kill()
