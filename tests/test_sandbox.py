"""Model-written code cannot reach the user: every known escape from the code runner, tried behind each isolation
this machine offers, must fail.

Each escaping program first switches the audit hook off (``DISARM``; ``test_the_hook_alone_can_be_switched_off``
shows that it does), so what stops it is the kernel's wall, not the hook. A program exits 0 only when it escaped,
so ``passed`` is the escape, and the side effects are checked from outside as well.
"""

from __future__ import annotations

from contextlib import contextmanager

import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from headprune.errors import TaskError
from headprune.scoring import sandbox
from headprune.scoring.execution import code_isolation, permit_code_execution, run_program
from headprune.scoring.sandbox import Isolation

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the kernel walls tested here are Linux's")

# Finds the audit hook through the garbage collector and empties what it refuses: after this, imports of socket,
# ctypes and subprocess, and writes anywhere, pass the hook.
DISARM = """
import gc, sys
for _f in gc.get_objects():
    if getattr(_f, "__name__", None) == "guard" and getattr(_f, "__closure__", None):
        for _cell in _f.__closure__:
            _v = _cell.cell_contents
            if isinstance(_v, frozenset): _cell.cell_contents = frozenset()
            elif isinstance(_v, tuple): _cell.cell_contents = ("\\0",)
            elif isinstance(_v, dict): _cell.cell_contents = {}
            elif callable(_v): _cell.cell_contents = lambda path: True
import ctypes, socket, subprocess
"""


def _works(isolation: Isolation) -> bool:
    return sandbox.launch(sandbox.PROBE, isolation, time_limit_s=10.0, memory_bytes=1 << 30)[0] == 0


@pytest.fixture(scope="module")
def isolations() -> list[Isolation]:
    """Every isolation that runs a program here, and the namespaces alone (no seccomp, no Landlock), so that each
    wall is tried by itself too."""
    found = [c for c in sandbox.candidates() if _works(c)]
    found += [Isolation(True, c.uid) for c in found if c.namespaces and (c.seccomp or c.landlock)][:1]
    return found


@pytest.fixture(scope="module")
def walled(isolations) -> list[Isolation]:  # noqa: ANN001
    """The isolations that claim to hold against a hostile program: namespaces, or Landlock with seccomp."""
    strong = [i for i in isolations if i.namespaces or (i.landlock and i.seccomp)]
    if not strong:
        pytest.skip("this machine offers neither user namespaces nor Landlock with seccomp")
    return strong


def _run(source: str, isolation: Isolation, **limits) -> object:  # noqa: ANN003
    with permit_code_execution():
        return run_program(source, isolation=isolation, **limits)


def _escapes(source: str, isolations: list[Isolation], **limits) -> list[str]:  # noqa: ANN003
    """The isolations behind which ``source`` exited 0 (escaped), with what it said."""
    found = []
    for isolation in isolations:
        outcome = _run(source, isolation, **limits)
        if outcome.passed or "ESCAPED" in outcome.detail:
            found.append(f"{isolation.describe()}: {outcome.detail}")
    return found


def test_the_hook_alone_can_be_switched_off(isolations) -> None:  # noqa: ANN001
    """DISARM works: behind no kernel wall, a disarmed program imports ctypes and writes outside its folder. This
    is why the escapes below are stopped by the kernel, or not at all."""
    outcome = _run(DISARM + "import ctypes, socket\n", Isolation())
    assert outcome.passed, outcome.detail
    assert not _run("import ctypes\n", Isolation()).passed  # the hook, armed, refuses it


