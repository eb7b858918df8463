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
        if recorded.get("model_hash") != settings.get("model_hash"):
            raise ResultFileError(f"cannot resume: {self.path.parent} was made for a different model "
                                  f"({recorded.get('model')}, {str(recorded.get('model_hash'))[:19]}...)")
        if recorded.get("selection") != settings.get("selection"):  # 0.2's journals have none
            then = recorded.get("selection") or "0.2's rule (heads admitted on the check half)"
            raise ResultFileError(f"cannot resume: {self.path} was written under {then}, this headprune selects by "
                                  f"{settings.get('selection')}; the two cannot be mixed: start again with --overwrite",
                                  settings=("resume",))
        then, now = recorded.get("environment") or {}, settings.get("environment") or {}
        moved = [k for k in now if then.get(k) != now[k]]
        if moved:  # results are reproducible only with the same software and hardware settings
            details = ", ".join(f"{k}: {then.get(k, 'not recorded')} then, {now[k]} now" for k in moved)
            raise ResultFileError(f"cannot resume: the environment differs from the interrupted run's ({details})",
                                  settings=("resume",))
        changed = sorted(k for k in set(recorded) | set(settings) if recorded.get(k) != settings.get(k))
        if changed:
            details = ", ".join(f"{k}: {recorded.get(k)!r} then, {settings.get(k)!r} now" for k in changed[:3])
            raise ResultFileError(f"cannot resume: settings differ from the interrupted run ({details})")
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
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


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
