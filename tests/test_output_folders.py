"""An output folder is only ever replaced when it is headprune's own: through the real command line, ``export``
refuses every folder that is not a previous export (exit 2, one line, nothing touched), replaces a previous one only
with ``--overwrite`` and only once the new one is verified, and shares find's folder lock; ``find`` refuses a folder
holding a run unless told to resume or overwrite, and holds its lock until its outputs are written; a killed run's
temporary folders are removed by the next run on the folder, and nothing that is not provably theirs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headprune.core.folder_lock import HOLDER_SUFFIX, lock_path
from headprune.core.io import process_started
from headprune.exporter import RECORD_NAME, read_record, verify_record
from headprune.tasks import write_jsonl_task
from helpers import break_slicing, build_tiny, random_choice_task, save_folder
from helpers.cli import assert_refused, invoke

FIND = ["--discovery", "24", "--heldout", "16", "--nominees", "2", "--max-heads", "2", "--finalists", "1",
        "--batch-size", "8"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    """A model folder, a task file and a finished find run beside them, as a user would have them."""
    folder = tmp_path_factory.mktemp("outputs")
    save_folder(build_tiny("llama", tokenizer, seed=3).model, tokenizer, folder / "model")
    write_jsonl_task(random_choice_task(40, seed=1), folder / "t.jsonl")
    done = invoke("find", str(folder / "model"), "--task", str(folder / "t.jsonl"), *FIND, "--out", str(folder / "run"))
    assert done.exit_code in (0, 1), done.output
    return folder


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` (hidden ones too) with its kind, size, modification time and mode."""
    found = {}
    for path in sorted(root.rglob("*")):
        stat = path.lstat()
        found[str(path.relative_to(root))] = (path.is_dir(), stat.st_size, stat.st_mtime_ns, stat.st_mode)
    return found


def export(inputs: Path, out: Path, *args: str, heads: str = "L0.H1"):  # noqa: ANN201
    return invoke("export", str(inputs / "model"), "--heads", heads, "--out", str(out), *args, catch_exceptions=True)


@pytest.mark.parametrize(("where", "fragment"), [
    ("run", "holds a find run (journal.jsonl, result.json)"),
    ("model", "is the source model"),
    (".", "holds the source model"),
    ("model/inside", "lies inside the source model"),
    ("notes", "exists and is not a headprune export (no headprune_export.json)"),
    ("link", "is a symbolic link"),
    ("/", "is a filesystem root"),
    ("HOME", "is the home folder"),
    ("HOME/..", "holds the home folder"),
])
@pytest.mark.parametrize("overwrite", [False, True])
def test_export_refuses_a_folder_that_is_not_its_own_and_touches_nothing(inputs, tmp_path, monkeypatch, where,
                                                                        fragment, overwrite) -> None:
    home = tmp_path / "users" / "alice"
    (home / "work").mkdir(parents=True)
    (home / "work" / "thesis.tex").write_text("years of work")
    monkeypatch.setenv("HOME", str(home))
    (inputs / "notes").mkdir(exist_ok=True)
    (inputs / "notes" / "ideas.txt").write_text("mine")
    if not (inputs / "link").is_symlink():
        (inputs / "link").symlink_to(inputs / "notes")
    out = {"/": Path("/"), "HOME": home, "HOME/..": home.parent}.get(where, inputs / where)
    before, home_before = snapshot(inputs), snapshot(tmp_path)
    result = export(inputs, out, *(["--overwrite"] if overwrite else []))
    assert_refused(result, fragment)
    assert snapshot(inputs) == before and snapshot(tmp_path) == home_before  # nothing created, moved or changed


