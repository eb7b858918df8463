"""``classify``: the model's own classification head must pick the label.

Rows are ``{"text", "label"}`` (``"text_pair"`` for pairs: NLI, paraphrase); the label is a class index or a
name from the model's ``config.id2label``. Correct: the argmax of the head's logits is the label. Margin: the
label's logit minus the best other. Works for encoder classifiers and decoder ``...ForSequenceClassification``
models alike (decoders read the last real token, which left padding keeps last).
"""

from __future__ import annotations

import torch

from headprune.errors import TaskError
from headprune.scoring.base import Item, Scorer, rest_max
from headprune.tasks import Example, Task


class ClassifyScorer(Scorer):
    kind = "classify"
    models = "classifier"
    readout = "logits"

    def __init__(self, task: Task, lm) -> None:  # noqa: ANN001 - a LoadedModel
        super().__init__(task, lm)
        config = lm.model.config
        self.num_labels = int(config.num_labels)
        self.label2id = {str(name): int(index) for name, index in (config.label2id or {}).items()}

    def label_index(self, example: Example) -> int:
        """The class index of an example's label (a name is looked up in the model's ``label2id``)."""
        label = example.label
        if isinstance(label, int):
            if not 0 <= label < self.num_labels:
                raise TaskError(f"example {example.id}: label {label} is out of range; the model has "
                                f"{self.num_labels} classes (0..{self.num_labels - 1})")
            return label
        if label not in self.label2id:
            names = ", ".join(sorted(self.label2id, key=self.label2id.get))
            raise TaskError(f"example {example.id}: label {label!r} is not one of the model's labels ({names})")
        return self.label2id[label]

    def items(self, index: int, example: Example) -> list[Item]:
        self.label_index(example)  # refuse an unknown label before anything runs
        encoded = self.lm.tokenizer(example.text, example.text_pair or None)
        types = encoded.get("token_type_ids")
        return [Item(index, tuple(encoded["input_ids"]), type_ids=tuple(types) if types and any(types) else None)]

    def value(self, item: Item, out: torch.Tensor) -> torch.Tensor:
        return out  # (C,): the head's logits

    def judge(self, example: Example, values: list[torch.Tensor], generated: str | None) -> tuple[bool, float]:
        logits, label = values[0].double(), self.label_index(example)
        return bool(int(logits.argmax()) == label), float(logits[label] - rest_max(logits, label))

    def surrogate(self, item: Item, value: torch.Tensor, example: Example) -> torch.Tensor:
        label = self.label_index(example)
        return value[label] - rest_max(value, label)  # exactly the margin
