"""Running generated programs against their tests: each in a separate, isolated, limited process.

Generated code is untrusted, so each program runs where the user's secrets, files and network are out of reach
by construction, not by asking the program to behave (``headprune.scoring.sandbox`` picks the strongest walls
this machine offers and says which). What holds in every mode: a separate process started with an empty
environment (no variable of headprune's, HF_TOKEN included) and no open descriptors but its stdin (/dev/null),
stdout (/dev/null) and stderr (a file of at most 16 MiB); its own session and process group, killed whole at
the wall-clock limit and after it exits, so the runner never waits past the limit on a child that keeps a pipe
open; CPU-time, memory (1 GiB), file-size limits; an audit hook refusing sockets, new processes, ctypes and
writes outside its folder (the second wall: it is Python and can be switched off).

On Linux with user namespaces (most distributions; root anywhere) the program also runs in its own user, PID,
network, mount, IPC and UTS namespaces: it sees no other process (not headprune's /proc/<pid>/environ), has no
network at all, reads only the system's and Python's files through a read-only view, writes only its own
in-memory folder (64 MiB), and every process it starts, in any session, ends when it does; seccomp refuses
sockets, new processes, sessions, signals, tracing, io_uring, mounts, namespaces and changes to files' mode,
owner and times; no capability in any set, no_new_privs, Landlock where the kernel has it, and a private uid
when headprune runs as root (where that uid could not read Python: uid 0 without any capability). Without
namespaces (Ubuntu 24.04 restricts them; container profiles may refuse them), Landlock and seccomp keep reads
to the same files, writes to its folder, and refuse network, new processes and signals; where neither Landlock
nor another uid closes headprune's /proc entries, headprune makes itself non-dumpable while the program runs.
On macOS and other systems only the common walls hold: the program can read what the user can read (including
a process's environment, through ``ps``) and reach the network if it switches the hook off.

What it does not promise: protection against kernel exploits, side channels (timing, CPU caches), or what a
program can learn from the files it may read (Python's installation); without seccomp, a memory bound across a
program's processes (each has 1 GiB, up to 16 of them) nor, without namespaces too, that a child in a new
session ends with the program; without namespaces, a bound on the total written (each file is at most 16 MiB,
their number is bounded by the time limit only); nor that a program which passes is correct. Untrusted models' code is best run
in a container or VM all the same. Nothing here runs unless code execution is allowed
(``--allow-code-execution`` or ``HF_ALLOW_CODE_EVAL=1``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from headprune.core.limits import word
from headprune.errors import TaskError
from headprune.scoring.sandbox import SETUP_FAILED, Isolation, announce, best_isolation, launch

ENV_VAR = "HF_ALLOW_CODE_EVAL"  # lm-evaluation-harness's and Hugging Face evaluate's switch
MODE_VAR = "HEADPRUNE_SANDBOX_MODE"  # the sandbox mode where --sandbox-mode is not given
TIME_LIMIT_S = 10.0
MEMORY_LIMIT_BYTES = 1 << 30

_permitted = False
_mode: str | None = None  # --sandbox-mode, inside permit_code_execution


@dataclass(frozen=True)
class Outcome:
    """How one program ran: ``passed`` when it exited 0; ``status`` is ``passed``, ``failed`` (an exception,
    a failed assertion or a refused operation), ``timeout`` or ``error`` (it could not be started)."""

    passed: bool
    status: str
    detail: str = ""


def code_execution_allowed() -> bool:
    return _permitted or os.environ.get(ENV_VAR, "") == "1"


@contextmanager
def permit_code_execution(allowed: bool = True, *, mode: str | None = None) -> Iterator[None]:
    """Allow running generated code inside the ``with`` block (the CLI's ``--allow-code-execution``), in the
    sandbox ``mode`` when given (``--sandbox-mode``; else ``HEADPRUNE_SANDBOX_MODE``, else ``auto``)."""
    global _permitted, _mode
    before = _permitted, _mode
    _permitted, _mode = before[0] or allowed, mode if mode is not None else before[1]
    try:
        yield
    finally:
        _permitted, _mode = before


def sandbox_mode() -> str:
    """The sandbox mode asked for: ``auto`` (the strongest here, refused when it cannot contain a program) or a
    mode by name (one of ``headprune.core.choices.SANDBOX_MODES``).

    Raises:
        SettingsError: HEADPRUNE_SANDBOX_MODE names no mode.
    """
    return _mode or word(MODE_VAR)


def code_isolation() -> Isolation:
    """The walls generated programs run behind, chosen once per process and logged with their mode: the mode asked
    for, or (``auto``) the strongest this machine offers, which must keep the user's files and every process's
    environment (HF_TOKEN) out of the program's reach.

    Raises:
        TaskError: the mode asked for cannot run a program here; or, left to choose, the strongest mode here cannot
            contain a program (plain; process without Landlock) and was not named.
    """
    mode = sandbox_mode()
    try:
        isolation = best_isolation(None if mode == "auto" else mode)
    except OSError as error:
        raise TaskError(str(error)) from None
    if mode == "auto" and not isolation.contains:
        missing = "; ".join(isolation.left_out)[:200] or "this system has no user namespaces or Landlock"
        raise TaskError(f"code execution: the strongest sandbox here is the {isolation.mode} mode ({missing}), in "
                        "which a program could read your files and your shell's HF_TOKEN; give sandbox_mode "
                        f"{isolation.mode} (or {MODE_VAR}={isolation.mode}) to run in it all the same, or run in a "
                        "container or VM", settings=("sandbox_mode",))
    announce(isolation, asked=mode != "auto")
    return isolation


def require_code_execution(task_name: str) -> None:
    """Check, before anything is loaded, that generated code may run here: allowed, and a sandbox that holds (or
    one named) is available (:func:`code_isolation`, which logs the mode in use).

    Raises:
        TaskError: code execution is not allowed, or no acceptable sandbox."""
    if not code_execution_allowed():
        raise TaskError(f"task {task_name!r} runs generated code: it runs only with --allow-code-execution "
                        f"(or {ENV_VAR}=1), and generated code is untrusted: use a container or VM")
    code_isolation()


def run_program(source: str, *, time_limit_s: float = TIME_LIMIT_S, memory_bytes: int = MEMORY_LIMIT_BYTES,
                isolation: Isolation | None = None) -> Outcome:
    """Run ``source`` in a separate, isolated, limited interpreter; passed when it exits 0 within the time limit.

    Args:
        isolation: the walls to run behind; default the mode asked for, or the strongest that contains a program
            (:func:`code_isolation`).

    Raises:
        TaskError: code execution is not allowed, or no acceptable sandbox (:func:`code_isolation`).
    """
    if not code_execution_allowed():
        require_code_execution("code")
    isolation = isolation or code_isolation()
    code, last = launch(source, isolation, time_limit_s=time_limit_s, memory_bytes=memory_bytes)
    if code is None:
        return Outcome(False, "timeout", f"killed after {time_limit_s:g} s")
    if code == SETUP_FAILED and last.startswith("headprune sandbox: cannot set up"):
        return Outcome(False, "error", last)
    return Outcome(code == 0, "passed" if code == 0 else "failed", last)
