"""One error hierarchy for headprune.

Every error a user can cause derives from :class:`HeadpruneError`. Subclasses also inherit the built-in
exception with the same meaning, so callers can catch ``ValueError`` or ``FileNotFoundError`` as usual.
The CLI turns these into one-line messages and exit codes in one place (``headprune.cli.main``).
"""

from __future__ import annotations


class HeadpruneError(Exception):
    """Root of every error headprune raises on purpose. ``exit_code`` is what the CLI exits with."""

    exit_code: int = 2


class ModelNotFoundError(HeadpruneError, FileNotFoundError):
    """The model specification names nothing that can be loaded here."""


class UnsupportedModelError(HeadpruneError, ValueError):
    """The model exists but is not a transformer of a supported family."""


class HeadSpecError(HeadpruneError, ValueError):
    """A head name is malformed or out of range for the model."""


class TaskError(HeadpruneError, ValueError):
    """A task is unknown, malformed or empty."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = f"{path}:{line}: " if path is not None and line is not None else (f"{path}: " if path else "")
        super().__init__(where + message)
        self.path = path
        self.line = line


class SearchSettingsError(HeadpruneError, ValueError):
    """find was given settings that cannot work (too few examples, K larger than M, ...)."""


class ResultFileError(HeadpruneError, ValueError):
    """A result file or folder cannot be used (unwritable, from another model, corrupt)."""


class VerificationError(HeadpruneError, RuntimeError):
    """An exported artifact does not reproduce the masked model; nothing was written."""

    exit_code = 1


class HubError(HeadpruneError, RuntimeError):
    """Publishing to the Hugging Face Hub failed (token, repo id, network, permissions)."""
