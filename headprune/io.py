"""Atomic outputs: write into a temporary sibling, then rename, so a reader never sees half a file."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from headprune.errors import ResultFileError

WEIGHT_SUFFIXES = (".safetensors", ".bin")


def sha256_file(path: Path, digest: hashlib._Hash | None = None) -> str:
    """Feed a file to ``digest`` (a new sha256 when ``None``) in 4 MiB blocks; return the hex digest."""
    digest = digest if digest is not None else hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def hash_weights(folder: Path) -> str:
    """``sha256:...`` over a model folder's weight files (name and bytes, in name order)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).iterdir() if p.suffix in WEIGHT_SUFFIXES):
        digest.update(path.name.encode())
        sha256_file(path, digest)
    return "sha256:" + digest.hexdigest()


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (same-folder temporary file, then ``os.replace``)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as error:
        raise ResultFileError(f"cannot write {path}: {error.strerror or error}") from error
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: object) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


@contextmanager
def atomic_folder(target: Path, *, replace: bool = False) -> Iterator[Path]:
    """Yield a temporary folder beside ``target``; on success it becomes ``target``, on failure it goes.

    Args:
        target: the folder to create.
        replace: an existing ``target`` is replaced (after the new one is complete); otherwise files of the
            new folder are moved into the existing one, each by rename.
    """
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    except OSError as error:
        raise ResultFileError(f"cannot write to {target}: {error.strerror or error}") from error
    try:
        yield staging
        if target.exists() and replace:
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            target.rename(old)
            staging.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        elif target.exists():
            for item in staging.iterdir():
                os.replace(item, target / item.name)
            staging.rmdir()
        else:
            staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def check_writable_folder(folder: Path) -> None:
    """Fail early, with a clear message, when ``folder`` cannot be created or written (tried for real, in the
    nearest folder that exists: nothing is created here, so bad input found later leaves nothing behind)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ResultFileError(f"{folder} exists and is not a folder")
    existing = folder.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ResultFileError(f"cannot write to {folder}: {existing} is not a folder")
    try:
        handle, probe = tempfile.mkstemp(prefix=".write-probe-", dir=existing)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        raise ResultFileError(f"cannot write to {folder}: {error.strerror or error}") from error


LOCK_NAME = ".headprune.lock"


def _alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (a process of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class FolderLock:
    """One run per output folder: ``DIR/.headprune.lock`` names the process (pid, host) that holds it.

    Created with ``O_EXCL``, so two processes cannot both take a free lock. A lock left by a dead process on
    this host is taken over with a warning; a live one (or one held on another host, whose process cannot be
    checked from here) is refused with a message naming it. A lock of this very process (an earlier run in it
    that was interrupted) is taken over: runs in one process follow each other. Released by :meth:`release`,
    when the lock object is garbage-collected, or at interpreter exit; a release never removes another
    holder's lock (each lock carries a random token).
    """

    def __init__(self, folder: Path, *, what: str = "find") -> None:
        self.path = Path(folder) / LOCK_NAME
        self.what = what
        self.held = False
        self._record = ""

    def acquire(self) -> FolderLock:
        """Raises: ResultFileError (exit 2) when another live process holds the folder."""
        import atexit
        import logging
        import socket
        import time
        import weakref

        host, me = socket.gethostname(), os.getpid()
        record = json.dumps({"pid": me, "host": host, "command": self.what, "token": os.urandom(8).hex(),
                             "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        for _ in range(3):
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                handle = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is None:  # being written right now, or unreadable: look again
                    time.sleep(0.1)
                    continue
                pid, other = holder.get("pid"), holder.get("host")
                if other == host and pid == me:  # an earlier run of this process that was not released
                    self.path.unlink(missing_ok=True)  # (interrupted, its journal still referenced): runs in one
                    continue  # process follow each other
                if other == host and isinstance(pid, int) and not _alive(pid):
                    logging.getLogger("headprune").warning(
                        "%s: taking over the lock of %s (pid %s on %s), which is no longer running",
                        self.path.parent, holder.get("command", "a run"), pid, other)
                    self.path.unlink(missing_ok=True)
                    continue
                raise ResultFileError(
                    f"{self.path.parent} is in use by another {holder.get('command', 'run')} (pid {pid} on host "
                    f"{other}, since {holder.get('started', '?')}); wait for it, or use another output folder"
                    + ("" if other == host else f" (if that process is gone, delete {self.path})"))
            except OSError as error:
                raise ResultFileError(f"cannot lock {self.path.parent}: {error.strerror or error}") from error
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(record)
            self.held, self._record = True, record
            weakref.finalize(self, FolderLock._remove, self.path, record)
            atexit.register(FolderLock._remove, self.path, record)
            return self
        raise ResultFileError(f"cannot lock {self.path.parent}: {self.path} is unreadable; delete it if no run "
                              "is using the folder")

    def _holder(self) -> dict | None:
        try:
            holder = json.loads(self.path.read_text(encoding="utf-8"))
            return holder if isinstance(holder, dict) else None
        except (OSError, ValueError):
            return None

    @staticmethod
    def _remove(path: Path, record: str) -> None:
        """Delete the lock file if it is still ours (never another process's)."""
        try:
            if path.read_text(encoding="utf-8") == record:
                path.unlink()
        except OSError:
            pass

    def release(self) -> None:
        if self.held:
            self.held = False
            FolderLock._remove(self.path, self._record)
