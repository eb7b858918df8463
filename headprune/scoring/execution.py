"""Running generated programs against their tests: a separate, limited Python process per program.

Generated code is untrusted. Each program runs in a fresh interpreter (``python -I``) in its own temporary
folder, with a wall-clock limit (the whole process group is killed when it runs over), CPU-time, memory,
file-size and process limits, an environment without the user's variables, and an audit hook installed
before the program's first line that refuses sockets, new processes, ``ctypes`` and writing, renaming or
deleting anything outside the temporary folder. This follows lm-evaluation-harness and HumanEval, and like
theirs it is a guard against accidents, not a security boundary: run untrusted models' code in a container
or VM. Nothing here runs unless code execution is allowed (``--allow-code-execution`` or
``HF_ALLOW_CODE_EVAL=1``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from headprune.errors import TaskError

ENV_VAR = "HF_ALLOW_CODE_EVAL"  # lm-evaluation-harness's and Hugging Face evaluate's switch
TIME_LIMIT_S = 10.0
MEMORY_LIMIT_BYTES = 1 << 30

_permitted = False

# Runs in the child before the program: limits, then an audit hook that cannot be removed.
_GUARD = r'''
import os, resource, sys
limit_s, memory, folder = float(sys.argv[2]), int(sys.argv[3]), os.path.realpath(sys.argv[4])
resource.setrlimit(resource.RLIMIT_CPU, (int(limit_s) + 1, int(limit_s) + 1))
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 24, 1 << 24))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
_BLOCKED_IMPORTS = {"socket", "_socket", "ssl", "_ssl", "ctypes", "_ctypes", "subprocess", "_posixsubprocess",
                    "multiprocessing", "_multiprocessing", "asyncio"}
_BLOCKED_EVENTS = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                   "os.forkpty", "os.kill", "os.killpg", "ctypes.", "pty.", "resource.setrlimit")
_WRITES = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link", "os.symlink",
           "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile")
def _inside(path):
    try:
        path = os.fsdecode(path) if not isinstance(path, int) else None
    except TypeError:
        return False
    return path is not None and os.path.realpath(path).startswith(folder + os.sep)
def _guard(event, args):
    if event == "import" and args[0].split(".")[0] in _BLOCKED_IMPORTS:
        raise PermissionError(f"headprune sandbox: import of {args[0]} is not allowed")
    if event.startswith(_BLOCKED_EVENTS):
        raise PermissionError(f"headprune sandbox: {event} is not allowed")
    if event == "open" and args[0] is not None and not isinstance(args[0], int):
        mode, flags = args[1] or "r", args[2] or 0
        writing = any(c in str(mode) for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        if writing and not _inside(args[0]):
            raise PermissionError(f"headprune sandbox: writing {args[0]} is not allowed")
    if event in _WRITES and not all(_inside(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))):
        raise PermissionError(f"headprune sandbox: {event} outside the temporary folder is not allowed")
with open(sys.argv[1], encoding="utf-8") as handle:
    _source = handle.read()
_code = compile(_source, "program.py", "exec")
sys.addaudithook(_guard)
del sys.argv[1:]
exec(_code, {"__name__": "__main__", "__builtins__": __builtins__})
'''


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
def permit_code_execution(allowed: bool = True) -> Iterator[None]:
    """Allow running generated code inside the ``with`` block (the CLI's ``--allow-code-execution``)."""
    global _permitted
    before = _permitted
    _permitted = before or allowed
    try:
        yield
    finally:
        _permitted = before


def require_code_execution(task_name: str) -> None:
    """Raises:
        TaskError: code execution is not allowed."""
    if not code_execution_allowed():
        raise TaskError(f"task {task_name!r} runs generated code: it runs only with --allow-code-execution "
                        f"(or {ENV_VAR}=1), and generated code is untrusted: use a container or VM")


def run_program(source: str, *, time_limit_s: float = TIME_LIMIT_S,
                memory_bytes: int = MEMORY_LIMIT_BYTES) -> Outcome:
    """Run ``source`` in a separate limited interpreter; passed when it exits 0 within the time limit.

    Raises:
        TaskError: code execution is not allowed.
    """
    require_code_execution("code")
    with tempfile.TemporaryDirectory(prefix="headprune-code-") as folder:
        program = Path(folder) / "program.py"
        program.write_text(source, encoding="utf-8")
        env = {"PATH": "/usr/bin:/bin", "HOME": folder, "TMPDIR": folder, "PYTHONHASHSEED": "0",
               "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
        command = [sys.executable, "-I", "-B", "-c", _GUARD, str(program), str(time_limit_s), str(memory_bytes), folder]
        try:
            process = subprocess.Popen(command, cwd=folder, env=env, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as error:
            return Outcome(False, "error", str(error))
        try:
            _, stderr = process.communicate(timeout=time_limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the program and anything it started
            process.communicate()
            return Outcome(False, "timeout", f"killed after {time_limit_s:g} s")
        last = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        return Outcome(process.returncode == 0, "passed" if process.returncode == 0 else "failed", last[0][:300])
