"""A full disk, a used-up quota or a file-size limit is the environment: one line naming the folder that needs room,
exit 2, and nothing half-written left behind (before, ``internal error``, exit 3).

The errors are the kernel's own (safetensors reports them from Rust, as text): ``/dev/full`` answers every write with
ENOSPC, ``ulimit -f`` (RLIMIT_FSIZE) makes a write past it fail with EFBIG, and a tiny tmpfs (mounted in a user
namespace, where the machine allows one) fills up.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from headprune.core.io import atomic_folder
from headprune.errors import NoRoomError
from helpers import build_tiny, save_folder

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/dev/full and RLIMIT_FSIZE as Linux has them")


@pytest.fixture(scope="module")
def model(tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    folder = tmp_path_factory.mktemp("room") / "model"
    save_folder(build_tiny("llama", tokenizer, seed=4).model, tokenizer, folder)
    return folder


def _full(staging: Path) -> None:
    with open("/dev/full", "w") as stream:  # noqa: PTH123 - the device, not a path of ours
        stream.write("x" * 4096)
        stream.flush()


def test_a_full_device_while_an_output_is_written_names_the_folder(tmp_path) -> None:
    target = tmp_path / "out"
    with pytest.raises(NoRoomError, match=f"no space left on the device that holds {tmp_path}; free room"):
        with atomic_folder(target) as staging:
            (staging / "a.txt").write_text("written before the disk filled")
            _full(staging)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # the staging folder and its owner file went too


def test_an_atomic_file_write_past_the_file_size_limit_names_the_folder(tmp_path) -> None:
    """The real limit, in a child process (Python ignores SIGXFSZ, so the write fails with EFBIG)."""
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000));"
            "from pathlib import Path; from headprune.core.io import atomic_write_text;"
            "from headprune.errors import NoRoomError\n"
            "try:\n    atomic_write_text(Path(sys.argv[1]), 'x' * 5000)\n"
            "except NoRoomError as error:\n    print(error)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "results.jsonl")], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert done.stdout.startswith(f"a file written in {tmp_path} grew past the largest file"), done
    assert list(tmp_path.iterdir()) == []


def _limited(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.parametrize("command", ["export", "find"])
def test_a_file_size_limit_is_one_line_and_exit_2(model, tmp_path, command) -> None:
    """``ulimit -f`` smaller than the weights (export) or the journal (find): one line naming the output's folder,
    exit 2 (not an internal error), and no output or staging folder left."""
    from headprune.tasks import write_jsonl_task
    from headprune.testing import random_choice_task

    write_jsonl_task(random_choice_task(40, seed=1), tmp_path / "t.jsonl")
    out = tmp_path / "outputs" / "out"
    out.parent.mkdir()
    args = {"export": ["export", str(model), "--heads", "L0.H1", "--out", str(out)],
            "find": ["find", str(model), "--task", str(tmp_path / "t.jsonl"), "--discovery", "24", "--heldout", "16",
                     "--nominees", "2", "--max-heads", "2", "--finalists", "1", "--out", str(out)]}[command]
    limit = {"export": 60_000, "find": 3_000}[command]  # the weights are 158 kB; the journal grows past 3 kB
    done = subprocess.run([sys.executable, "-m", "headprune", *args], capture_output=True, text=True,
                          preexec_fn=lambda: _limited(limit), env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2, done.stderr
    assert last.startswith("headprune: error: a file written in ") and str(out.parent) in last, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    left = sorted(p.name for p in out.parent.iterdir())
    assert [name for name in left if ".tmp-" in name] == []
    assert command == "find" or not out.exists()


def _user_namespaces() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-rm", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _user_namespaces(), reason="this machine offers no user namespace to mount a tmpfs in")
def test_a_full_disk_under_a_real_export(model, tmp_path) -> None:
    """A 100 kB tmpfs fills while the export's 158 kB of weights are written."""
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (f"mount -t tmpfs -o size=100k tmpfs {disk} && {sys.executable} -m headprune export {model} --heads "
              f"L0.H1 --out {disk}/out; echo exit=$?; ls -A {disk}")
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    last = done.stderr.strip().splitlines()[-1]
    assert "exit=2" in done.stdout, done.stdout + done.stderr
    assert last == f"headprune: error: no space left on the device that holds {disk}; free room there or write " \
                   "elsewhere", done.stderr
    assert [name for name in done.stdout.split("exit=2", 1)[1].split() if name != ".out.headprune.lock"] == []
