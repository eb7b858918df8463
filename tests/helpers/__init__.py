"""Shared test helpers: tiny random-init models of every supported family, a tiny tokenizer, small tasks.

Tiny models are built from configs in code (no downloads) by ``headprune.testing``, which benchmarks use too; its
builders are re-exported here. Test modules import from here (never from each other); fixtures live in
``conftest.py``. torch and numpy are imported inside the functions that use them, so that
importing this package (conftest.py does) stays light: test_extras runs pytest with conftest.py in a subprocess.
"""

from __future__ import annotations

from pathlib import Path

from headprune.tasks import Example, Task
from headprune.testing import (  # noqa: F401 - re-exported for the tests
    ALL_FAMILIES, CAUSAL_FAMILIES, bpe_tokenizer, random_choice_task, tiny_config, tiny_model)


def build_tokenizer():  # noqa: ANN201
    """The tests' tiny byte-level BPE tokenizer (about 300 tokens)."""
    return bpe_tokenizer()


def build_tiny(family: str, tokenizer, seed: int = 0, layers: int = 2):  # noqa: ANN001, ANN201
    """A tiny random-init model of ``family`` wrapped as a LoadedModel."""
    from headprune.loading.models import wrap_model

    return wrap_model(tiny_model(family, len(tokenizer), seed, layers), tokenizer, name=f"tiny-{family}")


def save_folder(model, tokenizer, folder, **options) -> Path:  # noqa: ANN001
    """Save ``model`` (a transformers model) and ``tokenizer`` to ``folder`` as a normal Hugging Face folder: what
    a user hands the CLI and ``load_model``. ``options`` go to ``model.save_pretrained`` (e.g. ``max_shard_size``)."""
    model.save_pretrained(folder, **options)
    tokenizer.save_pretrained(folder)
    return Path(folder)


def matrix_heads(grid) -> str:  # noqa: ANN001
    """The coverage matrix's heads: one head of a group in the first layer with heads, a whole key/value group in the
    second (``L0.H1,L1.H0,L1.H1`` where those are the first two layers; a hybrid's layers without heads skipped)."""
    first, second = [index for index, layer in enumerate(grid.layers) if layer.heads][:2]
    return f"L{first}.H1,L{second}.H0,L{second}.H1"


# Find settings small enough for a tiny model and a 40-example task: a whole run in about a second.
SMALL = dict(discovery=24, heldout=16, nominees=2, max_heads=2, finalists=1, batch_size=8)


PROMPTS = ["the film is", "a dull and lifeless movie with nothing to say, the film is",
           "12 + 7 =", "Review: a delight from start to finish\nSentiment:", "it", "34 - 5 = 29\n8 * 3 ="]


def choice_task() -> Task:
    # Mixed prompt lengths; choices of one and of several tokens.
    examples = []
    for i, prompt in enumerate(PROMPTS):
        examples.append(Example(f"c{i}", prompt=prompt, choices=(" positive", " negative"), answer=i % 2))
        examples.append(Example(f"m{i}", prompt=prompt, choices=(" a dull movie", " yes", " the film is a delight"),
                                answer=i % 3))
    return Task("mixed-choice", "choice", tuple(examples))


def generate_task() -> Task:
    return Task("gen", "generate", tuple(Example(f"g{i}", prompt=p, target="19") for i, p in enumerate(PROMPTS)),
                max_new_tokens=4)


def text_task() -> Task:
    return Task("text", "text", tuple(Example(f"t{i}", text=p + " and so on") for i, p in enumerate(PROMPTS)))


SHOTS = "Review: the film is a delight from start to finish\nSentiment: positive\n\n" \
        "Review: a dull and lifeless movie with nothing to say\nSentiment: negative\n\n"


def prefixed(task: Task) -> Task:
    """The task with a few-shot prefix shared by every example (in front of prompts or texts)."""
    return Task(task.name + "+shots", task.kind, tuple(
        Example(e.id, prompt=SHOTS + e.prompt if e.prompt else "", choices=e.choices, answer=e.answer,
                target=e.target, text=SHOTS + e.text if e.text else "") for e in task.examples),
        max_new_tokens=task.max_new_tokens)


def break_slicing(monkeypatch, scale: float) -> None:  # noqa: ANN001
    """Make slicing produce a subtly wrong model (one output projection scaled): what the gate must catch."""
    import torch

    import headprune.surgery.slicing as slicing

    real = slicing.slice_model

    def broken(lm, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        model = real(lm, *args, **kwargs)
        with torch.no_grad():
            lm.adapter.output_projection(model, 0).weight.mul_(scale)
        return model

    monkeypatch.setattr(slicing, "slice_model", broken)


def assert_same_results(a, b, atol: float = 1e-4) -> None:  # noqa: ANN001
    """Same examples, same answers, margins within ``atol``."""
    import numpy as np

    assert [r.id for r in a.results] == [r.id for r in b.results]
    assert [r.correct for r in a.results] == [r.correct for r in b.results]
    np.testing.assert_allclose(a.margins, b.margins, atol=atol, rtol=atol)
