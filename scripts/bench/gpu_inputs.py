"""The words and tokenizer of ``gpu_check``'s and ``--protocol``'s random models and tasks (both read them, so they
live apart from both)."""

from __future__ import annotations

from headprune.testing import bpe_tokenizer

WORDS = "the film is a dull delight movie with nothing to say it and so on great bad plot actors".split()


def tokenizer():  # noqa: ANN201
    """A small byte-level BPE tokenizer trained in memory (its ids index the model's larger vocabulary)."""
    return bpe_tokenizer([" ".join(WORDS), "0 1 2 3 4 5 6 7 8 9 + - = \n Review: Sentiment:"], vocab_size=400)
