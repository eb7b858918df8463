"""``FindResult``: everything find measured, as data. Serialised to a versioned ``result.json``.

Values are stored apart from how they are shown: the terminal line, ``report.md`` and model cards are all
rendered from this one record.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from headprune.errors import ResultFileError
from headprune.heads import Head, parse_heads

SCHEMA_VERSION = 1
RESULT_NAME = "result.json"


@dataclass(frozen=True)
class Finalist:
    """One of the F best sets on discovery, with its held-out verdict (and control effect)."""

    rank: int
    heads: list[str]
    discovery: dict
    heldout: dict
    control: dict | None = None


@dataclass(frozen=True)
class FindResult:
    """The record of one find run (schema version 1)."""

    model: dict
    task: dict
    heldout_task: dict
    control_task: dict | None
    split: dict
    settings: dict
    baseline: dict
    screen: list[dict]
    nominees: list[str]
    sets: list[dict]
    finalists: list[Finalist]
    verdict: dict
    prescreen: dict | None = None
    timings: dict = field(default_factory=dict, compare=False)
    schema_version: int = SCHEMA_VERSION

    @property
    def primary(self) -> tuple[Head, ...]:
        """The discovery rank-1 set: the result find stands behind."""
        return parse_heads(self.finalists[0].heads) if self.finalists else ()

    @property
    def confirmed(self) -> bool:
        return bool(self.verdict.get("confirmed"))

    def to_dict(self) -> dict:
        return asdict(self)

    def save(self, path: Path) -> None:
        from headprune.io import atomic_write_json

        atomic_write_json(path, self.to_dict())

    @classmethod
    def from_dict(cls, data: dict) -> FindResult:
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ResultFileError(f"unsupported result schema version {data.get('schema_version')!r} "
                                  f"(this headprune reads version {SCHEMA_VERSION})")
        fields = dict(data)
        fields["finalists"] = [Finalist(**f) for f in data["finalists"]]
        return cls(**fields)

    @classmethod
    def load(cls, path: Path) -> FindResult:
        """Read a ``result.json`` (or the folder holding one)."""
        path = Path(path)
        if path.is_dir():
            path = path / RESULT_NAME
        try:
            return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError as error:
            raise ResultFileError(f"{path}: no such result file") from error
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ResultFileError(f"{path}: not a headprune result ({error})") from error
