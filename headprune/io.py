"""Atomic outputs: write into a temporary sibling, then rename, so a reader never sees half a file."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from headprune.errors import InternalCheckError, ResultFileError


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
    """Write ``data`` as strict JSON (no NaN or Infinity, which JSON does not have and other readers refuse).

    Raises:
        InternalCheckError: a value is not finite (a broken model is refused before anything is scored, so a NaN
            here is a bug); nothing is written.
    """
    try:
        text = json.dumps(data, indent=2, sort_keys=False, allow_nan=False)
    except ValueError as error:
        raise InternalCheckError(f"not writing {path}: a value is NaN or infinite ({error})") from None
    atomic_write_text(path, text + "\n")


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


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """The bytes of ``path``, read only when it is a regular file of at most ``max_bytes``: a FIFO or a device
    would block or never end, so its type is checked before it is opened, and it is opened without blocking in
    case it became one since.

    Raises:
        OSError: it cannot be read (FileNotFoundError when it does not exist).
        ValueError: not a regular file, or larger than ``max_bytes`` (the message says which).
    """
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError("not a regular file (a FIFO, device or folder)")
    handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file (a FIFO, device or folder)")
        if info.st_size > max_bytes:
            raise ValueError(f"{info.st_size:,} bytes, more than the limit of {max_bytes:,}")
        with os.fdopen(os.dup(handle), "rb") as stream:
            data = stream.read(max_bytes + 1)
    finally:
        os.close(handle)
    if len(data) > max_bytes:  # it grew while being read
        raise ValueError(f"more than the limit of {max_bytes:,} bytes")
    return data

