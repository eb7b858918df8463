"""A family: one ``config.model_type`` headprune takes, declared in one file with everything the other layers need of
it, and registered by that file.

A family file (``headprune/loading/adapters/NAME.py``) holds, for the model types it serves: the :class:`Adapter` that
says where their heads live (its own, or a shared one such as Llama's), and for each model type a :class:`Family`:
its GGUF file (:class:`~headprune.loading.adapters.gguf_spec.Gguf`, or none), the model type ONNX Runtime GenAI names
it by (or none: a logits graph), the tiny random model the suite builds of it (:class:`TinyModel`), and a few words
for docs/models.md. The package imports every module in its folder, so a new family is its file alone: the adapter
lookup, the exporters, :mod:`headprune.testing`, the coverage matrix of the suite and docs/models.md's table read
the registry (as llama.cpp's converter registers one class per architecture, and TransformerLens one adapter per
family).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from headprune.core.registry import Registry
from headprune.loading.adapters.base import Adapter
from headprune.loading.adapters.gguf_spec import Gguf


@dataclass(frozen=True)
class TinyModel:
    """The suite's tiny random model of a model type, built from transformers' own classes (hidden 64, 2 layers, 4
    query heads; over 2 key/value heads where the family groups them, by the overrides): ``config_class`` and
    ``model_class`` name transformers classes, ``overrides`` the config values that differ from
    :func:`headprune.testing.family_model`'s sizes (a vision-language model's ``text_config`` and ``vision_config``,
    and its ``image_ids``: the config's special token ids, given the tiny vocabulary's last ids in that order;
    ``vocab_sized``: config attributes given the tiny vocabulary's size, such as Gemma 4's per-layer embeddings')."""

    config_class: str
    model_class: str
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:  # read-only: one spec is shared by every test that builds the model
        object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides)))


@dataclass(frozen=True)
class Family:
    """One model type and what each layer needs of it.

    Attributes:
        model_type: ``config.model_type``.
        adapter: where its heads live (shared by the model types of one attention layout).
        tiny: the suite's tiny random model of it.
        gguf: how it is written to GGUF (None: GGUF is refused in one line naming the formats that take it).
        genai: the model type ONNX Runtime GenAI names it by (None: the ONNX export is a logits graph).
        note: what is particular to it, for docs/models.md's table (a phrase; empty: nothing).
        onnx_refused: why no ONNX graph of it is written (empty: one is), said in the refusal's line.
        gguf_refused: why no GGUF file of it is written, where ``gguf`` is None (said in the refusal's line).
        onnx_tokens: ``config -> the tokens a row the ONNX graph is traced on``, where the model's code shapes its
            work by the length (a Mamba2 scan's chunks: traced over two, so that the graph takes any count); None:
            the exporter's few.
        traceable: ``model -> context manager`` within which torch's ONNX exporter traces the model, where
            transformers computes something the exporter does not take (Llama 4's RoPE in complex numbers, computed
            in real ones there); None: traced as it is. The export's gate compares the graph with the model itself.
        generates_from: ``(version, why)``: the lowest transformers known to run the model type's own ``generate``, and
            what fails on older ones; a generate task there is refused in one line (empty: any supported version).
    """

    model_type: str
    adapter: Adapter
    tiny: TinyModel
    gguf: Gguf | None = None
    genai: str | None = None
    note: str = ""
    onnx_refused: str = ""
    gguf_refused: str = ""
    onnx_tokens: Callable[[Any], int] | None = None
    traceable: Callable[[Any], AbstractContextManager[None]] | None = None
    generates_from: tuple[str, str] | tuple[()] = ()


FAMILIES: Registry[str, Family] = Registry("model type")  # two files claiming one model type: an error at import


def register(*families: Family) -> tuple[Family, ...]:
    """Register ``families`` by their model types (a family file calls this once, at import).

    Raises:
        ValueError: a model type is registered already.
    """
    for family in families:
        FAMILIES.add(family.model_type, family)
    return families


__all__ = ["FAMILIES", "Family", "TinyModel", "register"]
