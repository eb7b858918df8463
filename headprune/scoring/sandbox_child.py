"""The sandboxed process: run as ``python -I -S -B sandbox_child.py SPEC`` with an empty environment, it puts up
the walls the runner asked for (``headprune.scoring.sandbox`` writes SPEC: a dict, marshalled, in hex), then runs
the guard and the program in this same interpreter (``sandbox_guard``). Standard library only.

In order: die with the runner (``PR_SET_PDEATHSIG``); with ``namespaces``, new user (unless root), PID, network,
mount, IPC and UTS namespaces, this process staying outside as the reaper of the namespace's first process
(whose end ends every process in it; SIGTERM to the reaper ends it), and a private root: an empty tmpfs holding
read-only binds of the ``readable`` paths, four device files, a fresh ``/proc`` and an in-memory folder for the
program, pivoted into, the old root detached; then the resource limits; then no capabilities (bounding, ambient,
inheritable, then held), a private uid when started as root, ``no_new_privs``, Landlock and seccomp when asked;
then the program. Any step that fails ends the process with exit code 125 and one line on stderr: a layer asked
for is a layer in force, never skipped.

The walls are the kernel's, so they bind whatever code runs in this process, ctypes included; the setup's
helpers are dropped from ``sys.modules`` only so that the audit hook (the second wall) sees a later import.
"""

from __future__ import annotations

import _frozen_importlib_external as _bootstrap  # importlib's file loader, loaded at every start
import _signal  # signal without its enum classes, which cost more to import than the rest here
import marshal
import os
import resource
import sys

SETUP_FAILED = 125
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")


SIGKILL, SIGTERM = 9, 15


class _Module:
    """A sibling file run as a module: no package here, and this process is timed, so its code comes from the
    bytecode cache the runner's own import left (the loader already in memory checks it against the source)."""

    def __init__(self, path: str) -> None:
        name = os.path.basename(path)[:-3]
        self.__dict__.update(__name__=name)
        exec(_bootstrap.SourceFileLoader(name, path).get_code(name), self.__dict__)  # noqa: S102


