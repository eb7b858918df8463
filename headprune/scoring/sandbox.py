"""Which walls a generated program runs behind on this machine, and running it behind them.

The runner tries the strongest isolation first and keeps the first that runs a probe program (once per process):

    namespaces  Linux with user namespaces (or root): new user, PID, network, mount, IPC and UTS namespaces; the
                program sees a read-only root holding only the system's and Python's files, a fresh /proc of its
                own processes and an in-memory folder (64 MiB); the namespace ends with its first process.
    process     Linux without usable namespaces (e.g. Ubuntu 24.04 restricts them, or a container's seccomp
                profile refuses them): the process itself, limited by Landlock (what it may read and write) and
                seccomp (no sockets, no new processes, sessions or signals).
    plain       neither works (or not Linux: macOS): an empty environment, limits, its own session, the audit hook.

A mode can be asked for by name (``--sandbox-mode``; ``best_isolation(mode)``); left to choose, headprune refuses to
run programs in a mode that cannot keep the user's files and HF_TOKEN unreadable (``Isolation.contains``: plain, or
process without Landlock) unless that mode is named (``headprune.scoring.execution``).

The first two add seccomp (x86_64, aarch64) and Landlock wherever the kernel offers them; on Linux every mode
drops every capability and sets ``no_new_privs``; run as root, the program runs as a private uid where that uid
can read Python (else as uid 0 without capabilities). When the program shares headprune's uid with neither
namespaces nor Landlock, headprune marks itself non-dumpable while the program runs, so that its ``/proc``
entries (environment, memory) are closed to it. The mode in force, and why stronger ones were not, is logged
before the first program (:func:`announce`; a warning when weaker than namespaces with seccomp).
"""

from __future__ import annotations

import ctypes
import functools
import marshal
import logging
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path

log = logging.getLogger("headprune")

HERE = Path(__file__).resolve().parent
SETUP_FAILED = 125  # sandbox_child's exit code when a wall could not be put up
FILE_BYTES = 1 << 24  # the largest file (or stderr) a program may write
FOLDER_BYTES = 64 << 20  # the in-memory folder of the namespaces mode
PROCESSES = 16  # processes and threads of one program, where the count is the sandbox's own
TAIL_BYTES = 4096  # of stderr, read back for the last line
# A program must be able to import the standard library (json is not loaded at start) and write its folder.
PROBE = "import json\nopen('probe.txt', 'w').write(json.dumps('ok'))\nassert json.load(open('probe.txt')) == 'ok'\n"


@dataclass(frozen=True)
class Isolation:
    """The walls one program runs behind (see the module's docstring)."""

    namespaces: bool = False
    uid: int | None = None  # the private uid the program runs as (headprune run as root); None: the user's
    landlock: int = 0  # the Landlock ABI in force, 0: none
    seccomp: bool = False
    left_out: tuple[str, ...] = field(default=(), compare=False)  # the stronger layers tried, and why not

    @property
    def mode(self) -> str:
        return "namespaces" if self.namespaces else "process" if self.landlock or self.seccomp else "plain"

    @property
    def contains(self) -> bool:
        """Whether the program can read neither the user's files outside its folder nor any process's environment
        (HF_TOKEN in the user's shell): its own view of the files and processes (namespaces), or Landlock's
        allow-list of the system's and Python's files (which leaves /proc out)."""
        return self.namespaces or bool(self.landlock)

    @property
    def shares_parent_view(self) -> bool:
        """Whether the program could read headprune's /proc entries but for headprune being non-dumpable."""
        return not self.namespaces and self.uid is None and not self.landlock

    def describe(self) -> str:
        if self.mode == "plain":
            parts = ["no kernel isolation (the audit hook is the only wall against sockets, new processes and "
                     "writes: not a boundary against a hostile program; use a container or VM)"]
        else:
            parts = ["user/PID/network/mount/IPC/UTS namespaces with a read-only view of the system's and Python's "
                     "files" if self.namespaces else "no namespaces"]
        parts += [f"private uid {self.uid}"] if self.uid is not None else []
        parts += [f"Landlock ABI {self.landlock}"] if self.landlock else []
        parts += ["seccomp"] if self.seccomp else []
        parts += ["no capabilities, no_new_privs"] if sys.platform == "linux" else []
        if _process_limit(self) is None or process_limit_binds(self):  # seccomp refuses new processes, or a count
            limits = "CPU/memory/file/process/wall-clock limits"
        else:
            limits = "CPU/memory/file/wall-clock limits (no process limit: the kernel does not count root's)"
        return ", ".join(parts + [f"an empty environment, {limits}, the audit hook"])


