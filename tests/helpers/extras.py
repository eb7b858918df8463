"""Tests that need an optional runtime: skipped with the reason where it is missing (a failure in CI, see
tests/conftest.py)."""

from __future__ import annotations

import pytest

from headprune.core.extras import missing


def needs(*modules: str, extra: str) -> None:
    """Skip the calling test unless every module of ``modules`` is installed (the reason names the extra)."""
    gone = missing(modules)
    if gone:
        pytest.skip(f"missing package {', '.join(gone)}: pip install 'headprune[{extra}]'")
