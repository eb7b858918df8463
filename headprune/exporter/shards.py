"""Shard sizes of safetensors exports: ``--max-shard-size 5GB`` as ``save_pretrained`` takes it."""

from __future__ import annotations

import re
from decimal import Decimal

from headprune.errors import ExportSettingsError

_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20,
               "GIB": 2**30, "TIB": 2**40}


MAX_SHARD_BYTES = 10**18  # an exabyte: larger is not a shard size, and would not fit the index's integers


def parse_size(value: int | str) -> int | None:
    """Bytes in ``5GB`` (decimal units, as the Hub's sharding counts), ``500MiB`` (binary) or a number; ``None``
    for anything else, and for sizes above :data:`MAX_SHARD_BYTES` (computed exactly: no float overflows)."""
    if isinstance(value, int):
        return value if value <= MAX_SHARD_BYTES else None
    match = re.fullmatch(r"\s*(\d{1,40}(?:\.\d{1,40})?)\s*([A-Za-z]*)\s*", str(value))
    if match is None or match.group(2).upper() not in _SIZE_UNITS:
        return None
    size = Decimal(match.group(1)) * _SIZE_UNITS[match.group(2).upper()]
    return int(size) if size <= MAX_SHARD_BYTES else None


def shard_size(value: int | str | None, format: str) -> int | None:  # noqa: A002 - the CLI's name
    """``max_shard_size`` in bytes (``None``: save_pretrained's default), refused where it cannot apply."""
    if value is None:
        return None
    if format != "safetensors":
        raise ExportSettingsError(f"max_shard_size applies to safetensors exports, not {format}",
                                  settings=("max_shard_size", "format"))
    size = parse_size(value)
    if size is None or size < 1:
        raise ExportSettingsError(f"max_shard_size must be a size such as 5GB, 500MB or a number of bytes up to "
                                  f"{MAX_SHARD_BYTES:.0e}, not {str(value)[:40]!r}", settings=("max_shard_size",))
    return size