def _token_program() -> str:
    """A program that escapes (exit 0) when it finds a Hub token (``hf_`` and 32 hex digits) in its own environment,
    or in the environ, cmdline or memory of any process it can see, its ancestors included."""
    return DISARM + r'''
import os, re, sys
found = ["own environment"] if any("HF_TOKEN" in key for key in os.environ) else []
pattern = re.compile(rb"hf_[0-9a-f]{32}")
def look(path, size=1 << 22):
    try:
        with open(path, "rb") as handle:
            return pattern.findall(handle.read(size))
    except OSError:
        return []
pids = set()
try:
    pids.update(int(p) for p in os.listdir("/proc") if p.isdigit())
except OSError:
    pass
pid = os.getppid()
while pid > 1:
    pids.add(pid)
    status = open(f"/proc/{pid}/status").read() if os.path.exists(f"/proc/{pid}/status") else "PPid: 0"
    pid = int(re.search(r"PPid:\s*(\d+)", status).group(1))
pids.discard(os.getpid())
for pid in sorted(pids):
    for entry in ("environ", "cmdline"):
        found += [f"{pid}/{entry}: {m.decode()}" for m in look(f"/proc/{pid}/{entry}")]
    try:
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb") as mem:
            for line in maps:
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                if "r" in line.split()[1] and end - start < 1 << 26:
                    mem.seek(start)
                    found += [f"{pid}/mem: {m.decode()}" for m in pattern.findall(mem.read(end - start))]
    except (OSError, ValueError):
        pass
if found:
    print("ESCAPED", found, file=sys.stderr)
    sys.exit(0)
sys.exit(1)
'''


