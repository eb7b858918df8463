"""The Linux kernel's walls for a sandboxed program, through ``ctypes``: namespaces, mounts, Landlock, seccomp,
capabilities. Standard library only: the sandbox's first stage (``sandbox_child``) loads this file by path in a
bare interpreter, before any of the program runs.

Each function either does what it says or raises ``OSError`` naming the call that failed, so that a layer asked
for is a layer in force; the runner probes which layers this machine offers (``headprune.scoring.sandbox``).
"""

from __future__ import annotations

import ctypes
import os
import struct

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.syscall.restype = ctypes.c_long

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x4000000, 0x8000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
CLONE_THREAD = 0x10000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
MS_REC, MS_PRIVATE = 0x4000, 0x40000
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 4, 24, 38, 22

# Syscall numbers where glibc has no wrapper, or where the filter names them (x86_64 and aarch64 only).
_ARCH = os.uname().machine
_NUMBERS = {
    "x86_64": dict(pivot_root=155, socket=41, socketpair=53, ptrace=101, process_vm_readv=310,
                   process_vm_writev=311, clone=56, fork=57, vfork=58, setsid=112, setpgid=109, unshare=272,
                   setns=308, mount=165, umount2=166, chroot=161, keyctl=250, add_key=248, request_key=249,
                   bpf=321, perf_event_open=298, userfaultfd=323, kcmp=312, init_module=175, finit_module=313,
                   kill=62, tkill=200, tgkill=234, rt_sigqueueinfo=129, chmod=90, fchmod=91, fchmodat=268,
                   chown=92, fchown=93, lchown=94, fchownat=260, setxattr=188, lsetxattr=189, fsetxattr=190,
                   removexattr=197, lremovexattr=198, fremovexattr=199, utime=132, utimes=235, futimesat=261,
                   utimensat=280),
    "aarch64": dict(pivot_root=41, socket=198, socketpair=199, ptrace=117, process_vm_readv=270,
                    process_vm_writev=271, clone=220, setsid=157, setpgid=154, unshare=97, setns=268, mount=40,
                    umount2=39, chroot=51, keyctl=219, add_key=217, request_key=218, bpf=280, perf_event_open=241,
                    userfaultfd=282, kcmp=272, init_module=105, finit_module=273, kill=129, tkill=130, tgkill=131,
                    rt_sigqueueinfo=138, fchmod=52, fchmodat=53, fchownat=54, fchown=55, setxattr=5,
                    lsetxattr=6, fsetxattr=7, removexattr=14, lremovexattr=15, fremovexattr=16, utimensat=88),
}.get(_ARCH)
_COMMON = dict(mount_setattr=442, landlock_create_ruleset=444, landlock_add_rule=445, landlock_restrict_self=446,
               io_uring_setup=425, io_uring_enter=426, io_uring_register=427, clone3=435, pidfd_getfd=438,
               fchmodat2=452)
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}.get(_ARCH)


def _check(result: int, what: str) -> int:
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")
    return result


def syscall(name: str, *args: object) -> int:
    return _check(LIBC.syscall(ctypes.c_long(syscall_number(name)), *args), name)


def prctl(option: int, value: int = 0, what: str = "prctl") -> None:
    _check(LIBC.prctl(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)), what)


def unshare(flags: int) -> None:
    _check(LIBC.unshare(flags), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda text: None if text is None else os.fsencode(text)  # noqa: E731
    _check(LIBC.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)),
           f"mount {target}")


def read_only(target: str) -> None:
    """Make the bind mount at ``target`` and every mount below it read-only (``mount_setattr``, Linux 5.12;
    older kernels: a remount of the top mount, keeping the flags the kernel locked)."""
    attr = struct.pack("QQQQ", MS_RDONLY | MS_NOSUID, 0, 0, 0)  # MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID
    try:
        syscall("mount_setattr", ctypes.c_int(-100), os.fsencode(target), ctypes.c_uint(0x8000),  # AT_RECURSIVE
                ctypes.c_char_p(attr), ctypes.c_size_t(len(attr)))
    except OSError:
        locked = os.statvfs(target).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048)
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | locked)


def pivot_into(root: str) -> None:
    """Make ``root`` the filesystem root and drop the old one from view (pivot_root(".", ".")) ."""
    os.chdir(root)
    syscall("pivot_root", b".", b".")
    _check(LIBC.umount2(b".", MNT_DETACH), "umount2 old root")
    os.chdir("/")


