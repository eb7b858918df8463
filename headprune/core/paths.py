"""Paths of outputs: never on an input, short enough for the names headprune puts beside them, and moved into place
without replacing what appeared there meanwhile.

An output (``find``'s, ``eval``'s or ``export``'s ``--out``) may not be an input of the same command, hold one, or lie
inside one (a model folder, a task or control file, the find run an export reads): writing it would replace or mix
into what the command reads (:func:`refuse_overlap`, by device and inode, whatever the spelling). Its name leaves room
for the temporary and lock names headprune writes beside it (:func:`check_output_name`), so that a name the filesystem
cannot hold is refused before any work, not at the end. The final moves go through :func:`rename_noreplace` and
:func:`exchange` (Linux ``renameat2``): a move never replaces a path that appeared since it was checked.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from headprune.errors import ResultFileError

# Characters headprune adds to an output's name beside it: ".NAME.tmp-PID-RANDOM.owner" (28 with a 7-digit pid),
# ".NAME.headprune.holder" and its atomic temporary (28).
NAME_ROOM = 32
LINKS_WALKED = 20_000  # entries of an input folder looked at for symbolic links (a model folder has a few dozen)
SHOWN_CHARS = 120  # of a path in a message: the start and the end, a 5,000-character path stays readable


def shown(path: str | os.PathLike) -> str:
    """``path`` for a message: as it is, or its start and end around ``...`` when it is long."""
    text = os.fspath(path)
    if len(text) <= SHOWN_CHARS:
        return text
    half = SHOWN_CHARS // 2
    return f"{text[:half]}...{text[-half:]} ({len(text):,} characters)"


def _limit(folder: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(folder, name)
    except (OSError, ValueError, AttributeError):  # not a POSIX system, or a folder that cannot say
        return default


def check_output_name(path: Path) -> None:
    """Refuse an output path the filesystem could not hold together with the names headprune writes beside it:
    any name in it longer than the filesystem allows, its own name longer than that less :data:`NAME_ROOM`, or a
    path longer than the system's path limit less the same room. Nothing is created.

    Raises:
        ResultFileError
    """
    absolute = Path(os.path.abspath(path))
    existing = absolute
    while not os.path.isdir(existing) and existing != existing.parent:
        existing = existing.parent
    name_max, path_max = _limit(existing, "PC_NAME_MAX", 255), _limit(existing, "PC_PATH_MAX", 4096)
    for index, part in enumerate(absolute.parts[1:], start=1):
        allowed = name_max - (NAME_ROOM if index == len(absolute.parts) - 1 else 0)
        if len(os.fsencode(part)) > allowed:
            raise ResultFileError(f"{shown(path)}: the name {shown(part)} has {len(os.fsencode(part)):,} bytes, "
                                  f"more than the {allowed} an output's name may have here (the filesystem allows "
                                  f"{name_max}; headprune adds its temporary names beside it)", settings=("out",))
    if len(os.fsencode(str(absolute))) > path_max - NAME_ROOM:
        raise ResultFileError(f"{shown(path)}: the path has {len(os.fsencode(str(absolute))):,} bytes, more than the "
                              f"{path_max - NAME_ROOM} an output may have here", settings=("out",))


def refuse_overlap(out: Path, inputs: Iterable[tuple[str, Path]], *, advice: str = "write it elsewhere") -> None:
    """Refuse an output that is an input, holds one or lies inside one, compared by the file system's own identity
    (device and inode of each file and folder), so that no spelling of a path reaches an input: symbolic links
    (``link/..`` is taken the way the kernel takes it, after the link), bind mounts, a case-insensitive file system.
    Both the name that is written and what it points to count, and so do the files a folder's symbolic links point to
    (a Hugging Face cache snapshot's ``model.safetensors -> ../../blobs/SHA``). An input that does not exist yet (a
    Hub id's cache folder, filled by its load) is compared by its real path.

    Args:
        out: the output file or folder.
        inputs: ``(what, path)`` pairs: ``("the model", folder)``, ``("the task file", path)``.
        advice: the end of the message.

    Raises:
        ResultFileError
    """
    read = [item for what, source in inputs for item in _read_places(what, source)]
    if not read:
        return
    for place in _places(out):
        chain = _chain(place)  # the output's place, then each folder above it
        for what, where, identity in read:
            if identity is None:  # not there yet (a Hub id's cache folder, which its load fills): by real path
                if place == where or place.startswith(where.rstrip(os.sep) + os.sep):
                    _refuse(out, "is" if place == where else "lies inside", what, where, advice)
                continue
            if chain and chain[0][0] == place and chain[0][1] == identity:
                _refuse(out, "is", what, where, advice)
            if any(found == identity for path, found in chain if path != place):
                _refuse(out, "lies inside", what, where, advice)
        if chain and chain[0][0] == place and os.path.isdir(place):
            for what, where, identity in read:
                if identity is not None and any(found == chain[0][1] for _path, found in _chain(where)[1:]):
                    _refuse(out, "holds", what, where, advice)


def _refuse(out: Path, how: str, what: str, where: str, advice: str) -> None:
    raise ResultFileError(f"{shown(out)} {how} {what} ({shown(where)}); {advice}", settings=("out",))


def _places(path: str | os.PathLike) -> list[str]:
    """Where writing ``path`` lands, as real paths: the name itself in its folder (what a rename replaces), and what
    it points to when it is a link (what an open writes). Links and ``..`` are followed in order, as the kernel does
    (``os.path.realpath``; ``os.path.abspath`` would drop ``link/..`` before the link is followed)."""
    text = os.path.expanduser(os.fspath(path))
    if not os.path.isabs(text):
        text = os.path.join(os.getcwd(), text)
    try:
        head, name = os.path.split(text.rstrip(os.sep) or os.sep)
        named = os.path.realpath(text) if name in ("", ".", "..") else os.path.join(os.path.realpath(head), name)
        places = [named, os.path.realpath(text)]
    except (OSError, ValueError):  # a name too long, a NUL byte: nothing can be written there either
        return []
    return list(dict.fromkeys(places))


def _identity(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return None
    return found.st_dev, found.st_ino


def _chain(place: str) -> list[tuple[str, tuple[int, int]]]:
    """``place`` and every folder above it that exists, with their identities (nearest first)."""
    chain, current = [], place
    while True:
        identity = _identity(current)
        if identity is not None:
            chain.append((current, identity))
        parent = os.path.dirname(current)
        if parent == current:
            return chain
        current = parent


def _read_places(what: str, source: str | os.PathLike | None) -> list[tuple[str, str, tuple[int, int] | None]]:
    """``(what, real path, identity)`` of an input: its name and what it points to, and, for a folder, what the
    symbolic links inside it point to (named after the link: ``the model's model.safetensors``); one that does not
    exist has no identity."""
    if source is None:  # a model built in memory: read from no folder
        return []
    places = _places(source)
    found = [(what, place, _identity(place)) for place in places if _identity(place) is not None]
    if places and not found:  # not there (yet): compared by its real path
        return [(what, places[-1], None)]
    folder = os.path.realpath(source) if os.path.isdir(source) else None
    for link, target in _links_inside(folder) if folder is not None else ():
        identity = _identity(target)
        if identity is not None:
            found.append((f"{_possessive(what)} {link}", target, identity))
    return found


def _links_inside(folder: str, limit: int = LINKS_WALKED) -> Iterator[tuple[str, str]]:
    """``(name inside folder, real target)`` of the symbolic links under ``folder`` (links to folders are not walked
    into: their target is what they lead to); at most ``limit`` entries are looked at."""
    seen = 0
    for root, folders, files in os.walk(folder, followlinks=False):
        for name in folders + files:
            seen += 1
            if seen > limit:
                return
            path = os.path.join(root, name)
            if not os.path.islink(path):
                continue
            try:
                target = os.path.realpath(path)
            except OSError:  # a link the system will not let us read (/proc/1/cwd): nothing can be written there
                continue
            yield os.path.relpath(path, folder), target


def _possessive(what: str) -> str:
    return what + ("'" if what.endswith("s") else "'s")


def rename_noreplace(source: Path, target: Path) -> None:
    """Move ``source`` to ``target`` only if ``target`` does not exist, in one step where the system can (Linux
    ``renameat2(RENAME_NOREPLACE)``); elsewhere checked just before an ordinary rename.

    Raises:
        FileExistsError: ``target`` exists (nothing moved). OSError: the move failed.
    """
    if _renameat2(source, target, 1) is None:  # RENAME_NOREPLACE unavailable here
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
        os.rename(source, target)


def exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the system cannot."""
    return _renameat2(first, second, 2) is not None


def move_into_place(staging: Path, target: Path, *, replace: bool, last: Sequence[str],
                     check: Callable[[Path], None] | None) -> None:
    """The final move of ``staging`` to ``target`` (``headprune.core.io.atomic_folder``): renamed into place,
    exchanged with the folder it replaces, or its files moved into the existing folder (``last`` last).

    Raises:
        OSError, or what ``check`` raises on the folder taken out of place (then put back).
    """
    if not target.exists():
        rename_noreplace(staging, target)
    elif replace and any(target.iterdir()):
        old = staging.with_name(staging.name + ".old")
        if exchange(staging, target):  # the old folder is now where staging was; back if it is not as checked
            _still_as_checked(staging, check, undo=lambda: exchange(staging, target))
            shutil.rmtree(staging, ignore_errors=True)
        else:
            target.rename(old)
            _still_as_checked(old, check, undo=lambda: rename_noreplace(old, target))
            try:
                rename_noreplace(staging, target)
            except OSError:
                rename_noreplace(old, target)  # the previous folder back in place
                raise
    else:
        _move_files(staging, target, last)


def _move_files(staging: Path, target: Path, last: Sequence[str]) -> None:
    """Move the files of ``staging`` into the existing folder ``target`` (``last`` last), each by rename: a file
    there is replaced, a link or a folder never. Every destination is looked at before the first move, so a refusal
    moves nothing; a move that fails after others (something appeared meanwhile) says which moved.

    Raises:
        OSError: a destination is a link or a folder (nothing moved), or a move failed (:class:`PartlyMovedError`
            where others had moved).
    """
    items = sorted(staging.iterdir(), key=lambda p: (p.name in last, p.name))
    for item in items:
        destination = target / item.name
        if destination.is_symlink() or destination.exists() and not destination.is_file():
            raise FileExistsError(errno.EEXIST, f"{shown(destination)} is a symbolic link or a folder",
                                  str(destination))
    moved: list[str] = []
    for item in items:
        destination = target / item.name
        try:
            if destination.exists() and not destination.is_symlink():
                os.replace(item, destination)  # a file the check allowed to be replaced
            else:
                rename_noreplace(item, destination)
        except OSError as error:
            if moved:  # the others are the new run's now: said, rather than that nothing changed
                raise PartlyMovedError(error.errno, error.strerror, error.filename, moved=moved) from error
            raise
        moved.append(item.name)


class PartlyMovedError(OSError):
    """A move into an existing folder failed after some files had moved (``moved``: their names)."""

    def __init__(self, *args: object, moved: Sequence[str]) -> None:
        super().__init__(*args)
        self.moved = tuple(moved)


def _still_as_checked(old: Path, check: Callable[[Path], None] | None, *, undo: Callable[[], object]) -> None:
    """Check the folder just taken out of place once more (something may have been added between the check and
    the move); put it back where it was when it fails."""
    if check is None:
        return
    try:
        check(old)
    except BaseException:
        undo()
        raise


def _renameat2(first: Path, second: Path, flags: int) -> bool | None:
    """``renameat2(first, second, flags)``: True when done, None where the system or filesystem lacks it.

    Raises:
        OSError: it refused (FileExistsError for an existing target with RENAME_NOREPLACE).
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a C library without renameat2 (glibc before 2.28, musl before 1.2.5)
        return None
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_cwd = -100  # AT_FDCWD
    if renameat2(at_cwd, os.fsencode(first), at_cwd, os.fsencode(second), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):  # a filesystem or kernel without it
        return None
    raise OSError(code, os.strerror(code), str(second))


__all__ = ["NAME_ROOM", "PartlyMovedError", "check_output_name", "exchange", "move_into_place", "refuse_overlap",
           "rename_noreplace", "shown"]
