"""Frozen dataclasses to and from JSON, one generic writer and reader for every record headprune keeps.

A record class is a frozen dataclass whose fields are JSON scalars, other record classes, ``tuple[X, ...]``,
``dict[str, X]`` or ``X | None``. :func:`to_json` writes every field (and the names a class lists in
``_derived``, read-only properties kept for people reading the file, such as a verdict's ``confirmed``);
:func:`from_json` rebuilds the objects from the type hints and ignores derived keys. No torch here: the
push command reads export records without loading any model code.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


def to_json(value: object) -> Any:
    """A JSON-ready structure (dicts, lists, scalars) for a record, a collection of records, or a scalar."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {field.name: to_json(getattr(value, field.name)) for field in dataclasses.fields(value)}
        for name in getattr(type(value), "_derived", ()):
            out[name] = to_json(getattr(value, name))
        return out
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {str(key): to_json(item) for key, item in value.items()}
    return value


def from_json(cls: type[T], data: Any) -> T:
    """Rebuild a ``cls`` record from :func:`to_json`'s output.

    Raises:
        KeyError, TypeError, ValueError: the data does not have the record's shape (callers say which file).
    """
    return _build(cls, data)


def _build(hint: Any, data: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if data is None:
            return None
        return _build(options[0], data) if len(options) == 1 else data
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(data, list):
            raise TypeError(f"expected a list, got {type(data).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_build(args[0], item) for item in data)
        return tuple(_build(arg, item) for arg, item in zip(args, data, strict=True))
    if origin is dict:
        if not isinstance(data, dict):
            raise TypeError(f"expected an object, got {type(data).__name__}")
        _, value_hint = typing.get_args(hint)
        return {key: _build(value_hint, item) for key, item in data.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(data, dict):
            raise TypeError(f"expected an object for {hint.__name__}, got {type(data).__name__}")
        hints = typing.get_type_hints(hint)
        kwargs = {}
        for field in dataclasses.fields(hint):
            if field.name in data:
                kwargs[field.name] = _build(hints[field.name], data[field.name])
            elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise KeyError(f"{hint.__name__}.{field.name}")
        return hint(**kwargs)
    if hint is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    return data
