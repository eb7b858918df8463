"""The folder of a find run: what it may hold, checked when the run starts and again right before its outputs move
in.

A run writes ``journal.jsonl`` while it runs and, at the end, ``result.json``, ``report.md`` and its figures
(:data:`RUN_FILES`), each moved in by name. So its ``--out`` is a new or empty folder, or the folder of an earlier
run (resumed, or started afresh with ``--overwrite``: ``headprune.search.find.check_run_folder`` decides which);
never a folder that is, holds or lies inside what the run reads (the model, a task, held-out or control file), and
never one with other files, which could be an output's namesake (a model folder's own ``report.md``), nor one whose
run file is a symbolic link or a folder (``result.json`` leading elsewhere). Right before
the outputs move in, the same rule is checked again, and a file that took an output's name since the run started
is refused too: the outputs then stay in their staging folder, and nothing in the folder is replaced.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from pathlib import Path

from headprune.core.folder_lock import LEGACY_LOCK_NAME
from headprune.core.io import refuse_unsafe_output
from headprune.core.paths import check_output_name, refuse_overlap, shown
from headprune.errors import ResultFileError
from headprune.exporter.destination import local_sources
from headprune.search.find_result import RESULT_NAME, FindResult
from headprune.search.journal import JOURNAL_NAME
from headprune.tasks import task_files

RUN_FILES = (JOURNAL_NAME, RESULT_NAME, "report.md", "screen.png", "controls.png", "front.png", "tradeoff.png")
# The journal's atomic rewrite (core.io.atomic_write_text: ".NAME.RANDOM"), which a killed run can leave behind.
_TEMPORARY = re.compile(r"\.journal\.jsonl\.[0-9a-f]{8}")
ADVICE = "give find a new or empty folder of its own"


def run_inputs(model: object, tasks: Iterable[str | None]) -> list[tuple[str, Path]]:
    """What a find run reads on this machine, as ``(what, path)``: the model (a spec or a loaded model; a Hub id's
    folder in the Hugging Face cache) and the files of its task, held-out task and controls (specs; built-in and Hub
    task names read none)."""
    inputs = [("the model", path) for path in local_sources(model)]
    for spec in tasks:
        inputs += [("a task file of the run", path) for path in task_files(spec)]
    return inputs


def result_inputs(result: FindResult) -> list[tuple[str, Path]]:
    """:func:`run_inputs` of a finished run, read from its record."""
    specs = [result.task.spec, result.heldout_task.spec, *(control.spec for control in result.control_tasks),
             *(guard.task.spec for guard in result.guard_tasks)]
    return run_inputs(result.model.name, specs)


def check_run_destination(out: Path, inputs: Iterable[tuple[str, Path]], *,
                          present: Collection[str] | None = None) -> frozenset[str]:
    """Refuse a find output folder that breaks the module's rule.

    Args:
        out: the run's folder.
        inputs: what the run reads (:func:`run_inputs`).
        present: the run's files that were there when the run started (what this call returned then); with it, a
            run file that appeared since (the journal aside, which the run writes) is refused too.

    Returns:
        The run's files there now.

    Raises:
        ResultFileError
    """
    out = Path(out)
    refuse_unsafe_output(out)
    check_output_name(out)
    refuse_overlap(out, inputs, advice=ADVICE)
    if not out.exists():
        return frozenset()
    if not out.is_dir():
        raise ResultFileError(f"{shown(out)} exists and is not a folder", settings=("out",))
    names = {path.name for path in out.iterdir()}
    run = JOURNAL_NAME in names or RESULT_NAME in names  # else a report.md there is somebody else's
    strangers = sorted(name for name in names if not (run and name in RUN_FILES) and name != LEGACY_LOCK_NAME
                       and not _TEMPORARY.fullmatch(name))
    if strangers:
        raise ResultFileError(f"{shown(out)} holds files find does not write ({', '.join(strangers[:3])}"
                              f"{' ...' if len(strangers) > 3 else ''}); {ADVICE}", settings=("out",))
    found = frozenset(names & set(RUN_FILES))
    linked = sorted(name for name in found if (out / name).is_symlink() or not (out / name).is_file())
    if linked:  # a run's outputs replace its files by name: never what a link leads to, nor a folder
        raise ResultFileError(f"{shown(out / linked[0])} is a symbolic link or not a file, not one find wrote; move "
                              "it away", settings=("out",))
    appeared = sorted(found - set(present) - {JOURNAL_NAME}) if present is not None else []
    if appeared:
        raise ResultFileError(f"{shown(out)} holds {', '.join(appeared)}, which find did not write and which appeared "
                              "while it ran; move them away", settings=("out",))
    return found


__all__ = ["RUN_FILES", "check_run_destination", "result_inputs", "run_inputs"]
