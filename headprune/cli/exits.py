"""Exit codes and error messages of the command line, in one place.

    0    success (find: the primary set's gain is confirmed on held-out data; with --objective compress:
         the set is accepted as non-inferior on held-out data)
    1    a normal negative outcome: find confirmed no improvement; export failed its verification
    2    bad input (one line on stderr naming the problem); also a write the machine has no room for (a full
         disk or quota, a file-size limit: the line names the folder)
    3    an internal error (a bug, or a self-check that failed; ``HEADPRUNE_DEBUG=1`` shows the traceback)
    4    a data-parallel run lost one of its processes (``--resume`` continues from the journal)
    130  interrupted: nothing was written (a Ctrl-C once a command's output is in place no longer changes its exit)
"""

from __future__ import annotations

import errno
import re
import signal

import click

from headprune.errors import HeadpruneError, InternalCheckError, SettingsError, VerificationError, WorkerLostError

OK = 0
NEGATIVE = 1
BAD_INPUT = 2
INTERNAL = 3
WORKER_LOST = 4
INTERRUPTED = 130

_process = False  # the command runs as the headprune process itself (cli.main.main), not inside another program


def run_as_process() -> None:
    """Say that the command is the whole process (``cli.main.main``), whose end :func:`output_in_place` may shield."""
    global _process
    _process = True


def output_in_place() -> None:
    """The command's output has moved into place: from here to the process's end a Ctrl-C is ignored, so that exit
    130 always means that nothing was written (a script must not read a finished export as a failed one). Inside
    another program (a test's in-process runner) its own handler stays."""
    if _process:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def for_error(error: HeadpruneError) -> int:
    if isinstance(error, SettingsError):  # search and export settings alike
        return BAD_INPUT
    if isinstance(error, VerificationError):
        return NEGATIVE
    if isinstance(error, InternalCheckError):
        return INTERNAL
    if isinstance(error, WorkerLostError):
        return WORKER_LOST
    return BAD_INPUT


def for_verdict(confirmed: bool) -> int:
    """find's exit code: the verdict on the primary set (``FindResult.accepted``)."""
    return OK if confirmed else NEGATIVE


def message(error: HeadpruneError, ctx: click.Context | None) -> str:
    """The error in the command's own words: keyword arguments it names become the command's options."""
    text = str(error)
    command = ctx.command if ctx is not None else None
    if not error.settings or command is None:
        return text
    flags = {p.name: p.opts[0] for p in command.params if isinstance(p, click.Option) and p.name and p.opts}
    for name in error.settings:
        if name in flags:
            text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", flags[name], text)
    return text


def bad_path(error: BaseException) -> str | None:
    """The one-line message of an error no input check caught but that is bad input, or the environment, all the
    same: a path longer than the system allows (``File name too long``), a full disk, a used-up quota or a file-size
    limit (``headprune.core.room``: which folder needs room), wherever it was first met; None for any other error."""
    from headprune.core.paths import shown
    from headprune.core.room import no_room

    room = no_room(error, None)
    if room is not None:
        return str(room)
    if not isinstance(error, OSError) or error.errno != errno.ENAMETOOLONG:
        return None
    name = f": {shown(error.filename)}" if error.filename is not None else ""
    return f"a path is too long for this system ({error.strerror}{name}); give a shorter one"
