"""Running the command line from tests: in this process (click's runner) or as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

from headprune.cli.main import cli


def invoke(*args: str, catch_exceptions: bool = False) -> Result:
    """``headprune ARGS`` in this process. An exception the CLI does not turn into an exit code propagates (a
    traceback fails the test where it happened), unless ``catch_exceptions``: then it is in ``result.exception``
    and the exit code is 1, for tests that assert on a crash's absence themselves."""
    return CliRunner().invoke(cli, list(args), catch_exceptions=catch_exceptions)


def assert_refused(result: Result, fragment: str, *, stream: str = "output") -> None:
    """A refusal as users see it: exit 2 and one line ``headprune: error: ...`` holding ``fragment``, on
    ``stream`` (``output``: stdout and stderr together, ``stderr``: stderr alone)."""
    text = getattr(result, stream)
    assert result.exit_code == 2, result.output
    assert text.count("\n") == 1 and text.startswith("headprune: error: "), text
    assert fragment in text, text


def headprune(*args: str, processes: int = 1, timeout: float = 600) -> subprocess.CompletedProcess:
    """``headprune ARGS`` as a separate process (one thread, like a user's shell), or ``processes`` processes
    under torchrun: for what only a real process shows (a kill, a second process, exit status, stdout)."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes),
                "--standalone"] if processes > 1 else [sys.executable]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([*launcher, "-m", "headprune", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def comparable_result(folder: Path) -> dict:
    """A run's result.json without what may differ between equal runs (timings): what a resumed, killed or
    multi-process run must reproduce."""
    result = json.loads((folder / "result.json").read_text())
    result.pop("timings", None)
    return result
