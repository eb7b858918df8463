"""The record of one run of the test command (``HEADPRUNE_TIMES=PATH bash scripts/test.sh``, what CI runs): each
step's seconds, exit status and pytest's counts, and the whole, from which docs/install.md's CI table is rendered.

    python -m scripts.bench.ci --steps DIR --seconds N --json PATH    # scripts/test.sh calls this
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from scripts.bench.common import write_json

COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")


def steps(folder: Path) -> list[dict[str, Any]]:
    """Each step ``scripts/test.sh`` noted (``NAME SECONDS STATUS`` lines), with the counts its pytest summary line
    gives (the last line of its log that has any)."""
    found = []
    for line in (folder / "steps").read_text(encoding="utf-8").splitlines():
        name, seconds, status = line.split()
        log = folder / f"{name}.log"
        summary = [row for row in log.read_text(errors="replace").splitlines() if COUNTS.search(row)] \
            if log.is_file() else []
        counts = {kind: int(n) for n, kind in COUNTS.findall(summary[-1])} if summary else {}
        found.append({"step": name, "seconds": int(seconds), "status": int(status), **counts})
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=Path, required=True)
    parser.add_argument("--seconds", type=int, required=True)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    write_json(args.json, "ci", {"command": "bash scripts/test.sh", "commit": commit}, steps(args.steps),
               seconds=args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
