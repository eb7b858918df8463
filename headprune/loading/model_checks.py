"""Checks that a checkpoint is what its config.json says, before and after its weights are loaded.

Before: every size and count in config.json is a whole number of at least 1 (checked on the file, since
transformers divides by the head count before it says anything). After: no weight the class needs was missing
from the checkpoint (it would be initialised at random), no tensor of the checkpoint went unused by the class
config.json names, and where shapes disagree the tensors are named (transformers' own error points at a report
headprune keeps quiet). A checkpoint that fails any of these is refused with one line: scoring or exporting it
would measure a model nobody trained.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from transformers import PretrainedConfig

from headprune.errors import UnsupportedModelError
from headprune.loading.adapters import Adapter
from headprune.loading.model_class import ModelClass

log = logging.getLogger("headprune")

# Sizes and counts that must be whole numbers of at least 1 wherever a config.json gives them (any family's name).
POSITIVE_FIELDS = ("hidden_size", "n_embd", "d_model", "num_attention_heads", "n_head", "num_key_value_heads",
                   "num_hidden_layers", "n_layer", "intermediate_size", "n_inner", "head_dim", "vocab_size",
                   "max_position_embeddings", "n_positions")


def check_config_file(folder: Path) -> None:
    """Refuse a config.json that is not a JSON object, names its class or type with something else than names, or
    gives a size or count below 1.

    Raises:
        UnsupportedModelError: naming the field.
    """
    try:
        raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise UnsupportedModelError(f"{folder}: config.json is not readable JSON ({str(error)[:200]})") from None
    if not isinstance(raw, dict):
        raise UnsupportedModelError(f"{folder}: config.json must hold a JSON object")
    architectures = raw.get("architectures")
    if architectures is not None and (not isinstance(architectures, list) or not all(
            isinstance(name, str) and name for name in architectures)):
        raise UnsupportedModelError(f"{folder}: config.json: architectures must be a list of class names, not "
                                    f"{architectures!r:.60}")
    if not isinstance(raw.get("model_type", ""), str):
        raise UnsupportedModelError(f"{folder}: config.json: model_type must be a name, not {raw['model_type']!r:.60}")
    for name in POSITIVE_FIELDS:
        value = raw.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UnsupportedModelError(f"{folder}: config.json: {name} must be a whole number of at least 1, not "
                                        f"{value!r:.60}")


def sliced_record(config: PretrainedConfig, folder: Path) -> dict | None:
    """The ``headprune`` record of a sliced export's config.json (None where there is none), checked against what
    headprune writes there before any of it is used: an object whose ``base_class`` is a transformers model class of
    the config's own model type (the class an export was sliced from), with its layers and head size.

    Raises:
        UnsupportedModelError: naming the field (a class name is never looked up unchecked: ``getattr(transformers,
            name)`` may be any of its functions).
    """
    import transformers

    record = getattr(config, "headprune", None)
    if record is None:
        return None
    where = f"{folder}: config.json: headprune"
    if not isinstance(record, dict):
        raise UnsupportedModelError(f"{where} must be the record of a sliced headprune export (an object), not "
                                    f"{record!r:.60}")
    name = record.get("base_class")
    try:
        found = getattr(transformers, name) if isinstance(name, str) and name.isidentifier() else None
    except Exception:  # noqa: BLE001 - a lazy import transformers cannot complete: no class of ours either
        found = None
    if not (isinstance(found, type) and issubclass(found, transformers.PreTrainedModel)
            and getattr(found.config_class, "model_type", None) == config.model_type):
        raise UnsupportedModelError(f"{where}.base_class must name the transformers class of a {config.model_type} "
                                    f"model that headprune sliced (e.g. {_example_class(config.model_type)}), not "
                                    f"{name!r:.60}")
    layers, head_dim = record.get("layers"), record.get("head_dim")
    if not isinstance(layers, list) or not all(isinstance(layer, dict) for layer in layers):
        raise UnsupportedModelError(f"{where}.layers must be a list of per-layer records, not {layers!r:.60}")
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1 or not isinstance(
            record.get("paths"), dict):
        raise UnsupportedModelError(f"{where}: head_dim must be a whole number of at least 1 and paths an object "
                                    f"(head_dim {head_dim!r:.30}, paths {record.get('paths')!r:.30})")
    return record


def _example_class(model_type: str) -> str:
    from transformers.models.auto import modeling_auto

    entry = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type) or modeling_auto.MODEL_MAPPING_NAMES.get(
        model_type) or "LlamaForCausalLM"
    return entry[0] if isinstance(entry, (tuple, list)) else entry


def shape_mismatches(folder: Path, class_name: str, config: PretrainedConfig) -> str:
    """``name: checkpoint (a, b) vs config (c, d)`` for the first tensors whose shapes disagree (read from the
    safetensors headers and the class built on the meta device: nothing is loaded), or ``""`` when they cannot be
    compared (another weight format, a class transformers lacks)."""
    import torch
    import transformers
    from safetensors import SafetensorError, safe_open

    if not hasattr(transformers, class_name):
        return ""
    try:
        with torch.device("meta"):
            built = getattr(transformers, class_name)(config)
        expected = {name: tuple(t.shape) for name, t in built.state_dict().items()}
        found = []
        for path in sorted(folder.glob("*.safetensors")):
            with safe_open(path, framework="pt") as handle:
                for name in handle.keys():
                    shape = tuple(handle.get_slice(name).get_shape())
                    if name in expected and expected[name] != shape:
                        found.append(f"{name}: checkpoint {shape} vs config {expected[name]}")
    except (OSError, RuntimeError, ValueError, TypeError, KeyError, SafetensorError):
        return ""  # only a better message is at stake: the caller has one without it
    return "; ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")


def _few(names: tuple[str, ...]) -> str:
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def check_loaded(spec: str, chosen: ModelClass, unused: tuple[str, ...], missing: tuple[str, ...], *,
                 adapter: Adapter, sliced: bool = False) -> None:
    """Refuse a checkpoint whose config.json and weights disagree; otherwise say which class was used when the
    checkpoint did not name it, and what it left out or made up.

    A weight the checkpoint lacks would be initialised at random: refused, except the pooler of an encoder loaded
    as its bare model (headprune never reads it). A checkpoint tensor the class that config.json names does not
    use means the config describes another model (fewer layers, another head): refused; where headprune chose
    the class itself, the tensors it leaves out are reported (and an export writes them through or refuses).

    Raises:
        UnsupportedModelError
    """
    unread = [name for name in missing if not (adapter.is_encoder and not chosen.declared and
                                                name.startswith("pooler."))]
    if unread:
        raise UnsupportedModelError(f"{spec}: config.json and the weights disagree: {len(unread)} weights of "
                                    f"{chosen.name} are not in the checkpoint and would be initialised at random "
                                    f"({_few(tuple(unread))})")
    if unused and chosen.declared and not sliced:
        raise UnsupportedModelError(f"{spec}: config.json and the weights disagree: {len(unused)} checkpoint tensors "
                                    f"are not used by {chosen.name}, the class config.json names ({_few(unused)})")
    if chosen.stands_in_for:
        log.warning("%s: config.json names %s, which transformers lacks and the checkpoint ships no code for; "
                    "loaded as %s (%s), the class of its family whose tensors match best", spec,
                    chosen.stands_in_for, chosen.name, chosen.task_head)
    elif not chosen.declared:
        log.warning("%s: config.json names no architecture; loaded as %s (%s)", spec, chosen.name, chosen.task_head)
    if unused:
        log.warning("%s: %d checkpoint tensors are not used by %s and are left out: %s", spec, len(unused),
                    chosen.name, _few(unused))
    if missing:
        log.warning("%s: %d weights of %s are not in the checkpoint and were initialised at random: %s", spec,
                    len(missing), chosen.name, _few(missing))


def dropped_tensors(model: Any, folder: Path) -> tuple[str, ...]:
    """The checkpoint tensors of modules the loaded class does not build, which it drops by design: those its
    ``_keys_to_ignore_on_load_unexpected`` patterns match (multi-token-prediction layers: Qwen3.5's and Qwen3-Next's
    ``mtp.*``, DeepSeek-V3's and GLM-4.5's extra layer; Gemma 4's key/value-shared layers' k/v; DeBERTa-v3's
    ``mask_predictions``), which transformers leaves out of ``unexpected_keys`` too. Stale buffers of modules it
    builds (GPT-2's ``attn.bias`` masks) are not among them: transformers rebuilds those. None is a head of the stack
    headprune prunes; a safetensors export writes them through unchanged (:mod:`headprune.exporter.passthrough`).
    """
    import re

    from headprune.core.checkpoint_files import weight_map

    patterns = sorted(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ())
    if not patterns:
        return ()
    ignored = re.compile("|".join(f"({pattern})" for pattern in patterns))
    return tuple(sorted(name for name in weight_map(folder) if ignored.search(name)
                        and not _builds(model, name.rpartition(".")[0])))


def _builds(model: Any, path: str) -> bool:
    """Whether ``model`` has the module ``path`` names (with or without its base model's prefix)."""
    prefix = f"{model.base_model_prefix}."
    for root, name in ((model, path), (model.base_model, path.removeprefix(prefix)), (model, prefix + path)):
        try:
            root.get_submodule(name)
            return True
        except AttributeError:
            continue
    return False


__all__ = ["POSITIVE_FIELDS", "check_config_file", "check_loaded", "dropped_tensors", "shape_mismatches",
           "sliced_record"]
