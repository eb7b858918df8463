"""Writes the machine has no room for: a full disk (``ENOSPC``), a used-up quota (``EDQUOT``) or a file larger than
the process may write (``EFBIG``: ``ulimit -f``, whose signal Python ignores, or the file system's own limit). These
are the environment, not headprune and not the user's input: they become a :class:`NoRoomError`, one line that says
which folder needs room, and exit 2.

They reach headprune as an ``OSError`` with its ``errno``, or only as text in another library's error (safetensors
writes from Rust: ``No space left on device (os error 28)``), anywhere in an error's chain of causes.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from headprune.core.paths import shown
from headprune.errors import NoRoomError

# errno -> how Linux and Rust's io::ErrorKind spell it, for errors that only carry the text.
_SPELLINGS = {errno.ENOSPC: ("No space left on device", "StorageFull", "os error 28"),
              errno.EDQUOT: ("Disk quota exceeded", "QuotaExceeded", "os error 122"),
              errno.EFBIG: ("File too large", "FileTooLarge", "os error 27")}


def no_room_code(error: BaseException | None) -> int | None:
    """``ENOSPC``, ``EDQUOT`` or ``EFBIG`` when ``error`` (or an error it was raised from) is one, else None."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _SPELLINGS:
            return error.errno
        text = str(error)
        for code, spellings in _SPELLINGS.items():
            if any(spelling in text for spelling in spellings):
                return code
        error = error.__cause__ or error.__context__
    return None


def no_room(error: BaseException, folder: str | os.PathLike | None) -> NoRoomError | None:
    """The one-line error for ``error`` when it is a write the machine had no room for (``folder``: where it was
    written; None where that is not known), else None."""
    code = no_room_code(error)
    if code is None:
        return None
    if folder is None:
        filename = getattr(error, "filename", None)
        folder = Path(os.fsdecode(filename)).parent if isinstance(filename, (str, bytes, os.PathLike)) else None
    where = shown(folder) if folder is not None else "a folder headprune writes to (the output's, TMPDIR, HF_HOME)"
    if code == errno.EFBIG:
        text = (f"a file written in {where} grew past the largest file this process may write (ulimit -f, or the "
                "file system's limit); raise the limit or write elsewhere")
    elif code == errno.EDQUOT:
        text = f"the disk quota that holds {where} is used up; free room there or write elsewhere"
    else:
        text = f"no space left on the device that holds {where}; free room there or write elsewhere"
    return NoRoomError(text, folder=None if folder is None else Path(folder))


__all__ = ["no_room", "no_room_code"]
