"""One run per output folder: an operating-system file lock beside the folder, and a record naming its holder.

The lock is ``filelock.FileLock`` on ``.NAME.headprune.lock`` next to the folder ``NAME`` (beside it, not in it: an
export replaces its folder as a whole, and the lock must outlive the swap). On Unix that is ``flock``: the kernel
releases it when the holding process ends however it ends, so a killed run leaves no stale lock to take over, and
two processes arriving together cannot both win (on a filesystem without ``flock`` filelock falls back to its own
marker, which checks the holder's pid and start time and takes a dead holder's marker over in one atomic step).
The lock file stays in place after release, as filelock intends (waiters must share one inode); it is empty.

Who holds the lock is recorded apart, in ``.NAME.headprune.holder`` (pid, host, command, since when), written once
the lock is held and removed on release, so that a refusal can name the holder. Whoever takes the lock also removes
the temporary folders a killed run left beside the folder (:func:`headprune.core.io.clean_leftovers`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from headprune.core.io import atomic_write_text, clean_leftovers, process_alive, user_path
from headprune.errors import ResultFileError

LOCK_SUFFIX = ".headprune.lock"
HOLDER_SUFFIX = ".headprune.holder"
LEGACY_LOCK_NAME = ".headprune.lock"  # inside the folder: headprune before the lock moved beside it

log = logging.getLogger("headprune")


def lock_path(folder: Path) -> Path:
    """The lock file of ``folder`` (``.NAME.headprune.lock`` beside it; the same for every spelling of the path)."""
    resolved = user_path(folder).resolve()
    if not resolved.name:
        raise ResultFileError(f"{folder} is a filesystem root; headprune writes its outputs into a folder of their own")
    return resolved.with_name(f".{resolved.name}{LOCK_SUFFIX}")


def _holder_path(lock: Path) -> Path:
    return lock.with_name(lock.name[:-len(LOCK_SUFFIX)] + HOLDER_SUFFIX)


@dataclass
class _Hold:
    """This process's hold of one folder's lock (the lock is taken once per process; nested holds count)."""

    lock: object  # filelock.FileLock
    thread: int
    what: str
    record: str
    depth: int = 1


_HOLDS: dict[Path, _Hold] = {}
_HOLDS_GUARD = threading.Lock()


class FolderLock:
    """One run per output folder; a context manager (or :meth:`acquire` / :meth:`release`).

    A second process that wants a held folder is refused at once with a message naming the holder (pid, host,
    command, since when). Within one process, the thread that holds a folder may take it again (find's library
    call inside the command that also writes its outputs); another thread is refused.
    """

    def __init__(self, folder: Path, *, what: str = "find") -> None:
        self.folder = Path(folder)
        self.what = what
        self.path = lock_path(self.folder)
        self.held = False

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self) -> FolderLock:
        """Raises: ResultFileError (exit 2) when another run holds the folder, or it cannot be locked."""
        if self.held:
            return self
        with _HOLDS_GUARD:
            hold = _HOLDS.get(self.path)
            if hold is not None:
                if hold.thread != threading.get_ident():
                    raise ResultFileError(f"{self.folder} is in use by another {hold.what} in this process; wait for "
                                          "it, or use another output folder")
                hold.depth += 1
                self.held = True
                return self
            self._take()
            self.held = True
        self._legacy_lock()
        removed = clean_leftovers(self.folder)
        if removed:
            log.info("%s: removed %d temporary folder(s) a killed run left: %s", self.folder, len(removed),
                     ", ".join(removed))
        return self

    def _take(self) -> None:
        from filelock import FileLock, Timeout

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(self.path), timeout=0)
            lock.acquire()
        except Timeout:
            raise ResultFileError(self._busy()) from None
        except OSError as error:
            raise ResultFileError(f"cannot lock {self.folder}: {error.strerror or error}") from error
        holder = _holder_path(self.path)
        earlier = _read(holder)
        if earlier and earlier.get("pid") != os.getpid() and not process_alive(earlier.get("pid")):
            log.warning("%s: taking over the lock of %s (pid %s on %s), which is no longer running", self.folder,
                        earlier.get("command", "a run"), earlier.get("pid"), earlier.get("host"))
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": self.what,
                             "token": os.urandom(8).hex(),
                             "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        try:
            atomic_write_text(holder, record)
        except BaseException:
            lock.release()
            raise
        _HOLDS[self.path] = _Hold(lock, threading.get_ident(), self.what, record)

    def _busy(self) -> str:
        """The refusal: who holds the folder. A holder that has just taken the lock may not have written its record
        yet (the record then still names the run before it): look again for a moment."""
        holder = None
        for _ in range(25):
            holder = _read(_holder_path(self.path))
            if holder and (holder.get("host") != socket.gethostname() or process_alive(holder.get("pid"))):
                break
            time.sleep(0.02)
        if not holder:
            return f"{self.folder} is in use by another headprune run; wait for it, or use another output folder"
        return (f"{self.folder} is in use by another {holder.get('command', 'run')} (pid {holder.get('pid')} on host "
                f"{holder.get('host')}, since {holder.get('started', '?')}); wait for it, or use another output folder")

    def _legacy_lock(self) -> None:
        """A lock file an older headprune left inside the folder: refused while its process runs, else removed."""
        legacy = self.folder / LEGACY_LOCK_NAME
        old = _read(legacy)
        if old is None:
            return
        if old.get("host") == socket.gethostname() and (old.get("pid") == os.getpid()
                                                        or not process_alive(old.get("pid"))):
            legacy.unlink(missing_ok=True)
            return
        self.release()
        raise ResultFileError(f"{self.folder} is in use by an older headprune {old.get('command', 'run')} (pid "
                              f"{old.get('pid')} on host {old.get('host')}); wait for it (if that process is gone, "
                              f"delete {legacy})")

    def release(self) -> None:
        """Let the folder go (the outermost release of this process's hold unlocks it)."""
        if not self.held:
            return
        self.held = False
        with _HOLDS_GUARD:
            hold = _HOLDS.get(self.path)
            if hold is None:
                return
            hold.depth -= 1
            if hold.depth > 0:
                return
            del _HOLDS[self.path]
            holder = _holder_path(self.path)
            try:
                if holder.read_text(encoding="utf-8") == hold.record:
                    holder.unlink()
            except OSError:
                pass
            hold.lock.release()  # type: ignore[attr-defined]


def _read(path: Path) -> dict | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        return record if isinstance(record, dict) else None
    except (OSError, ValueError):
        return None