def _kernel() -> _Module:
    return _Module(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_kernel.py"))


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def enter_namespaces(kernel, spec: dict) -> None:  # noqa: ANN001
    """New namespaces; returns in their first process, while this process waits outside and exits as it does."""
    uid, gid = os.getuid(), os.getgid()
    flags = (kernel.CLONE_NEWNS | kernel.CLONE_NEWPID | kernel.CLONE_NEWNET | kernel.CLONE_NEWIPC
             | kernel.CLONE_NEWUTS | (0 if uid == 0 else kernel.CLONE_NEWUSER))
    kernel.unshare(flags)
    if uid != 0:  # the program keeps the user's uid (no other is ours to give), mapped to itself
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
        _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
    first = os.fork()
    if first:  # SIGTERM from the runner at the time limit: end the namespace, then reap it (no zombie left)
        _signal.signal(SIGTERM, lambda *_: os.kill(first, SIGKILL))
        status = os.waitpid(first, 0)[1]
        code = os.waitstatus_to_exitcode(status)
        os._exit(code if code >= 0 else 128 - code)
    kernel.prctl(kernel.PR_SET_PDEATHSIG, SIGKILL, "pdeathsig")


def _mount_point(target: str, like: str) -> None:
    if os.path.isdir(like):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()  # noqa: SIM115


def build_view(kernel, spec: dict, source: bytes) -> None:  # noqa: ANN001
    """A private root holding only what the program may read, and its own writable folder; entered."""
    root, folder = spec["root"], spec["folder"]
    kernel.mount(None, "/", None, kernel.MS_REC | kernel.MS_PRIVATE)  # nothing propagates back out
    kernel.mount("tmpfs", root, "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV, "mode=0755,size=1m")
    for path in spec["readable"]:
        target = root + path
        if os.path.islink(path):  # /lib -> usr/lib: the same link, pointing into the view
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(os.readlink(path), target)
        elif os.path.exists(path):
            _mount_point(target, path)
            kernel.mount(path, target, None, kernel.MS_BIND | kernel.MS_REC)
            kernel.read_only(target)
    for device in DEVICES:
        _mount_point(root + device, device)
        kernel.mount(device, root + device, None, kernel.MS_BIND)
    os.symlink("/proc/self/fd", root + "/dev/fd")
    owner, group = (spec["uid"], spec["uid"]) if spec["uid"] is not None else (os.getuid(), os.getgid())
    os.makedirs(root + folder)
    kernel.mount("tmpfs", root + folder, "tmpfs", kernel.MS_NOSUID | kernel.MS_NODEV,
                 f"mode=0700,uid={owner},gid={group},size={spec['folder_bytes']},nr_inodes=4096")
    with open(os.path.join(root + folder, "program.py"), "wb") as handle:
        handle.write(source)
    os.chown(os.path.join(root + folder, "program.py"), owner, group)
    os.makedirs(root + "/proc")
    kernel.mount("proc", root + "/proc", "proc", kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_NOEXEC)
    kernel.pivot_into(root)
    kernel.mount(None, "/", None, kernel.MS_REMOUNT | kernel.MS_RDONLY | kernel.MS_NOSUID | kernel.MS_NODEV)


def set_limits(spec: dict) -> None:
    """CPU seconds, address space, file size, no core files; processes when the count is the sandbox's own."""
    cpu = int(spec["time_limit_s"]) + 1
    limits = [(resource.RLIMIT_CPU, cpu), (resource.RLIMIT_FSIZE, spec["file_bytes"]), (resource.RLIMIT_CORE, 0)]
    if spec["processes"] is not None:
        limits.append((resource.RLIMIT_NPROC, spec["processes"]))
    for which, value in limits:
        resource.setrlimit(which, (value, value))
    try:
        resource.setrlimit(resource.RLIMIT_AS, (spec["memory_bytes"], spec["memory_bytes"]))
    except (OSError, ValueError):
        if sys.platform == "linux":
            raise  # elsewhere (macOS) the kernel may not offer it: the memory limit is Linux's promise


def lock_down(kernel, spec: dict) -> None:  # noqa: ANN001
    """No capabilities, the private uid, no_new_privs, then Landlock and seccomp as asked."""
    kernel.drop_capabilities()
    if spec["uid"] is not None:
        os.setgroups([])
        os.setresgid(spec["uid"], spec["uid"], spec["uid"])
        os.setresuid(spec["uid"], spec["uid"], spec["uid"])
    kernel.drop_capabilities(held=True)  # root, or a new user namespace's: none left
    kernel.prctl(kernel.PR_SET_NO_NEW_PRIVS, 1, "no_new_privs")
    if spec["landlock"]:
        readable = [p for p in spec["readable"] if os.path.exists(p)] + [d for d in DEVICES if d != "/dev/null"]
        kernel.landlock(readable, [spec["folder"], "/dev/null"])
    if spec["seccomp"]:
        kernel.seccomp()


def _forget(module: _Module) -> None:
    """Take the setup's helpers out of reach of ordinary imports: ``import ctypes`` asks the guard again."""
    module.__dict__.clear()
    for name in [n for n in sys.modules if n.split(".")[0] in ("ctypes", "_ctypes")]:
        del sys.modules[name]


def main() -> None:
    spec = marshal.loads(bytes.fromhex(sys.argv[1]))
    os.umask(0o022)  # the view's folders must let a private uid through
    try:
        kernel = _kernel() if sys.platform == "linux" else None
        if kernel is not None:
            kernel.prctl(kernel.PR_SET_PDEATHSIG, SIGKILL, "pdeathsig")
            if os.getppid() != spec["runner"]:  # the runner is already gone
                os._exit(SETUP_FAILED)
        guard = _Module(spec["guard"])  # read now: the view leaves the package out
        if spec["namespaces"]:
            with open(os.path.join(spec["folder"], "program.py"), "rb") as handle:
                source = handle.read()
            enter_namespaces(kernel, spec)
            build_view(kernel, spec, source)
        os.chdir(spec["folder"])
        set_limits(spec)
        if kernel is not None:
            lock_down(kernel, spec)
            _forget(kernel)
    except (OSError, ValueError) as error:
        os.write(2, f"headprune sandbox: cannot set up: {error}\n".encode())
        os._exit(SETUP_FAILED)
    # This interpreter runs the program: the walls above bind whatever code runs here, and started with -I -S
    # it is as bare as a fresh one; a second interpreter would cost a start (a third of a short program's run).
    guard.run("program.py", spec["folder"], spec["site"])


if __name__ == "__main__":
    main()
