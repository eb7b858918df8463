"""Atomic outputs: write into a temporary sibling, then rename, so a reader never sees half a file or folder.

Temporary folders are named ``.NAME.tmp-PID-RANDOM`` beside their target, and announced by an owner file
``.NAME.tmp-PID-RANDOM.owner`` (the process's id, host and start time) written before the folder is made and removed
after it is gone. A run killed in between leaves both; the next run on the target (:func:`clean_leftovers`) removes
exactly those whose owner is provably gone, and nothing else. Everything is created with the user's normal
permissions (the umask decides, as for any file the user makes), never the private 0700/0600 of ``tempfile``.
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from headprune.core.paths import PartlyMovedError, check_output_name, move_into_place, shown
from headprune.core.room import no_room
from headprune.errors import HeadpruneError, InternalCheckError, KeptOutputError, ResultFileError

OWNER_SUFFIX = ".owner"


def user_path(text: str | os.PathLike) -> Path:
    """``text`` as a path with a leading ``~`` or ``~user`` expanded, or as written where it names no home (as a
    shell leaves ``~nosuchuser``): ``Path.expanduser`` raises there."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        return Path(text)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a same-folder temporary file, then ``os.replace``)."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
    except OSError as error:
        raise no_room(error, path.parent) or ResultFileError(f"cannot write {path}: {error.strerror or error}") \
            from error
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        if no_room(error, path.parent) is not None:
            raise no_room(error, path.parent) from error
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