def test_the_token_is_out_of_reach(tmp_path, walled) -> None:  # noqa: ANN001
    """HF_TOKEN in the runner's environment: the program's environment lacks it, and neither the environ, cmdline
    nor memory of any process it can see (its ancestors included) holds it."""
    secret = "hf_" + secrets.token_hex(16)
    program = _token_program()
    runner = ("import json, sys\nfrom headprune.scoring.execution import permit_code_execution, run_program\n"
              "from headprune.scoring.sandbox import Isolation\nwith permit_code_execution():\n"
              "    for fields in json.loads(sys.argv[1]):\n"
              "        fields['left_out'] = tuple(fields['left_out'])\n"
              "        outcome = run_program(sys.argv[2], isolation=Isolation(**fields))\n"
              "        print(json.dumps([outcome.passed, outcome.detail]))\n")
    env = {**os.environ, "HF_TOKEN": secret}  # in the runner's environment from its start, as a user's would be
    done = subprocess.run([sys.executable, "-c", runner, json.dumps([asdict(i) for i in walled]), program],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    outcomes = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(outcomes) == len(walled)
    for isolation, (passed, detail) in zip(walled, outcomes):
        assert not passed and secret not in detail, (isolation.describe(), detail)


def _files_escape(outside: Path) -> str:
    """A program that escapes (exit 0) when it reads ``outside/secret.txt`` or changes anything in ``outside``."""
    return DISARM + f'''
import os, sqlite3, sys
outside, escaped = {str(outside)!r}, []
def attempt(name, action):
    try:
        action()
        escaped.append(name)
    except Exception:
        pass
attempt("read", lambda: open(os.path.join(outside, "secret.txt")).read())
attempt("write", lambda: open(os.path.join(outside, "new.txt"), "w").write("x"))
for flags in (os.O_RDONLY, os.O_PATH):
    try:
        fd = os.open(outside, flags)
    except OSError:
        continue
    attempt("dir_fd open", lambda: os.close(os.open("new.txt", os.O_WRONLY | os.O_CREAT, dir_fd=fd)))
    attempt("dir_fd unlink", lambda: os.unlink("victim.txt", dir_fd=fd))
    attempt("dir_fd rename", lambda: os.rename("victim.txt", "moved.txt", src_dir_fd=fd, dst_dir_fd=fd))
attempt("sqlite3", lambda: sqlite3.connect(os.path.join(outside, "db.sqlite")).execute("create table t(x)"))
attempt("mkfifo", lambda: os.mkfifo(os.path.join(outside, "fifo")))
attempt("mknod", lambda: os.mknod(os.path.join(outside, "node")))
attempt("unlink", lambda: os.unlink(os.path.join(outside, "victim.txt")))
attempt("chmod", lambda: os.chmod(os.path.join(outside, "victim.txt"), 0o777))
if escaped:
    print("ESCAPED", escaped, file=sys.stderr)
    sys.exit(0)
sys.exit(1)
'''


def _outside(folder: Path) -> Path:
    """A folder of the user's: a secret and a file to keep."""
    folder.mkdir(exist_ok=True)
    (folder / "secret.txt").write_text("hf_" + "0" * 32)
    (folder / "victim.txt").write_text("keep")
    return folder


def _untouched(folder: Path) -> bool:
    victim = folder / "victim.txt"
    return (sorted(p.name for p in folder.iterdir()) == ["secret.txt", "victim.txt"] and victim.read_text() == "keep"
            and victim.stat().st_mode & 0o777 != 0o777)


def test_the_users_files_are_out_of_reach(tmp_path, walled) -> None:  # noqa: ANN001
    """Outside its folder a program can neither read (a secret file), nor write by path, through a dir_fd, an
    O_PATH descriptor, sqlite3, mkfifo or mknod, nor delete, rename or chmod."""
    assert _escapes(_files_escape(_outside(tmp_path)), walled) == []
    assert _untouched(tmp_path)


def test_without_user_namespaces_the_runner_says_so_and_still_holds(tmp_path) -> None:  # noqa: ANN001
    """Where unshare is refused (a container's default seccomp profile; Ubuntu 24.04 refuses what follows it), the
    runner falls back to Landlock and seccomp, warns naming why, and the files stay out of reach."""
    from headprune.scoring import sandbox_kernel

    if not (sandbox_kernel.seccomp_available() and sandbox_kernel.landlock_abi()):
        pytest.skip("this machine offers no Landlock or no seccomp filter to fall back on")
    outside = _outside(tmp_path / "outside")
    script = f"""
import ctypes, logging, struct, sys
from headprune.scoring import sandbox, sandbox_kernel as k
code = [(0x20, 0, 0, 4), (0x15, 1, 0, k.audit_arch()), (0x06, 0, 0, 0x7FFF0000), (0x20, 0, 0, 0),
        (0x15, 0, 1, k.syscall_number("unshare")), (0x06, 0, 0, 0x00050001), (0x06, 0, 0, 0x7FFF0000)]
program = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *c) for c in code))
k.prctl(k.PR_SET_NO_NEW_PRIVS, 1)
assert k.LIBC.prctl(22, 2, ctypes.c_char_p(struct.pack("@HP", len(code), ctypes.addressof(program))), 0, 0) == 0
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
from headprune.scoring.execution import permit_code_execution, run_program
with permit_code_execution():
    print(sandbox.best_isolation().mode, run_program(sys.argv[1]).passed)
"""
    done = subprocess.run([sys.executable, "-c", script, _files_escape(outside)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["process", "False"]
    assert "WARNING" in done.stderr and "unshare: Operation not permitted" in done.stderr
    assert _untouched(outside)


def _network_program(port: int, unix: Path, marker: Path) -> str:
    """A program that escapes (exit 0) when it reaches a TCP listener on ``port`` or a Unix socket at ``unix``, or
    runs a command (which would create ``marker``)."""
    return DISARM + f'''
import os, socket, subprocess, sys
escaped = []
for family, address in ((socket.AF_INET, ("127.0.0.1", {port})),
                        (socket.AF_UNIX, {str(unix)!r})):
    try:
        s = socket.socket(family)
        s.settimeout(2)
        s.connect(address)
        s.sendall(b"x")
        escaped.append(str(family))
    except OSError:
        pass
for run in (lambda: subprocess.run(["/bin/sh", "-c", "echo > {marker}"], timeout=5),
            lambda: os.system("echo > {marker}")):
    try:
        run()
    except Exception:
        pass
if escaped or os.path.exists({str(marker)!r}):
    print("ESCAPED", escaped, file=sys.stderr)
    sys.exit(0)
sys.exit(1)
'''


@contextmanager
def _listening(tmp_path):  # noqa: ANN001, ANN202
    """A TCP listener on the loopback and a Unix socket at ``tmp_path/s`` (what a program that reaches the network
    would reach), yielded as the block's; after it, each must have received nothing (0.2 s to show it)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    unix = socket.socket(socket.AF_UNIX)
    try:
        unix.bind(str(tmp_path / "s"))
        unix.listen()
        unix.settimeout(0.2)
        yield server, unix
        for listener in (server, unix):
            with pytest.raises(TimeoutError):
                listener.accept()
    finally:
        server.close()
        unix.close()


def test_no_network_and_no_new_processes_even_with_the_hook_off(tmp_path, walled) -> None:  # noqa: ANN001
    """A TCP listener and a Unix socket here receive nothing; no command runs."""
    marker = tmp_path / "ran"
    with _listening(tmp_path) as (server, _):
        assert _escapes(_network_program(server.getsockname()[1], tmp_path / "s", marker), walled) == []
    assert not marker.exists()


def _survivors(name: str) -> list[int]:
    """Processes whose name (comm) is ``name``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == name:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _named(name: str) -> str:
    """Source that names the program's process (comm) ``name``, so that its children can be found from outside."""
    return DISARM + f"ctypes.CDLL(None).prctl(15, {name.encode()!r}, 0, 0, 0)\n"


def _no_survivors(name: str) -> bool:
    deadline = time.monotonic() + 2.0
    while _survivors(name) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _survivors(name)


def test_children_in_a_new_session_do_not_outlive_the_program(walled) -> None:  # noqa: ANN001
    """A child that leaves the process group (setsid) and sleeps, holding stderr open: the runner returns as soon as
    the program exits, and the child is gone."""
    for isolation in walled:
        name = "hp" + secrets.token_hex(6)
        program = _named(name) + """
import os, sys, time
try:
    if os.fork() == 0:
        os.setsid()
        time.sleep(3600)
except OSError:
    sys.exit(1)
sys.exit(0)
"""
        started = time.monotonic()
        _run(program, isolation, time_limit_s=5.0)
        assert time.monotonic() - started < 2.5, isolation.describe()
        assert _no_survivors(name), isolation.describe()


def test_the_limit_holds_when_children_keep_stderr_open(isolations) -> None:  # noqa: ANN001
    """The program sleeps forever and so does its child, holding stderr: killed at the limit, everything gone
    (the plain mode run as root, which no process limit binds, promises the time limit only)."""
    for isolation in isolations:
        name = "hp" + secrets.token_hex(6)
        program = _named(name) + """
import os, time
try:
    if os.fork() == 0:
        os.setsid()
except OSError:
    pass
time.sleep(3600)
"""
        started = time.monotonic()
        outcome = _run(program, isolation, time_limit_s=1.0)  # ends 15 ms after the limit here
        assert outcome.status == "timeout" and time.monotonic() - started < 1.75, isolation.describe()
        if isolation.mode != "plain":
            assert _no_survivors(name), isolation.describe()
        for pid in _survivors(name):
            os.kill(pid, 9)  # the plain mode's, left by this test


def test_a_fork_bomb_is_bounded(walled) -> None:  # noqa: ANN001
    """Forking without end: never more than the process limit at once, stopped at the time limit, none left."""
    for isolation in walled:
        name = "hp" + secrets.token_hex(6)
        program = _named(name) + """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""
        most, started = 0, time.monotonic()
        runner = threading.Thread(target=_run, args=(program, isolation), kwargs={"time_limit_s": 1.0})
        runner.start()
        while runner.is_alive():
            most = max(most, len(_survivors(name)))
            time.sleep(0.05)
        assert time.monotonic() - started < 1.75, isolation.describe()
        assert _no_survivors(name), isolation.describe()
        assert most <= sandbox.PROCESSES, (isolation.describe(), most)


def test_memory_and_output_are_bounded(isolations) -> None:  # noqa: ANN001
    for isolation in isolations:
        outcome = _run(DISARM + "x = bytearray(1 << 31)\n", isolation, memory_bytes=256 << 20)
        assert not outcome.passed and "MemoryError" in outcome.detail, isolation.describe()
        started = time.monotonic()
        outcome = _run("import sys\nwhile True:\n    sys.stderr.write('x' * (1 << 20))\n", isolation)
        assert not outcome.passed and len(outcome.detail) <= 300, isolation.describe()
        assert time.monotonic() - started < 5.0, isolation.describe()  # stopped at 16 MiB, not at the time limit


def test_a_weaker_isolation_is_said(monkeypatch, caplog) -> None:  # noqa: ANN001
    """Where only the plain mode runs, the runner says so, never silently: left to choose, its refusal names what is
    missing; named, a warning says the mode programs run in."""
    monkeypatch.setattr(sandbox, "_chosen", {})
    monkeypatch.setattr(sandbox, "candidates", lambda: [Isolation(True, None, 0, False), Isolation()])
    real = sandbox.launch
    monkeypatch.setattr(sandbox, "launch", lambda source, isolation, **kw: (125, "headprune sandbox: cannot set up: "
                        "unshare: refused") if isolation.namespaces else real(source, isolation, **kw))
    monkeypatch.delenv("HEADPRUNE_SANDBOX_MODE", raising=False)
    with permit_code_execution(), pytest.raises(TaskError, match="plain mode .namespaces: headprune sandbox: cannot "
                                                                 "set up: unshare: refused"):
        code_isolation()
    with caplog.at_level("WARNING", logger="headprune"), permit_code_execution(mode="plain"):
        chosen = code_isolation()
    assert chosen.mode == "plain" and "programs run in the plain mode (as asked), behind no kernel isolation" in \
        caplog.text


def test_no_capabilities_and_no_new_privileges(isolations) -> None:  # noqa: ANN001
    """Even run as root, the program holds no capability (effective, permitted, inheritable), and no_new_privs is
    set on Linux, so no setuid program gives one back."""
    program = DISARM + """
import ctypes, struct
libc = ctypes.CDLL(None)
data = ctypes.create_string_buffer(24)
libc.capget(ctypes.create_string_buffer(struct.pack("Ii", 0x20080522, 0)), data)
print("caps", *struct.unpack("6I", data.raw), "nnp", libc.prctl(39, 0, 0, 0, 0), file=sys.stderr)
"""
    for isolation in isolations:
        outcome = _run(program, isolation)
        assert outcome.passed and outcome.detail == "caps 0 0 0 0 0 0 nnp 1", (isolation.describe(), outcome.detail)


# Each sandbox mode forced the way a user forces it (HEADPRUNE_SANDBOX_MODE, which --sandbox-mode sets), chosen by
# headprune's own selection in a process of its own, and the escapes above run through it; "without Landlock" is
# the process mode on a kernel without Landlock (before 5.13, or turned off), which the runner pretends by a test
# hook (landlock_abi() is 0). What each mode claims (README's table): "environment", HF_TOKEN out of reach in the
# program's environment and headprune's own process; "files", the user's files unreadable and unchanged;
# "network", no connection and no command; every mode claims the time limit.
CLAIMS = {
    "namespaces": ("environment", "files", "network"),
    "process": ("environment", "files", "network"),
    "process without Landlock": ("environment", "network"),
    "plain": ("environment",),
}
MODE_RUNNER = """
import json, sys
from headprune.scoring import sandbox_kernel
if sys.argv[1]:
    sandbox_kernel.landlock_abi = lambda: 0  # the test hook: this kernel has no Landlock
from headprune.scoring.execution import code_isolation, permit_code_execution, run_program
with permit_code_execution():  # the mode is HEADPRUNE_SANDBOX_MODE's
    print(json.dumps(code_isolation().mode), flush=True)
    for source in json.loads(sys.argv[2]):
        outcome = run_program(source, time_limit_s=2.0)
        print(json.dumps([outcome.status, outcome.detail]), flush=True)
"""


@pytest.mark.parametrize("name", list(CLAIMS))
def test_each_mode_forced_holds_what_it_claims(tmp_path, name) -> None:  # noqa: ANN001
    mode, without = name.split(" ", 1)[0], " without " in name
    secret = "hf_" + secrets.token_hex(16)
    outside, marker = _outside(tmp_path / "outside"), tmp_path / "ran"
    with _listening(tmp_path) as (server, _):
        programs = {"environment": _token_program(), "files": _files_escape(outside),
                    "network": _network_program(server.getsockname()[1], tmp_path / "s", marker),
                    "limits": DISARM + "while True:\n    pass\n"}
        claimed = (*CLAIMS[name], "limits")
        env = {**os.environ, "HF_TOKEN": secret, "HEADPRUNE_SANDBOX_MODE": mode}
        done = subprocess.run([sys.executable, "-c", MODE_RUNNER, "1" if without else "",
                               json.dumps([programs[claim] for claim in claimed])], capture_output=True, text=True,
                              env=env, timeout=180)
        if done.returncode != 0 and "headprune sandbox:" in done.stderr:
            pytest.skip(f"the {name} mode does not run on this machine: {done.stderr.strip().splitlines()[-1]}")
        assert done.returncode == 0, done.stderr
        chosen, *outcomes = [json.loads(line) for line in done.stdout.splitlines()]
        assert chosen == mode and len(outcomes) == len(claimed)
        for claim, (status, detail) in zip(claimed, outcomes):
            if claim == "limits":
                assert status == "timeout", (name, detail)
            else:
                assert status != "passed" and "ESCAPED" not in detail and secret not in detail, (name, claim, detail)
    assert _untouched(outside) and not marker.exists()


@pytest.mark.parametrize("weakest", [Isolation(), Isolation(False, None, 0, True)], ids=["plain", "seccomp only"])
def test_left_to_choose_a_mode_that_cannot_contain_a_program_is_refused_unless_named(monkeypatch,  # noqa: ANN001
                                                                                     weakest) -> None:
    """No namespaces and no Landlock (Ubuntu 24.04's AppArmor rule and an old kernel; a container; macOS): the
    program could read the user's files and the shell's HF_TOKEN, so nothing runs unless that mode is named."""
    monkeypatch.setattr(sandbox, "_chosen", {})
    monkeypatch.setattr(sandbox, "candidates", lambda: [Isolation(True, None, 0, False), weakest])
    real = sandbox.launch
    monkeypatch.setattr(sandbox, "launch", lambda source, isolation, **kw: (125, "headprune sandbox: cannot set up: "
                        "unshare: refused") if isolation.namespaces else real(source, isolation, **kw))
    monkeypatch.delenv("HEADPRUNE_SANDBOX_MODE", raising=False)
    with permit_code_execution(), pytest.raises(TaskError, match=rf"the strongest sandbox here is the {weakest.mode} "
                                                                 rf"mode \(namespaces: .*unshare: refused.*give "
                                                                 rf"sandbox_mode {weakest.mode} "):
        run_program("pass")
    with permit_code_execution(mode=weakest.mode):
        assert run_program("pass").passed
    monkeypatch.setenv("HEADPRUNE_SANDBOX_MODE", weakest.mode)  # the same, for HF_ALLOW_CODE_EVAL=1 users
    with permit_code_execution():
        assert run_program("pass").passed


def test_the_plain_modes_process_limit_is_announced_only_where_the_kernel_applies_it() -> None:
    """RLIMIT_NPROC 0 stops a fork except for root, whom the kernel does not count: tried for real in a child (as
    the plain mode's programs run: this user, no namespaces), and the plain mode's description must agree."""
    child = ("import os, resource; resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))\n"
             "try:\n    pid = os.fork()\nexcept OSError:\n    print('refused')\nelse:\n"
             "    os._exit(0) if pid == 0 else (os.waitpid(pid, 0), print('forked'))")
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    binds = done.stdout.strip() == "refused"
    assert done.stdout.strip() in ("refused", "forked"), done
    described = Isolation().describe()
    assert ("CPU/memory/file/process/wall-clock limits" in described) == binds, described
    assert ("no process limit" in described) == (not binds), described
    assert sandbox.process_limit_binds(Isolation()) == binds