def drop_capabilities(*, held: bool = False) -> None:
    """Empty the capability bounding, ambient and inheritable sets, so that no later exec, even as uid 0, gains
    a capability; with ``held``, also the capabilities this process holds (else it keeps them, to change uid)."""
    for cap in range(64):
        if LIBC.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) < 0 and ctypes.get_errno() == 22:  # EINVAL
            break  # past the last capability this kernel knows
    LIBC.prctl(47, ctypes.c_ulong(4), 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL (Linux 4.3)
    header = ctypes.create_string_buffer(struct.pack("Ii", 0x20080522, 0))  # _LINUX_CAPABILITY_VERSION_3, self
    data = ctypes.create_string_buffer(24)  # two of (effective, permitted, inheritable)
    _check(LIBC.capget(header, data), "capget")
    sets = [0] * 6 if held else list(struct.unpack("6I", data.raw))
    sets[2] = sets[5] = 0
    _check(LIBC.capset(header, ctypes.create_string_buffer(struct.pack("6I", *sets))), "capset")


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers; 0 when it has none (or it is disabled)."""
    try:
        return syscall("landlock_create_ruleset", None, ctypes.c_size_t(0), ctypes.c_uint(1))  # _VERSION
    except (OSError, KeyError):
        return 0


def landlock(readable: list[str], writable: list[str]) -> int:
    """Restrict this process and its children to reading ``readable`` and reading and writing ``writable`` (files
    or folders), no TCP, and (ABI 6) no signals or abstract sockets beyond the sandbox. Returns the ABI used."""
    abi = landlock_abi()
    if abi < 1:
        raise OSError(38, "landlock: not offered by this kernel")
    fs = (1 << 13) - 1 | (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0) | (1 << 15 if abi >= 5 else 0)
    net, scoped = (3 if abi >= 4 else 0), (3 if abi >= 6 else 0)
    attr = struct.pack("QQQ", fs, net, scoped)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    ruleset = syscall("landlock_create_ruleset", ctypes.c_char_p(attr), ctypes.c_size_t(len(attr)), ctypes.c_uint(0))
    try:
        read_rights = 1 | 4 | 8  # execute, read file, read dir
        file_rights = 1 | 2 | 4 | (1 << 14 if abi >= 3 else 0) | (1 << 15 if abi >= 5 else 0)
        for path, rights in [(p, read_rights) for p in readable] + [(p, fs) for p in writable]:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                allowed = rights if os.path.isdir(path) else rights & file_rights
                rule = struct.pack("=Qi", allowed, fd)
                syscall("landlock_add_rule", ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.c_char_p(rule),
                        ctypes.c_uint(0))
            finally:
                os.close(fd)
        syscall("landlock_restrict_self", ctypes.c_int(ruleset), ctypes.c_uint(0))
    finally:
        os.close(ruleset)
    return abi


def syscall_number(name: str) -> int:
    """The number of system call ``name`` on this machine (those this module names)."""
    return {**_COMMON, **(_NUMBERS or {})}[name]


def audit_arch() -> int | None:
    """seccomp's name for this machine's architecture (x86_64, aarch64; None elsewhere)."""
    return _AUDIT_ARCH


def seccomp_available() -> bool:
    """Whether a filter is written for this machine's architecture (x86_64, aarch64)."""
    return _NUMBERS is not None and _AUDIT_ARCH is not None


def seccomp() -> None:
    """Refuse the system calls a scored program never needs and an escaping one would use: sockets, tracing and
    reading other processes' memory, io_uring, namespaces and mounts, keyrings, BPF, kernel modules, new
    processes (threads stay allowed: one address space, one memory limit), new sessions and process groups,
    signals, and changing files' mode, owner, times or extended attributes (which Landlock does not govern).

    Raises:
        OSError: no filter for this architecture, or the kernel refused it.
    """
    if not seccomp_available():
        raise OSError(95, f"seccomp: no filter written for {_ARCH}")
    denied = ["socket", "socketpair", "ptrace", "process_vm_readv", "process_vm_writev", "io_uring_setup",
              "io_uring_enter", "io_uring_register", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot",
              "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "kcmp", "pidfd_getfd",
              "init_module", "finit_module", "fork", "vfork", "setsid", "setpgid", "kill", "tkill", "tgkill",
              "rt_sigqueueinfo", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown",
              "fchownat", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
              "utime", "utimes", "futimesat", "utimensat"]
    numbers = {**_COMMON, **_NUMBERS}
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, ..JSET.., BPF_RET|BPF_K
    code = [(ld, 0, 0, 4), (jeq, 1, 0, _AUDIT_ARCH), (ret, 0, 0, eperm), (ld, 0, 0, 0)]
    if _ARCH == "x86_64":  # the x32 ABI's numbers carry bit 30: refuse them all
        code += [(0x35, 0, 1, 0x40000000), (ret, 0, 0, eperm)]  # BPF_JGE
    for name in (n for n in denied if n in numbers):
        code += [(jeq, 0, 1, numbers[name]), (ret, 0, 0, eperm)]
    # clone: threads only; clone3's flags are out of a filter's reach: ENOSYS, and glibc falls back to clone.
    code += [(jeq, 0, 1, numbers["clone3"]), (ret, 0, 0, enosys),
             (jeq, 0, 3, numbers["clone"]), (ld, 0, 0, 16), (jset, 1, 0, CLONE_THREAD), (ret, 0, 0, eperm)]
    code += [(ret, 0, 0, allow)]
    program = b"".join(struct.pack("=HBBI", *instruction) for instruction in code)
    buffer = ctypes.create_string_buffer(program)
    fprog = struct.pack("@HP", len(code), ctypes.addressof(buffer))  # struct sock_fprog
    prctl(PR_SET_NO_NEW_PRIVS, 1, "no_new_privs")
    _check(LIBC.prctl(PR_SET_SECCOMP, ctypes.c_ulong(2), ctypes.c_char_p(fprog), 0, 0), "seccomp")
