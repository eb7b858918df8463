"""The README's main job, run as a user runs it, and its record: the commands, what they print, the figures.

    python -m scripts.bench.main_job                                  # find, then export the confirmed set
    python -m scripts.bench.main_job --variants --json docs/bench/main-job.json   # and the guard variants

``scripts/run.sh`` runs it after setting up. The commands are written once, here: the README's command block, its
printed output and its figures are rendered from the record (``scripts/bench/render.py``, views ``commands``,
``output``, ``figures``, ``variants``), so none of them can go stale without a test (tests/test_bench_render.py)
saying so. find's exit code is kept: 0 confirmed (then the set is exported and verified), 1 not confirmed (nothing is
exported: an unconfirmed set is not shipped as if it were better), 2 or more an error.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scripts.bench.common import add_json_option, write_json

MODEL, TASK = "smollm2-135m", "arithmetic"
RUN, OUT = Path("runs/smollm2-135m-arithmetic"), Path("exports/smollm2-135m-arithmetic-pruned")
# find's sizes for the main job: 150 discovery and 300 held-out examples, the attribution pre-screen, 8 candidates
# screened exactly, 3 nominees, pairs at most from the first screen, 2 finalists.
FIND = ["find", MODEL, "--task", TASK, "--discovery", "150", "--heldout", "300", "--screen", "attribution",
        "--candidates", "8", "--nominees", "3", "--max-heads", "2", "--finalists", "2"]
CONTROL = ["--control", "sentiment:n=200", "--control-limit", "200"]
EXPORT = ["export", MODEL, "--heads"]
# Other ways to run the same find (the README's "better without breaking"): each a name and the options added.
VARIANTS = {"no guard": ["--guard", "none", *CONTROL],
            "guard sentiment, 5 points, 1,500 examples": ["--guard", "sentiment:margin=5", "--guard-limit", "1500"]}


def headprune(args: list[str]) -> tuple[int, list[str], float]:
    """``headprune ARGS`` as a separate process, its output (stderr and stdout together, as a terminal shows them)
    echoed as it comes, and the seconds it took."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "headprune", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = []
    assert process.stdout is not None
    for line in process.stdout:
        sys.stderr.write(line)
        lines.append(line.rstrip("\n"))
    return process.wait(), lines, time.perf_counter() - start


def figures(run: Path) -> dict[str, Any]:
    """What find decided, from its result.json: the set shipped, its held-out change and test, the guards' and
    controls' effects, the stage times."""
    from headprune.core.record_json import to_json
    from headprune.search.find_result import FindResult

    result = FindResult.load(run / "result.json")
    verdict = result.verdict
    primary = result.finalists[0]
    return {"primary": [str(h) for h in result.primary], "confirmed": result.confirmed, "verdict": to_json(verdict),
            "guards": [to_json(g) for g in primary.guards], "controls": [to_json(c) for c in primary.controls],
            "selection": to_json(result.selection) if result.selection is not None else None,
            "stages": dict(result.timings)}


def exported(out: Path) -> dict[str, Any]:
    """What the export wrote and verified, from its record."""
    from headprune.core.record_json import to_json
    from headprune.exporter import read_record

    record = read_record(out)
    checked = record.verification
    return {"parameters": to_json(record.parameters), "logits": to_json(checked.logits), "task": to_json(checked.task),
            "layout": record.layout, "format": record.format}


def main_job(run: Path, out: Path | None, extra: list[str]) -> dict[str, Any]:
    """find (with ``extra`` options, else the control), then, when it confirmed and ``out`` is given, export and
    verify: the commands (as typed, without ``--overwrite``), what they printed, the figures."""
    find = [*FIND, *(extra or CONTROL), "--out", str(run), "--overwrite"]
    code, lines, find_s = headprune(find)
    job: dict[str, Any] = {"commands": [find[:-1]], "find_exit": code, "find_s": round(find_s, 1), "output": lines}
    if code > 1:
        raise SystemExit(code)
    job.update(figures(run))
    if code == 0 and out is not None:
        export = [*EXPORT[:3], str(run / "result.json"), "--out", str(out), "--overwrite"]
        export_code, export_lines, export_s = headprune(export)
        job["commands"].append(export[:-1])
        job.update(export_exit=export_code, export_s=round(export_s, 1), output=lines + export_lines)
        if export_code == 0:
            job["export"] = exported(out)
    return job


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", action="store_true", help="also run find with each variant (no export)")
    add_json_option(parser, "main-job")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    job = main_job(RUN, OUT, [])
    results: dict[str, Any] = {"main": job}
    if args.variants:
        results["variants"] = {name: main_job(RUN.with_name(f"{RUN.name}-{i}"), None, options)
                               for i, (name, options) in enumerate(VARIANTS.items(), 1)}
    write_json(args.json, "main_job", {"variants": args.variants}, results,
               wall_s=round(time.perf_counter() - started, 1))
    if job["find_exit"] == 1:
        print(f"find did not confirm its claim on held-out data, the gain or its guard (see {RUN}/report.md); nothing "
              "exported",
              file=sys.stderr)
    return job["find_exit"] or job.get("export_exit", 0)


if __name__ == "__main__":
    sys.exit(main())