@functools.cache
def readable_paths() -> tuple[str, ...]:
    """What a program may read: the system's programs and libraries, Python's installation (the virtual
    environment's packages included, so a program that imports numpy behaves as it would in the user's shell),
    the folders of the shared libraries this interpreter has loaded (Nix, Homebrew), and the two /etc files the
    loader and the clock read."""
    paths = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache", "/etc/localtime"]
    paths += [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
              os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))]
    with suppress(OSError), open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        paths += [os.path.dirname(line.split(maxsplit=5)[5].strip()) for line in maps
                  if line.count(" ") >= 5 and ".so" in line.rsplit("/", 1)[-1]]
    unique = sorted({os.path.normpath(p) for p in paths if p.startswith("/") and os.path.lexists(p)})
    return tuple(p for p in unique if not any(p.startswith(other + os.sep) for other in unique if other != p))


def launch(source: str, isolation: Isolation, *, time_limit_s: float, memory_bytes: int) -> tuple[int | None, str]:
    """Run ``source`` behind ``isolation``: its exit code (None: killed at the time limit) and the last line it
    wrote on stderr. Never waits on a pipe: stderr goes to a file of at most ``FILE_BYTES``; the wait ends at the
    limit, when the program's process group (and namespace) is killed whole, and is killed again after a normal
    exit to take anything it left behind."""
    with tempfile.TemporaryDirectory(prefix="headprune-code-") as top:
        folder = os.path.join(top, "work")
        os.mkdir(folder)
        os.mkdir(os.path.join(top, "root"))
        Path(folder, "program.py").write_text(source, encoding="utf-8")
        if isolation.uid is not None and not isolation.namespaces:  # the private uid works in the real folder
            os.chmod(top, 0o711)
            for path in (folder, os.path.join(folder, "program.py")):
                os.chown(path, isolation.uid, isolation.uid)
        spec = {"runner": os.getpid(), "python": sys.executable, "guard": str(HERE / "sandbox_guard.py"),
                "folder": folder, "root": os.path.join(top, "root"), "readable": list(readable_paths()),
                "namespaces": isolation.namespaces, "uid": isolation.uid, "landlock": bool(isolation.landlock),
                "seccomp": isolation.seccomp, "time_limit_s": time_limit_s, "memory_bytes": memory_bytes,
                "file_bytes": FILE_BYTES, "folder_bytes": FOLDER_BYTES, "processes": _process_limit(isolation),
                "site": [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]}
        # -S: no site (its .pth files cost more than most programs); the guard puts site-packages on the path.
        command = [sys.executable, "-I", "-S", "-B", str(HERE / "sandbox_child.py"), marshal.dumps(spec).hex()]
        with open(os.path.join(top, "stderr"), "w+b") as stderr, _shielded(isolation.shares_parent_view):
            try:
                process = subprocess.Popen(command, cwd=folder, env={}, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, stderr=stderr, close_fds=True,
                                           start_new_session=True)
            except OSError as error:
                return SETUP_FAILED, f"headprune sandbox: cannot set up: {error}"
            try:
                code = _wait(process, time_limit_s)
            finally:
                if process.returncode is None and isolation.namespaces:  # the reaper ends the namespace
                    process.send_signal(signal.SIGTERM)
                    _wait(process, 1.0)
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)  # the program and anything it started
                process.wait()
            return code, _last_line(stderr)


def _wait(process: subprocess.Popen, limit_s: float) -> int | None:
    """The exit code, or None at the limit. A thread waits for the process, so the end is seen the moment it
    comes (``Popen.wait(timeout)`` polls, up to 50 ms late: a third of a short program's run)."""
    waiter = threading.Thread(target=process.wait, daemon=True)
    waiter.start()
    waiter.join(limit_s)
    return process.returncode


def _process_limit(isolation: Isolation) -> int | None:
    """RLIMIT_NPROC counts a uid's processes: a limit only where the uid (or its namespace) is the program's own;
    elsewhere seccomp refuses new processes, or (plain) none may start."""
    if isolation.namespaces or isolation.uid is not None:
        return PROCESSES
    return None if isolation.seccomp else 0


