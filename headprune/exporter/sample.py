"""What an export of heads given by hand, without a task, is verified on: a short built-in text sample.

Heads given as a list make no claim, and a user may have no task at hand: the export's outputs are then
compared with the masked original on these texts (every output the model gives: logits, hidden states,
class logits), through the same verification path as a task's inputs, and no task is re-measured (the
record's task check is empty and the card says so). The texts mix prose, digits, code and punctuation so
that any tokenizer gives tokens of several kinds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headprune.scoring import model_kind
from headprune.tasks import Example, Task

if TYPE_CHECKING:  # pragma: no cover
    from headprune.loading.models import LoadedModel

SAMPLE_NAME = "text-sample"
SAMPLE_TEXTS = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "In 1969, 600 million people watched the first landing on the Moon.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    "Question: What is 17 + 25? Answer: 42.",
    "She said, \"It's not what you think!\" and left; nobody followed her.",
    "Paris is the capital of France, and Berlin is the capital of Germany.",
    "Temperatures fell to -5 degrees overnight (a record for March).",
    "Please summarise the following report in three sentences.",
)


def sample_task(lm: LoadedModel) -> Task:
    """The sample as a task of the kind the model is read by: texts for a language model, texts with a label
    for a classifier (its class logits are compared), prompts and choices for an encoder (its hidden states)."""
    kind, texts = model_kind(lm), SAMPLE_TEXTS
    if kind == "causal":
        examples = tuple(Example(f"sample-{i}", text=text) for i, text in enumerate(texts))
        return Task(SAMPLE_NAME, "text", examples, description="built-in text sample (no task)")
    if kind == "classifier":
        examples = tuple(Example(f"sample-{i}", text=text, label=0) for i, text in enumerate(texts))
        return Task(SAMPLE_NAME, "classify", examples, description="built-in text sample (no task)")
    examples = tuple(Example(f"sample-{i}", prompt=text, choices=(texts[i - 1], texts[i - 2]), answer=0)
                     for i, text in enumerate(texts))
    return Task(SAMPLE_NAME, "choice", examples, description="built-in text sample (no task)")
