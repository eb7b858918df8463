"""The README's Python code runs as written (the built-in model swapped for a tiny one of the same name)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import headprune.loading.models
from helpers import build_tiny, save_folder

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)


@pytest.mark.slow  # the README's sizes (300 + 400 sentiment examples): minutes even on a tiny model
def test_readme_python_blocks_run(tmp_path, tokenizer, monkeypatch) -> None:
    tiny = tmp_path / "tiny-smollm2"
    lm = build_tiny("llama", tokenizer, seed=1)
    lm.model.config.max_position_embeddings = 2048  # as SmolLM2's (rotary: nothing else depends on it); the
    # tiny tokenizer spells reviews in more tokens than the real one, past the helper's 256
    save_folder(lm.model, tokenizer, tiny)
    real_resolve = headprune.loading.models.resolve_model
    monkeypatch.setattr(headprune.loading.models, "resolve_model",
                        lambda spec, **kw: tiny if spec == "smollm2-135m" else real_resolve(spec, **kw))
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks()
    assert blocks, "README.md has Python examples"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {"__name__": "__readme__"})  # noqa: S102
    assert (tmp_path / "pruned" / "headprune_export.json").is_file()
