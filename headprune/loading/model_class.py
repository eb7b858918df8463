"""Which class loads a checkpoint: the one its ``config.architectures`` names, with the head it carries.

A checkpoint is a base model plus a task head (a language-model head, a masked-LM head, a classification
head, ...). headprune loads it with exactly that class, so no weight is dropped, and knows the head by name
(``causal-lm``, ``masked-lm``, ``sequence-classification``, ...) and by the transformers auto class that
serves it (``AutoModelForMaskedLM``), which an export names in its ``auto_map``. The head is found in
transformers' own auto-class mappings (model type -> class name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from transformers import PretrainedConfig

from headprune.errors import ModelNotFoundError, UnsupportedModelError

# (head, auto class, name of the mapping in transformers.models.auto.modeling_auto), most specific first.
_HEADS: tuple[tuple[str, str, str], ...] = (
    ("causal-lm", "AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    # a vision-language model transformers does not list as a causal LM (LLaVA, Qwen2-VL): its language model's head
    ("causal-lm", "AutoModelForImageTextToText", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"),
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
        task_head: the task head it carries (``masked-lm``), or ``other`` for a class outside the auto mappings.
        auto_class: the auto class that serves it (``AutoModelForMaskedLM``), or ``None``.
        declared: whether the checkpoint named its class (``architectures``) or headprune chose a default.
    """

    name: str
    task_head: str
    auto_class: str | None
    declared: bool
    stands_in_for: str | None = None  # the checkpoint's own class, which transformers lacks (no auto_map)

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


def task_head_of(model_type: str, class_name: str) -> tuple[str, str | None]:
    """The head and auto class of ``class_name`` for ``model_type`` (``("other", None)`` when unmapped)."""
    for head, auto_class, mapping in _HEADS:
        entry = _mapping(mapping).get(model_type)
        names = entry if isinstance(entry, (tuple, list)) else (entry,)
        if class_name in names:
            return head, auto_class
    return "other", None


def model_class(config: PretrainedConfig, *, encoder: bool, trust_remote_code: bool = False,
                tensor_names: Callable[[], frozenset[str]] | None = None) -> ModelClass:
    """The class that loads a checkpoint with its own head.

    Args:
        config: the checkpoint's config.
        encoder: the family is an encoder (its default without ``architectures`` is the bare model).
        trust_remote_code: allow a class that only the checkpoint's own code defines.
        tensor_names: reads the checkpoint's tensor names: where its class is neither in transformers nor shipped
            with it (no ``auto_map``), the family's class that uses most of them stands in (:func:`best_match`).

    Raises:
        UnsupportedModelError: the class is not in transformers and remote code was not allowed.
    """
    import transformers

    declared = list(getattr(config, "architectures", None) or [])
    model_type = config.model_type
    if declared:
        name = declared[0]
        head, auto_class = task_head_of(model_type, name)
        if not hasattr(transformers, name):
            auto_map = getattr(config, "auto_map", None) or {}
            if not auto_map:  # no code to trust: the family's class that fits the tensors best stands in
                if tensor_names is None:
                    raise UnsupportedModelError(f"the checkpoint's class {name} is not part of transformers and the "
                                                "checkpoint ships no code for it (no auto_map)")
                return best_match(config, name, tensor_names(), encoder=encoder)
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


def checkpoint_tensor_names(folder: Path) -> frozenset[str]:
    """The tensor names of a checkpoint: safetensors (index or headers: nothing is loaded) or a PyTorch pickle
    (index, or ``pytorch_model.bin`` loaded safely, see :mod:`headprune.core.checkpoint_files`).

    Raises:
        UnsupportedModelError: no weights to read names from, or a pickle that cannot be loaded safely.
    """
    from headprune.core.checkpoint_files import weight_map

    names = frozenset(weight_map(folder))
    if not names:
        raise UnsupportedModelError(f"{folder}: the checkpoint's class is not part of transformers and it has no "
                                    "safetensors or pytorch_model.bin weights whose names headprune could match to a "
                                    "class")
    return names