def test_a_previous_export_is_replaced_only_with_overwrite_and_only_once_the_new_one_is_verified(
        inputs, tmp_path, monkeypatch) -> None:
    out = tmp_path / "pruned"
    assert export(inputs, out).exit_code == 0
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    before = snapshot(tmp_path)
    assert_refused(export(inputs, out, heads="L1.H0"), "holds a previous export; give --overwrite to replace it")
    assert snapshot(tmp_path) == before
    (out / "notes.txt").write_text("added by hand")  # a file the export did not write is never deleted
    assert_refused(export(inputs, out, "--overwrite", heads="L1.H0"), "holds files its export did not write (notes.txt)")
    (out / "notes.txt").unlink()
    with monkeypatch.context() as patched:  # the new export fails its verification: the old one stays, whole
        break_slicing(patched, 1.01)  # (scales layer 0's output projection: a head of layer 0 goes)
        failed = export(inputs, out, "--overwrite", heads="L0.H2")
        assert failed.exit_code == 1 and "nothing was written" in failed.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first
    replaced = export(inputs, out, "--overwrite", heads="L1.H0")
    assert replaced.exit_code == 0, replaced.output
    assert verify_record(out).removed_heads == ("L1.H0",)
    beside = sorted(p.name for p in tmp_path.iterdir())
    assert beside == [f".pruned{'.headprune.lock'}", "pruned"], beside  # no staging or old folder left


def test_an_empty_folder_is_used_as_it_is(inputs, tmp_path) -> None:
    """An empty folder holds nothing to lose: the files go into it, and the folder itself (perhaps a mount point, or
    one with permissions of its own) stays."""
    out = tmp_path / "empty"
    out.mkdir()
    out.chmod(0o751)
    inode = out.stat().st_ino
    assert export(inputs, out).exit_code == 0
    assert out.stat().st_ino == inode and out.stat().st_mode & 0o777 == 0o751
    assert verify_record(out).removed_heads == ("L0.H1",)


def _wait_for(condition, timeout: float = 300) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


def _headprune(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "headprune", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_two_exports_to_one_folder_the_second_is_refused_naming_the_first(inputs, tmp_path) -> None:
    out = tmp_path / "pruned"
    holder = lock_path(out).with_name(f".pruned{HOLDER_SUFFIX}")
    first = _headprune("export", str(inputs / "model"), "--heads", "L0.H1", "--verify-task", str(inputs / "t.jsonl"),
                       "--out", str(out))
    try:
        assert _wait_for(lambda: holder.exists() or first.poll() is not None) and first.poll() is None
        second = export(inputs, out)
        assert_refused(second, f"is in use by another export (pid {first.pid} on host {socket.gethostname()}")
    finally:
        first.wait(timeout=600)
    assert first.returncode == 0, first.stderr
    verify_record(out)  # the first export, whole


def test_find_refuses_a_folder_with_a_run_unless_told_to_resume_or_overwrite(inputs) -> None:
    run = inputs / "run"
    args = ["find", str(inputs / "model"), "--task", str(inputs / "t.jsonl"), *FIND, "--out", str(run)]
    before = snapshot(inputs)
    assert_refused(invoke(*args, catch_exceptions=True), "holds an earlier find run (journal.jsonl, result.json); "
                                                        "give --resume to continue it, --overwrite to start afresh")
    assert_refused(invoke(*args, "--resume", "--overwrite", catch_exceptions=True), "give one")
    assert snapshot(inputs) == before
    seeds = {json.loads((run / "result.json").read_text())["split"]["seed"]}
    again = invoke(*args[:-2], "--seed", "1", "--out", str(run), "--overwrite", catch_exceptions=True)
    assert again.exit_code in (0, 1), again.output
    seeds.add(json.loads((run / "result.json").read_text())["split"]["seed"])
    assert seeds == {0, 1}
    journal = (run / "journal.jsonl").read_text()
    assert json.loads(journal.split("\n")[0])["settings"]["seed"] == 1  # started afresh, not appended to


def test_find_holds_its_lock_until_its_outputs_are_written(inputs, tmp_path, monkeypatch) -> None:
    """While the last output (result.json, moved into place last) lands, another process cannot take the folder."""
    import headprune.core.paths

    out = tmp_path / "run"
    probes: list[subprocess.CompletedProcess] = []
    move = headprune.core.paths.rename_noreplace  # how a new file moves in: never onto one that appeared meanwhile

    def move_and_probe(source, target) -> None:  # noqa: ANN001
        move(source, target)
        if Path(target) == out / "result.json":
            probes.append(subprocess.run([sys.executable, "-c", "from headprune.core.folder_lock import FolderLock\n"
                                          f"FolderLock({str(out)!r}, what='export').acquire()"],
                                         capture_output=True, text=True))

    monkeypatch.setattr(headprune.core.paths, "rename_noreplace", move_and_probe)
    done = invoke("find", str(inputs / "model"), "--task", str(inputs / "t.jsonl"), *FIND, "--out", str(out))
    assert done.exit_code in (0, 1), done.output
    (probe,) = probes
    assert probe.returncode != 0 and f"in use by another find (pid {os.getpid()}" in probe.stderr, probe.stderr
    assert {"result.json", "report.md", "screen.png", "journal.jsonl"} <= {p.name for p in out.iterdir()}


def _owner(folder: Path, **record: object) -> None:
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"x" * 10)
    folder.with_name(folder.name + ".owner").write_text(json.dumps(record))