def process_limit_binds(isolation: Isolation) -> bool:
    """Whether the program's RLIMIT_NPROC holds: the kernel does not apply it to root (the uid of the initial user
    namespace, with or without namespaces of its own), so it binds only where the program's real uid is not 0."""
    if _process_limit(isolation) is None:
        return False
    return isolation.uid not in (None, 0) if isolation.uid is not None else os.getuid() != 0


def _last_line(stderr) -> str:  # noqa: ANN001 - a binary file
    stderr.seek(0, os.SEEK_END)
    stderr.seek(max(0, stderr.tell() - TAIL_BYTES))
    lines = stderr.read().decode("utf-8", "replace").strip().splitlines()
    return lines[-1][:300] if lines else ""


@contextmanager
def _shielded(needed: bool) -> Iterator[None]:
    """Mark headprune non-dumpable while a program that shares its uid runs: its /proc/<pid>/environ, mem and fd
    are then closed to the program (Linux; a no-op elsewhere)."""
    if not needed or sys.platform != "linux":
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    before = libc.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
    libc.prctl(4, 0, 0, 0, 0)
    try:
        yield
    finally:
        libc.prctl(4, max(before, 0), 0, 0, 0)


def candidates() -> list[Isolation]:
    """Every isolation worth trying here, strongest first: namespaces, then none, each as a private uid first
    when run as root; Landlock and seccomp wherever the kernel offers them; plain last."""
    if sys.platform != "linux":
        return [Isolation()]
    from headprune.scoring import sandbox_guard, sandbox_kernel  # noqa: F401 - also leaves their bytecode cached

    abi, filtered = sandbox_kernel.landlock_abi(), sandbox_kernel.seccomp_available()
    uids = [2_000_000_000 + secrets.randbelow(1 << 24), None] if os.getuid() == 0 else [None]
    found = [Isolation(namespaces, uid, abi, filtered) for namespaces in (True, False) for uid in uids]
    return found + [Isolation(False, uid) for uid in uids]


_chosen: dict[str | None, Isolation] = {}  # by the mode asked for (None: the strongest), probed once per process


def best_isolation(mode: str | None = None) -> Isolation:
    """The strongest isolation that runs a probe program here, of ``mode`` (``namespaces``, ``process``, ``plain``)
    when given (probed once per process; :func:`announce` says which).

    Raises:
        OSError: no isolation (of ``mode``) runs a program here; the message says what was tried and why not.
    """
    if mode in _chosen:
        return _chosen[mode]
    left_out = []
    wanted = [candidate for candidate in candidates() if mode is None or candidate.mode == mode]
    if not wanted:
        needs = {"namespaces": "Linux", "process": "Linux with Landlock or a seccomp filter"}.get(mode, "")
        raise OSError(f"headprune sandbox: the {mode} mode needs {needs}, which this machine does not offer")
    for candidate in wanted:
        started = time.perf_counter()
        code, last = launch(PROBE, candidate, time_limit_s=10.0, memory_bytes=1 << 30)
        if code == 0:
            _chosen[mode] = replace(candidate, left_out=tuple(left_out))
            break
        left_out.append(f"{candidate.mode}{'' if candidate.uid is None else ' as a private uid'}: "
                        f"{last or f'exit {code}'} ({time.perf_counter() - started:.2f} s)")
    else:
        raise OSError(f"headprune sandbox: no way to run a program {f'in the {mode} mode ' if mode else ''}here: "
                      + "; ".join(left_out))
    return _chosen[mode]


_announced: list[Isolation] = []  # the isolations said, by identity (a new probe is said again)


def announce(isolation: Isolation, *, asked: bool) -> None:
    """Log, once per chosen isolation, the mode programs run in and its walls (a warning when weaker than the
    namespaces mode with seccomp), with the stronger ones that were not available and why."""
    if any(said is isolation for said in _announced):
        return
    _announced.append(isolation)
    say = log.info if isolation.namespaces and isolation.seccomp else log.warning
    say("code execution: programs run in the %s mode%s, behind %s%s", isolation.mode, " (as asked)" if asked else "",
        isolation.describe(), f" (not available: {'; '.join(isolation.left_out)})" if isolation.left_out else "")