def class_tensor_groups(class_name: str, config: PretrainedConfig) -> tuple[frozenset[str], ...]:
    """The state-dict names of a transformers class built from ``config`` (on the meta device: no memory), one set
    per tensor: the names of weights the class ties together (a masked-LM decoder and the input embeddings) share a
    set, since a checkpoint stores a tied weight once, under either name."""
    import torch
    import transformers

    with torch.device("meta"):
        model = getattr(transformers, class_name)(config)
    tied: dict[int, set[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        tied.setdefault(id(parameter), set()).add(name)
    named = {name for names in tied.values() for name in names}
    return tuple(frozenset(names) for names in tied.values()) + tuple(
        frozenset({name}) for name in model.state_dict() if name not in named)  # persistent buffers


def best_match(config: PretrainedConfig, name: str, tensor_names: frozenset[str], *, encoder: bool
               ) -> ModelClass:
    """The family's head class that stands in for ``name``, which transformers lacks: among the classes whose every
    weight the checkpoint holds, the one that uses most of its tensors (the rest are carried through as they are);
    only where no class is complete, the one that uses most (then: the fewest of its own missing), which loading
    then refuses for the weights it would make up. Ties go to an encoder's own heads before a causal LM head, then
    to the order of :data:`_HEADS`.

    A class with a head the checkpoint never had (BERT's pre-training class, whose next-sentence head a masked-LM
    checkpoint with a pooler lacks) would use one tensor more than the complete masked-LM class and leave two made
    up: completeness comes first.

    Raises:
        UnsupportedModelError: no class of the family uses any of the checkpoint's tensors.
    """
    import transformers

    scored = []
    for order, (head, auto_class, mapping) in enumerate(_HEADS):
        entry = _mapping(mapping).get(config.model_type)
        for candidate in entry if isinstance(entry, (tuple, list)) else (entry,):
            if not candidate or not hasattr(transformers, candidate):
                continue
            own = class_tensor_groups(candidate, config)
            used = sum(len(names & tensor_names) for names in own)
            missing = sum(1 for names in own if not names & tensor_names)  # a tied weight counts once
            causal_on_encoder = encoder and head == "causal-lm"  # BertLMHeadModel has BertForMaskedLM's tensors
            scored.append(((missing > 0, -used, missing, causal_on_encoder, order), used,
                           ModelClass(candidate, head, auto_class, False, name)))
    if not scored or max(used for _, used, _ in scored) == 0:
        raise UnsupportedModelError(f"the checkpoint's class {name} is not part of transformers, ships no code "
                                    f"(no auto_map), and no {config.model_type} class uses its tensors")
    return min(scored, key=lambda item: item[0])[2]


def loading_class(config: PretrainedConfig, folder: Path, sliced: dict | None, *, encoder: bool,
                  trust_remote_code: bool) -> tuple[ModelClass, Callable]:
    """The class a checkpoint in ``folder`` loads as, and its ``from_pretrained``: a sliced headprune export's
    rebuilt class (``sliced``: its record), else the class the checkpoint names (:func:`model_class`).

    Raises:
        ModelNotFoundError: a sliced export without safetensors weights. UnsupportedModelError: see
            :func:`model_class`.
    """
    if sliced is None:
        chosen = model_class(config, encoder=encoder, trust_remote_code=trust_remote_code,
                             tensor_names=lambda: checkpoint_tensor_names(folder))
        return chosen, chosen.loader(trust_remote_code=trust_remote_code)
    from headprune.surgery.remote_modeling import headpruned_class

    if not any(folder.glob("*.safetensors")):
        raise ModelNotFoundError(f"{folder}: a sliced export without safetensors weights (an ONNX export?)")
    chosen = ModelClass(sliced["base_class"], *task_head_of(config.model_type, sliced["base_class"]), True)
    return chosen, headpruned_class(sliced["base_class"]).from_pretrained


def _auto_for_remote(auto_map: dict) -> str | None:
    """The auto class a remote-code checkpoint registers for its model (not its config or tokenizer)."""
    for key in auto_map:
        if key.startswith("AutoModel"):
            return key
    return None
