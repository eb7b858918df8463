"""Which class loads a checkpoint: the one its ``config.architectures`` names, with the head it carries.

A checkpoint is a base model plus a task head (a language-model head, a masked-LM head, a classification
head, ...). headprune loads it with exactly that class, so no weight is dropped, and knows the head by name
(``causal-lm``, ``masked-lm``, ``sequence-classification``, ...) and by the transformers auto class that
serves it (``AutoModelForMaskedLM``), which an export names in its ``auto_map``. The head is found in
transformers' own auto-class mappings (model type -> class name).
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PretrainedConfig

from headprune.errors import UnsupportedModelError

# (head, auto class, name of the mapping in transformers.models.auto.modeling_auto), most specific first.
_HEADS: tuple[tuple[str, str, str], ...] = (
    ("causal-lm", "AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("masked-lm", "AutoModelForMaskedLM", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("sequence-classification", "AutoModelForSequenceClassification",
     "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
    ("token-classification", "AutoModelForTokenClassification", "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES"),
    ("question-answering", "AutoModelForQuestionAnswering", "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES"),
    ("multiple-choice", "AutoModelForMultipleChoice", "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES"),
    ("pretraining", "AutoModelForPreTraining", "MODEL_FOR_PRETRAINING_MAPPING_NAMES"),
    ("base", "AutoModel", "MODEL_MAPPING_NAMES"),
)


@dataclass(frozen=True)
class ModelClass:
    """How a checkpoint is loaded.

    Attributes:
        name: the transformers class (``BertForMaskedLM``).
        head: the task head it carries (``masked-lm``), or ``other`` for a class outside the auto mappings.
        auto_class: the auto class that serves it (``AutoModelForMaskedLM``), or ``None``.
        declared: whether the checkpoint named its class (``architectures``) or headprune chose a default.
    """

    name: str
    head: str
    auto_class: str | None
    declared: bool

    def loader(self, *, trust_remote_code: bool = False):  # noqa: ANN201 - a from_pretrained
        """``from_pretrained`` of the class itself, or of its auto class for remote code."""
        import functools

        import transformers

        if hasattr(transformers, self.name):
            return getattr(transformers, self.name).from_pretrained
        auto = getattr(transformers, self.auto_class or "AutoModel")
        return functools.partial(auto.from_pretrained, trust_remote_code=trust_remote_code)


def _mapping(name: str) -> dict:
    from transformers.models.auto import modeling_auto

    return getattr(modeling_auto, name, {})


def head_of(model_type: str, class_name: str) -> tuple[str, str | None]:
    """The head and auto class of ``class_name`` for ``model_type`` (``("other", None)`` when unmapped)."""
    for head, auto_class, mapping in _HEADS:
        entry = _mapping(mapping).get(model_type)
        names = entry if isinstance(entry, (tuple, list)) else (entry,)
        if class_name in names:
            return head, auto_class
    return "other", None


def model_class(config: PretrainedConfig, *, encoder: bool, trust_remote_code: bool = False) -> ModelClass:
    """The class that loads a checkpoint with its own head.

    Args:
        config: the checkpoint's config.
        encoder: the family is an encoder (its default without ``architectures`` is the bare model).
        trust_remote_code: allow a class that only the checkpoint's own code defines.

    Raises:
        UnsupportedModelError: the class is not in transformers and remote code was not allowed.
    """
    import transformers

    declared = list(getattr(config, "architectures", None) or [])
    model_type = config.model_type
    if declared:
        name = declared[0]
        head, auto_class = head_of(model_type, name)
        if not hasattr(transformers, name):
            auto_map = getattr(config, "auto_map", None) or {}
            if not trust_remote_code:
                raise UnsupportedModelError(
                    f"the checkpoint's class {name} is not part of transformers: it needs the checkpoint's own code "
                    f"({', '.join(sorted(auto_map)) or 'no auto_map'}); pass trust_remote_code to run it",
                    settings=("trust_remote_code",))
            return ModelClass(name, head, auto_class or _auto_for_remote(auto_map), True)
        return ModelClass(name, head, auto_class, True)
    head, auto_class = ("base", "AutoModel") if encoder else ("causal-lm", "AutoModelForCausalLM")
    mapping = "MODEL_MAPPING_NAMES" if encoder else "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"
    entry = _mapping(mapping).get(model_type)
    name = entry[0] if isinstance(entry, (tuple, list)) else entry
    if not name:
        raise UnsupportedModelError(f"transformers has no {auto_class} class for model type {model_type!r}")
    return ModelClass(name, head, auto_class, False)


def _auto_for_remote(auto_map: dict) -> str | None:
    """The auto class a remote-code checkpoint registers for its model (not its config or tokenizer)."""
    for key in auto_map:
        if key.startswith("AutoModel"):
            return key
    return None
