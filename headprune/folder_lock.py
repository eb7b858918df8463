"""One run per output folder: a lock file naming the process that holds the folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

from headprune.errors import ResultFileError

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