def umask() -> int:
    """The process's umask, read without changing it (Linux); else set and restored at once."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def give_normal_permissions(folder: Path) -> None:
    """Give everything in ``folder`` (and itself) the permissions the user's umask gives a new file or folder:
    libraries that write through ``tempfile`` leave 0600 files (transformers' ``model.safetensors``)."""
    mask = umask()
    for path in [Path(folder), *Path(folder).rglob("*")]:
        if path.is_symlink():
            continue
        executable = path.is_dir() or path.stat().st_mode & 0o111
        os.chmod(path, (0o777 if executable else 0o666) & ~mask)


def process_started(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux: clock ticks since boot), which tells a reused pid from the process
    that had it; None where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def process_alive(pid: object, started: object = None) -> bool:
    """Whether process ``pid`` of this host still runs (and is the one that started at ``started``, when given)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        pass
    except OverflowError:
        return False
    now = process_started(pid)
    return started is None or now is None or now == started


def _owner_record() -> str:
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": process_started(os.getpid())})


@contextmanager
def temporary_folder(target: Path) -> Iterator[Path]:
    """An empty folder beside ``target`` (same filesystem, so it can be renamed into place), removed on the way out
    whatever happened; announced by an owner file so that a killed run's folder can be recognised and removed later.
    """
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        while True:
            folder = target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
            owner = folder.with_name(folder.name + OWNER_SUFFIX)
            try:
                handle = os.open(owner, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                break
            except FileExistsError:
                continue
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(_owner_record())
        os.mkdir(folder, 0o777)  # the umask applies (tempfile.mkdtemp would make it 0700)
    except OSError as error:
        raise no_room(error, target.parent) or ResultFileError(f"cannot write to {target}: {error.strerror or error}") \
            from error
    kept = False
    try:
        yield folder
    except KeptOutputError:
        kept = True  # the folder holds a finished output that could not go into place: the user's now
        raise
    finally:
        if kept:
            owner.unlink(missing_ok=True)  # no longer announced as headprune's: no later run removes it
        else:
            _remove_owned(owner)


def _remove_owned(owner: Path) -> bool:
    """Remove the temporary folders an owner file announces (the folder, and the old target it may hold after a
    swap), then the owner file once they are gone."""
    folder = owner.with_name(owner.name[:-len(OWNER_SUFFIX)])
    leftovers = (folder, folder.with_name(folder.name + ".old"))
    for leftover in leftovers:
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
    if any(leftover.exists() for leftover in leftovers):
        return False  # kept: the owner file still says whose they are
    owner.unlink(missing_ok=True)
    return True


@contextmanager
def atomic_folder(target: Path, *, replace: bool = False, last: Sequence[str] = (),
                  check: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """Yield a temporary folder beside ``target``; on success its files become ``target``, on failure it goes.

    Args:
        target: the folder to write.
        replace: a non-empty ``target`` is replaced as a whole, and only once the new folder is complete (swapped
            in one step where the system can, then the old one removed); otherwise, and into an empty ``target``,
            the new files are moved into the existing folder, each by rename.
        last: names moved last into an existing folder (a record that says the rest is complete).
        check: the rule ``target`` must still meet, called on it right before the move (and, when a folder is
            replaced, on the folder taken out of place, before it is removed): what raises leaves the new folder
            where it is, replaces and removes nothing, and becomes a :class:`KeptOutputError` naming it. Each move
            also refuses to replace a path that appeared since (``rename_noreplace``).

    Raises:
        KeptOutputError: the check refused, or the move failed: the new output stays in its staging folder.
    """
    target = Path(target)
    with temporary_folder(target) as staging:
        try:
            yield staging
        except Exception as error:  # a full disk, a file-size limit while the output was written: say where
            if no_room(error, target.parent) is not None:
                raise no_room(error, target.parent) from error
            raise
        try:
            give_normal_permissions(staging)
            if check is not None:
                check(target)
            move_into_place(staging, target, replace=replace, last=last, check=check)
        except (OSError, HeadpruneError) as error:  # the check's refusal (an export's, a find run's), or the move's
            why = str(error) if isinstance(error, HeadpruneError) else f"{error.strerror or error}"
            done = (f"{', '.join(error.moved)} there {'are' if len(error.moved) > 1 else 'is'} the new output's; "
                    "the rest is" if isinstance(error, PartlyMovedError) else
                    "nothing there was replaced or removed, and it is")
            raise KeptOutputError(f"the new output was not moved into {shown(target)} ({why}); {done} kept in "
                                  f"{staging}", settings=("out", *getattr(error, "settings", ()))) from error


def clean_leftovers(target: Path) -> list[str]:
    """Remove the temporary folders that runs on ``target`` left when they were killed: only those whose owner file
    names a process of this host that is gone. Returns their names.

    Call it while holding the target's folder lock (no live run on the target can then be writing one).
    """
    target = Path(target)
    host, removed = socket.gethostname(), []
    try:
        owners = sorted(target.parent.glob(glob.escape(f".{target.name}.tmp-") + "*" + OWNER_SUFFIX))
    except OSError:
        return removed
    for owner in owners:
        try:
            record = json.loads(owner.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            if _cut_before_written(owner):
                owner.unlink(missing_ok=True)
                removed.append(owner.name)
            continue  # otherwise unreadable: not provably ours
        if not isinstance(record, dict) or record.get("host") != host or process_alive(record.get("pid"),
                                                                                      record.get("started")):
            continue
        if _remove_owned(owner):
            removed.append(owner.name[:-len(OWNER_SUFFIX)])
    return removed


def _cut_before_written(owner: Path) -> bool:
    """An owner file a run was killed between creating and writing: empty, and nothing it would announce exists.
    It holds nothing, and under the target's lock no live run can be writing it."""
    folder = owner.with_name(owner.name[:-len(OWNER_SUFFIX)])
    try:
        empty = owner.stat().st_size == 0
    except OSError:
        return False
    return empty and not any(p.exists() or p.is_symlink() for p in (folder, folder.with_name(folder.name + ".old")))


def refuse_unsafe_output(folder: Path) -> None:
    """Refuse a filesystem root, the home folder or a folder that holds it as an output folder.

    Raises:
        ResultFileError
    """
    resolved = Path(folder).expanduser().resolve()
    try:
        home = Path.home().resolve()
    except (RuntimeError, KeyError):  # no home folder known
        home = None
    if resolved.parent == resolved:
        what = "a filesystem root"
    elif home is not None and home.is_relative_to(resolved):
        what = "the home folder" if home == resolved else f"a folder that holds the home folder ({home})"
    else:
        return
    raise ResultFileError(f"{folder} is {what}; headprune writes its outputs into a folder of their own")


def check_writable_folder(folder: Path) -> None:
    """Fail early, with a clear message, when ``folder`` cannot be created or written (tried for real, in the
    nearest folder that exists: nothing is created here, so bad input found later leaves nothing behind)."""
    folder = Path(folder)
    check_output_name(folder)
    if folder.exists() and not folder.is_dir():
        raise ResultFileError(f"{folder} exists and is not a folder")
    existing = Path(os.path.realpath(folder))  # `link/..` as the kernel takes it (abspath would drop the pair)
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

