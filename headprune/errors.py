"""One error hierarchy for headprune.

Every error a user can cause derives from :class:`HeadpruneError`. Subclasses also inherit the built-in
exception with the same meaning, so callers can catch ``ValueError`` or ``FileNotFoundError`` as usual.
Messages speak the library's words (keyword arguments by their Python names); the CLI turns errors into
one-line messages in its own words, and into exit codes, in one place (``headprune.cli.exits``).
"""

from __future__ import annotations

import re

# The user-information part of a URL (``https://USER:TOKEN@host``): credentials, never shown.
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")


# A Hugging Face token (``hf_`` and its letters and digits), wherever it appears.
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{20,}")


def redact_credentials(text: str) -> str:
    """``text`` with the credentials of any URL in it (``https://user:token@host``) and any Hugging Face token
    replaced by ``***``."""
    return _HF_TOKEN.sub("hf_***", _URL_CREDENTIALS.sub(r"\1***@", text))


class HeadpruneError(Exception):
    """Root of every error headprune raises on purpose.

    Attributes:
        settings: the keyword arguments the message names (``("max_heads", "nominees")``), so that a front
            end can show them in its own terms (the CLI shows ``--max-heads``).
    """

    def __init__(self, message: str, *, settings: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.settings = settings


class ModelNotFoundError(HeadpruneError, FileNotFoundError):
    """The model specification names nothing that can be loaded here."""


class UnsupportedModelError(HeadpruneError, ValueError):
    """The model exists but is not a transformer of a supported family (or needs a permission not given)."""


class HeadSpecError(HeadpruneError, ValueError):
    """A head name is malformed or out of range for the model."""


class TaskError(HeadpruneError, ValueError):
    """A task is unknown, malformed or empty."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 settings: tuple[str, ...] = ()) -> None:
        where = f"{path}:{line}: " if path is not None and line is not None else (f"{path}: " if path else "")
        super().__init__(where + message, settings=settings)
        self.path = path
        self.line = line


class SettingsError(HeadpruneError, ValueError):
    """Settings or options that cannot work (an unknown value, a combination that cannot apply, ...); the CLI
    answers every one with exit 2."""


class SearchSettingsError(SettingsError):
    """Search settings that cannot work (too few examples, K larger than M, an unknown option value, ...)."""


class ExportSettingsError(SettingsError):
    """Export options that cannot work (an unknown format, a dtype the format is not verified in, a shard size or
    GGUF type that does not apply, an ablation find did not measure, ...)."""


class ResultFileError(HeadpruneError, ValueError):
    """A result, journal or export file or folder cannot be used (unwritable, from another model, corrupt)."""


class EditedResultError(ResultFileError):
    """A find result edited after find wrote it (its digest does not match its content, or is missing): its figures
    are not find's for what it now says.

    Attributes:
        finalists: each finalist's heads as the edited file reads (for a message that offers them by hand).
    """

    def __init__(self, message: str, *, finalists: tuple[tuple[str, ...], ...] = ()) -> None:
        super().__init__(message)
        self.finalists = finalists


class KeptOutputError(ResultFileError):
    """A finished output was not moved into place (its destination changed while it was written, or the move
    failed): it stays in the staging folder the message names, and nothing at the destination was replaced."""


class NoRoomError(HeadpruneError, OSError):
    """A write the machine has no room for (a full disk, a used-up quota, a file-size limit): the environment, not
    the input; ``folder`` is where it was written (None where that is not known)."""

    def __init__(self, message: str, *, folder: object = None) -> None:
        super().__init__(message, settings=())
        self.folder = folder

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnconfirmedSetError(HeadpruneError, ValueError):
    """An export of a head set whose held-out gain is not confirmed, without ``allow_unconfirmed``."""


class VerificationError(HeadpruneError, RuntimeError):
    """An exported artifact does not reproduce the masked original; nothing was written."""


class HubError(HeadpruneError, RuntimeError):
    """Publishing to the Hugging Face Hub failed (token, repo id, network, permissions)."""


class InternalCheckError(HeadpruneError, RuntimeError):
    """A check headprune runs on itself failed (a hook that did not fire, a replay that started in the wrong
    place): a bug, reported instead of a wrong result."""


class WorkerLostError(HeadpruneError, RuntimeError):
    """Another process of a data-parallel run stopped or cannot be reached; the journal keeps the progress."""


class MissingExtraError(HeadpruneError, ImportError):
    """A feature needs an optional package that is not installed; the message names the extra to install."""
