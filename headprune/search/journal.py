"""The search journal: every evaluated condition, appended as it finishes, so a run can resume.

``journal.jsonl`` starts with one line of settings (model hash, task hashes, every option); each further
line is one condition: ``{"key": "<split>|<heads>", "correct": "0110...", "margins": [...]}``, plus for
generating kinds ``"texts"`` (each example's generated answer text) and ``"decisions"`` (decoding gaps). A line
cut short by a kill is ignored on resume. Results are deterministic, so a resumed run gives exactly the result
of an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path

from headprune.core.io import atomic_write_text
from headprune.core.room import no_room
from headprune.errors import ResultFileError
from headprune.evaluation.results import EvalResult, ExampleResult
from headprune.tasks import Task

JOURNAL_NAME = "journal.jsonl"


class Journal:
    """Append-only record of evaluated conditions, keyed by split and head set."""

    def __init__(self, folder: Path | None, settings: dict, *, resume: bool = False,
                 entries: dict[str, dict] | None = None) -> None:
        """Start (or, with ``resume``, reopen) the journal in ``folder``; ``None`` keeps it in memory (starting
        from ``entries``: another process's copy in a data-parallel run). The caller holds the folder's lock
        (:class:`headprune.core.folder_lock.FolderLock`, taken by ``find``)."""
        self.path = Path(folder) / JOURNAL_NAME if folder is not None else None
        self._entries: dict[str, dict] = dict(entries or {})
        if self.path is None:
            return
        if resume:
            self._load(settings)
        else:
            self._start(settings)

    def _start(self, settings: dict) -> None:
        atomic_write_text(self.path, json.dumps({"settings": settings}) + "\n")

    def _load(self, settings: dict) -> None:
        if not self.path.is_file():
            raise ResultFileError(f"cannot resume: {self.path} does not exist (nothing to resume)",
                                  settings=("resume",))
        try:
            lines = self.path.read_text(encoding="utf-8").split("\n")  # JSON lines end at "\n" only (no splitlines)
        except (OSError, UnicodeDecodeError) as error:
            raise ResultFileError(f"cannot resume: {self.path} is not readable text ({error})",
                                  settings=("resume",)) from None
        while lines and not lines[-1]:
            lines.pop()
        try:
            recorded = json.loads(lines[0])["settings"]
            if not isinstance(recorded, dict):
                raise TypeError("settings")
        except (IndexError, KeyError, TypeError, ValueError, RecursionError):
            raise ResultFileError(f"cannot resume: {self.path} is not a headprune journal", settings=("resume",)
                                  ) from None
        refusal = _resume_refusal(self.path.parent, recorded, settings, lines[1:])
        if refusal is not None:
            raise refusal
        for number, line in enumerate(lines[1:], start=2):
            entry = _entry(line)
            if entry is None and number == len(lines):
                continue  # the last line of a killed run may be cut short
            if entry is None:
                raise ResultFileError(f"cannot resume: {self.path} is corrupt at line {number} (not a condition this "
                                      "headprune wrote, or edited since); start the run again without --resume",
                                      settings=("resume",))
            self._entries[entry["key"]] = entry
        # Rewrite without any broken tail so later appends start on a fresh line (atomically: a kill during the
        # rewrite leaves the old journal).
        body = [json.dumps({"settings": recorded})] + [json.dumps(e) for e in self._entries.values()]
        atomic_write_text(self.path, "\n".join(body) + "\n")

    @property
    def entries(self) -> dict[str, dict]:
        """The journalled conditions, by key (what another process needs to continue)."""
        return dict(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def has(self, key: str) -> bool:
        return key in self._entries

    def get(self, key: str, task: Task) -> EvalResult | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if len(entry["margins"]) != len(task):
            raise ResultFileError(f"journal entry {key} does not match the task (corrupt journal?)")
        texts = entry.get("texts") or [None] * len(task)  # older journals kept no texts
        decisions = entry.get("decisions")
        decisions = [None] * len(task) if decisions is None else [math.inf if d is None else d for d in decisions]
        return EvalResult(task.name, task.kind, tuple(
            ExampleResult(example.id, flag == "1" if task.has_accuracy else None, margin, text=text, decision=decision)
            for example, flag, margin, text, decision in zip(task.examples, entry["correct"], entry["margins"],
                                                             texts, decisions)
        ))

    def remember(self, key: str, compute: Callable[[], object]) -> object:
        """A JSON value (a pre-screen's output) from the journal, or computed now and journalled."""
        if key in self._entries:
            return self._entries[key]["data"]
        data = compute()
        self._append({"key": key, "data": data})
        return json.loads(json.dumps(data))  # what a resumed run reads back

    def put(self, key: str, result: EvalResult) -> None:
        entry: dict = {"key": key, "correct": "".join("1" if r.correct else "0" for r in result.results),
                       "margins": [r.margin for r in result.results]}
        if result.texts is not None:  # generating kinds: the texts, and decision gaps (JSON has no infinity)
            entry["texts"] = list(result.texts)
            entry["decisions"] = [r.decision if r.decision is not None and math.isfinite(r.decision) else None
                                  for r in result.results]
        self._append(entry)

    def _append(self, entry: dict) -> None:
        entry = {**entry, "check": _checksum(entry)}
        self._entries[entry["key"]] = entry
        if self.path is None:
            return
        try:
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as error:  # a full disk: the journal up to its last whole line is what --resume reads
            raise no_room(error, self.path.parent) or error from error


def _resume_refusal(folder: Path, then: dict, now: dict, lines: list[str]) -> ResultFileError | None:
    """Why a run's journal cannot be continued with these settings, or None: each difference named by its option
    (``seed``, which the command line shows as ``--seed``) with both values; a model by its path, once where it is
    the same path; example sets that differ by the options and files they are drawn from."""
    if then.get("model_hash") != now.get("model_hash"):
        weights = f"{str(then.get('model_hash'))[:19]}... then, {str(now.get('model_hash'))[:19]}... now"
        if then.get("model") == now.get("model"):
            return ResultFileError(f"cannot continue the run in {folder}: the model {now.get('model')} has other "
                                   f"weights than it had ({weights})")
        return ResultFileError(f"cannot continue the run in {folder}: it was made for a different model "
                               f"({then.get('model')} then, {now.get('model')} now; weights {weights})")
    if then.get("selection") != now.get("selection"):  # 0.2's journals have none
        rule = then.get("selection") or "0.2's rule (heads admitted on the check half)"
        return ResultFileError(f"cannot continue the run in {folder}: it was written under {rule}, this headprune "
                               f"selects by {now.get('selection')}; the two cannot be mixed: start again with "
                               "overwrite", settings=("overwrite",))
    before, after = then.get("environment") or {}, now.get("environment") or {}
    moved = [key for key in after if before.get(key) != after[key]]
    if moved:  # results are reproducible only with the same software and hardware settings
        details = ", ".join(f"{key} {before.get(key, 'not recorded')} then, {after[key]} now" for key in moved)
        return ResultFileError(f"cannot continue the run in {folder}: the environment differs from its own "
                               f"({details})", settings=tuple(moved))
    changed = sorted(key for key in set(then) | set(now) if then.get(key) != now.get(key) and key != "sizes")
    if not changed:
        return None
    sizes, resized = (then.get("sizes") or {}, now.get("sizes") or {}), []
    for split in ("discovery", "heldout"):  # example counts (journals of 0.2 recorded none)
        if split in sizes[0] and sizes[0][split] != sizes[1].get(split):
            resized.append((split, f"{split} {sizes[0][split]} then, {sizes[1].get(split)} now"))
    # Example sets are journalled as hashes of what was drawn: named by the count then, and what draws them.
    drawn = {"task": ("discovery", "discovery", ("discovery", "seed"), "the task or its file"),
             "heldout": ("heldout", "heldout", ("heldout_task", "heldout", "seed"), "a task's file"),
             "controls": ("control_limit", "control:0", ("control", "control_limit"), "a file's content")}
    parts = [_model_part(then.get(key), now.get(key)) if key == "model" else
             f"{key} {_value(then.get(key))} then, {_value(now.get(key))} now" for key in changed if key not in drawn]
    parts += [said for _, said in resized]
    if "seed" not in changed and not resized:  # a new seed or size draws new sets: said by the seed or size
        for key in [key for key in drawn if key in changed][:1]:  # discovery's draw moves the held-out one too
            option, split, options, files = drawn[key]
            parts.append(f"{option} {_examples(lines, split) or 'other examples'} then, other examples now "
                         f"({', '.join(options[:-1])} or {options[-1]} changed, or {files})")
    named = tuple(key for key in changed if key not in drawn) + tuple(split for split, _ in resized) + tuple(
        option for key in changed if key in drawn for option in drawn[key][2])
    return ResultFileError(f"cannot continue the run in {folder}: {'; '.join(parts[:3])}", settings=named)


def _model_part(then: object, now: object) -> str:
    """The model as it was given then and now (the same weights: another spelling of the same folder, or a copy)."""
    same = isinstance(then, str) and isinstance(now, str) and os.path.realpath(then) == os.path.realpath(now)
    return (f"the model is given as {now} now, as {then} then ({'the same folder' if same else 'the same weights'}: "
            "give it as then)")


def _value(value: object) -> str:
    return "not set" if value is None else str(value)


def _examples(lines: list[str], split: str) -> int | None:
    """How many examples of ``split`` the journal's conditions were scored on (None when it holds none)."""
    for line in lines:
        entry = _entry(line)
        if entry is not None and entry["key"].startswith(f"{split}|") and "correct" in entry:
            return len(entry["correct"])
    return None


def _checksum(entry: dict) -> str:
    """A short digest of an entry's content (everything but the digest itself): an edited line shows."""
    content = json.loads(json.dumps({k: v for k, v in entry.items() if k != "check"}))  # as it is read back
    body = json.dumps(content, sort_keys=True)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _entry(line: str) -> dict | None:
    """A journal line as an entry, or ``None`` when it is not one this journal wrote: not JSON, a field of the
    wrong type, lengths that disagree, or content that does not match its checksum (journals written before the
    checksum have none and are read on their shape alone)."""
    try:
        entry = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
        return None
    if "check" in entry and entry["check"] != _checksum(entry):
        return None
    if "data" in entry:
        return entry
    correct, margins = entry.get("correct"), entry.get("margins")
    if not isinstance(correct, str) or set(correct) - {"0", "1"} or not isinstance(margins, list) or (
            len(margins) != len(correct) or not all(_is_number(m) for m in margins)):
        return None
    texts, decisions = entry.get("texts"), entry.get("decisions")
    if texts is not None and (not isinstance(texts, list) or len(texts) != len(correct) or
                              not all(t is None or isinstance(t, str) for t in texts)):
        return None
    if decisions is not None and (not isinstance(decisions, list) or len(decisions) != len(correct) or
                                  not all(d is None or _is_number(d) for d in decisions)):
        return None
    return entry