def test_a_killed_exports_temporary_folders_go_at_the_next_run_and_nothing_else(inputs, tmp_path) -> None:
    out = tmp_path / "pruned"
    staged = lambda: [p for p in tmp_path.glob(".pruned.tmp-*") if p.is_dir()]  # noqa: E731
    run = _headprune("export", str(inputs / "model"), "--heads", "L0.H1", "--verify-task", str(inputs / "t.jsonl"),
                     "--out", str(out))
    assert _wait_for(lambda: staged() or run.poll() is not None)
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    assert run.returncode == -signal.SIGKILL and not out.exists()
    killed = {p.name for p in tmp_path.glob(".pruned.tmp-*")}
    assert killed and any(name.endswith(".owner") for name in killed), killed
    me, host = os.getpid(), socket.gethostname()
    _owner(tmp_path / ".pruned.tmp-alive", pid=me, host=host, started=process_started(me))  # a live owner
    _owner(tmp_path / ".pruned.tmp-elsewhere", pid=2**22 + 7, host="another-host", started=None)  # cannot be checked
    _owner(tmp_path / ".pruned.tmp-reused", pid=me, host=host, started="1")  # its pid now names another process
    (tmp_path / ".pruned.tmp-nobody").mkdir()  # no owner file: not provably headprune's
    (tmp_path / ".pruned.tmp-cut.owner").touch()  # killed between creating its owner file and writing it
    (tmp_path / ".pruned.tmp-held").mkdir()
    (tmp_path / ".pruned.tmp-held.owner").touch()  # empty, but announces a folder: not provably headprune's
    assert export(inputs, out).exit_code == 0
    left = {p.name for p in tmp_path.iterdir()}
    assert not killed & left, left  # the killed run's folder and owner file: gone
    assert not {".pruned.tmp-reused", ".pruned.tmp-reused.owner"} & left  # and the one whose owner's pid was reused
    assert ".pruned.tmp-cut.owner" not in left
    assert {".pruned.tmp-alive", ".pruned.tmp-elsewhere", ".pruned.tmp-nobody", ".pruned.tmp-held",
            ".pruned.tmp-held.owner"} <= left  # the rest: kept
    assert (tmp_path / ".pruned.tmp-alive" / "weights.bin").is_file()


def test_a_gguf_export_leaves_no_temporary_folder(tmp_path, tokenizer, monkeypatch) -> None:  # noqa: ANN001
    import tempfile

    from helpers.extras import needs

    needs("gguf", "xllamacpp", extra="gguf")
    save_folder(build_tiny("llama", tokenizer, seed=5).model, tokenizer, tmp_path / "model")
    temp = tmp_path / "tmp"
    temp.mkdir()
    # In this process (a fresh one costs seconds of imports): TMPDIR for llama.cpp and any child, and Python's
    # tempfile, which read it once, made to read it again.
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    done = invoke("export", str(tmp_path / "model"), "--heads", "L1.H0", "--format", "gguf", "--out",
                  str(tmp_path / "gguf"), catch_exceptions=True)
    assert done.exit_code == 0, done.output
    assert read_record(tmp_path / "gguf").format == "gguf"
    assert list(temp.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [".gguf.headprune.lock", "gguf", "model", "tmp"]


def test_export_files_are_the_record_and_what_it_lists(inputs, tmp_path) -> None:
    """What the overwrite rule relies on: an export folder holds its record and exactly the files it lists."""
    from headprune.exporter.destination import unrecorded

    out = tmp_path / "pruned"
    assert export(inputs, out).exit_code == 0
    assert unrecorded(out) == [] and (out / RECORD_NAME).is_file()
    (out / "sub").mkdir()
    assert unrecorded(out) == ["sub"]
