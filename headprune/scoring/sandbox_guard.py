"""The guard around the program, run by the sandboxed process once its walls stand (``sandbox_child``):
``run(program.py, FOLDER, SITE)``.

It puts the interpreter's site-packages folders (SITE) on ``sys.path`` and ``exit``, ``quit``, ``help`` in the
builtins, as ``site`` would without reading its ``.pth`` files (the slowest part of starting), installs an audit
hook, then runs the program. The hook refuses sockets, new processes, ``ctypes`` and writing, renaming or
deleting anything outside FOLDER, with a ``PermissionError`` the program's traceback names. It is the second
wall, not the boundary: the hook is Python, and a program determined to can switch it off. The first wall is the
kernel's: what the hook refuses, the process cannot reach either (on Linux; elsewhere the hook is all there is,
see ``headprune.scoring.execution``).
"""

from __future__ import annotations

import os
import sys


def install_guard(folder: str) -> None:
    """Refuse, through an audit hook that cannot be removed, what a scored program never needs."""
    blocked_imports = frozenset({"socket", "_socket", "ssl", "_ssl", "ctypes", "_ctypes", "subprocess",
                                 "_posixsubprocess", "multiprocessing", "_multiprocessing", "asyncio"})
    blocked_events = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                      "os.forkpty", "os.kill", "os.killpg", "ctypes.", "pty.", "resource.setrlimit")
    # Where each event that writes carries a dir_fd (-1: none): a path relative to an open folder is not judged.
    writes = {"os.remove": (1,), "os.rmdir": (1,), "os.mkdir": (2,), "os.rename": (2, 3), "os.chmod": (2,),
              "os.chown": (3,), "os.link": (2, 3), "os.symlink": (2,), "os.utime": (3,), "os.truncate": (),
              "shutil.rmtree": (1,), "shutil.move": (), "shutil.copyfile": ()}
    prefix = folder + os.sep
    realpath, fsdecode = os.path.realpath, os.fsdecode

    def inside(path: object) -> bool:
        try:
            return realpath(fsdecode(path)).startswith(prefix)
        except (TypeError, ValueError):
            return False

    def guard(event: str, args: tuple) -> None:
        if event == "import" and args[0].split(".")[0] in blocked_imports:
            raise PermissionError(f"headprune sandbox: import of {args[0]} is not allowed")
        if event.startswith(blocked_events):
            raise PermissionError(f"headprune sandbox: {event} is not allowed")
        if event == "open" and args[0] is not None and not isinstance(args[0], int):
            mode, flags = args[1] or "r", args[2] or 0
            writing = any(c in str(mode) for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            if writing and not inside(args[0]):
                raise PermissionError(f"headprune sandbox: writing {args[0]} is not allowed")
        if event == "sqlite3.connect" and args[0] not in (":memory:", "", b":memory:", b"") and not inside(args[0]):
            raise PermissionError(f"headprune sandbox: a database at {args[0]} is not allowed")
        if event in writes and (any(args[i] not in (None, -1) for i in writes[event] if i < len(args))
                                or not all(inside(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike)))):
            raise PermissionError(f"headprune sandbox: {event} outside the temporary folder is not allowed")

    sys.addaudithook(guard)


def run(path: str, folder: str, site_packages: list[str]) -> None:
    """Run the program at ``path`` as ``__main__``, behind the hook."""
    import site

    sys.path.extend(site_packages)
    site.setquit()  # exit(), quit(), help(), copyright(): the builtins site adds
    site.sethelper()
    site.setcopyright()
    with open(path, encoding="utf-8") as handle:
        code = compile(handle.read(), "program.py", "exec")
    install_guard(os.path.realpath(folder))
    sys.argv[:] = [path]
    exec(code, {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102 - the point of the sandbox

