"""Atomic outputs: write into a temporary sibling, then rename, so a reader never sees half a file."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from headprune.errors import ResultFileError


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
