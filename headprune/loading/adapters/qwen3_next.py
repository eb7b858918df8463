"""Qwen3-Next (``qwen3_next``, Qwen3-Next-80B-A3B): Qwen3.5's hybrid of gated attention and Gated DeltaNet layers
(``headprune.loading.adapters.qwen3_5`` says what a head is in each), with a mixture of experts in every layer (its
router, experts and shared expert untouched). Its Gated DeltaNet keeps its projections by key head
(``in_proj_qkvz``: each key head's query and key, then its value heads' values and gates; ``in_proj_ba``: their b, then
their a; :class:`~headprune.surgery.remote_modeling.GroupedGatedDeltaNet`), so a sliced layer keeps even groups too.

GGUF (``qwen3next``; the converter's ``Qwen3NextModel``): dense only, as llama.cpp sizes every attention layer by one
head count and every Gated DeltaNet by its ``ssm`` keys. The converter splits ``in_proj_qkvz`` into ``attn_qkv`` (every
key head's query, then every key, then every value) and ``attn_gate`` (the gates), keeps ``in_proj_ba`` whole
(``ssm_ba``) and the value heads grouped by key head (the graph repeats each key head for its group), and writes the
rest as Qwen3.5's (:class:`GroupedGatedDeltaNetTensors`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from headprune.loading.adapters.base import LLAMA_STYLE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, one_count
from headprune.loading.adapters.qwen3_5 import (GATED_DELTANET, GGUF_VARIANT, MOE, SCAN, GatedDeltaNetTensors,
                                                gated_deltanet_keys, layer_kinds, shared_expert_keys, unequal_heads)

GROUPED_GATED_DELTANET = replace(GATED_DELTANET, qkv_layout="gated-deltanet-grouped", qkv_paths=(
    "linear_attn.in_proj_qkvz", "linear_attn.conv1d", "linear_attn.in_proj_ba"))
QWEN3_NEXT = Adapter(family="qwen3_next", **LLAMA_STYLE,  # type: ignore[arg-type]
                     mixers=(GROUPED_GATED_DELTANET,), layer_kinds=layer_kinds)


class GroupedGatedDeltaNetTensors(GatedDeltaNetTensors):
    """Qwen3-Next's tensors as llama.cpp's qwen3next graph reads them: Qwen3.5's, value heads left grouped, and the
    by-key-head ``in_proj_qkvz`` split into ``attn_qkv`` and ``attn_gate`` (:meth:`split`; :meth:`join` back)."""

    TILED = False
    QKVZ = ".linear_attn.in_proj_qkvz.weight"

    @staticmethod
    def _sizes(config: Any) -> tuple[int, int, int]:
        """Key heads, and the rows a key head has for its query (or key) and for its values (or gates)."""
        keys = int(config.linear_num_key_heads)
        group = int(config.linear_num_value_heads) // keys * int(config.linear_value_head_dim)
        return keys, int(config.linear_key_head_dim), group

    @staticmethod
    def _names(name: str) -> tuple[str, str]:
        block = name.split(".layers.")[1].split(".")[0]
        return f"blk.{block}.attn_qkv.weight", f"blk.{block}.attn_gate.weight"

    def split(self, name: str, data: Any, config: Any) -> dict[str, Any] | None:
        """``in_proj_qkvz`` as the converter stores it (every query, every key, every value; the gates apart);
        None for any other tensor."""
        if not name.endswith(self.QKVZ):
            return None
        keys, head, group = self._sizes(config)
        q, k, v, z = data.reshape(keys, 2 * head + 2 * group, -1).split([head, head, group, group], dim=1)
        qkv = torch.cat([part.reshape(-1, data.shape[1]) for part in (q, k, v)])
        return dict(zip(self._names(name), (qkv.contiguous(), z.reshape(-1, data.shape[1]).contiguous())))

    def join(self, name: str, stored: Any, config: Any) -> Any | None:
        """``in_proj_qkvz`` back from a lossy file's two tensors (the inverse of :meth:`split`); None for any other
        tensor."""
        names = self._names(name) if name.endswith(self.QKVZ) else ()
        if not names or not all(n in stored for n in names):
            return None
        keys, head, group = self._sizes(config)
        qkv, z = (torch.as_tensor(stored[n]) for n in names)
        q, k, v = qkv.split([keys * head, keys * head, keys * group])
        parts = [part.reshape(keys, -1, qkv.shape[1]) for part in (q, k, v, z)]
        return torch.cat(parts, dim=1).reshape(-1, qkv.shape[1])


def _keys(writer: Any, config: Any) -> None:
    """The converter's keys (``Qwen3NextModel``): the Gated DeltaNets' and the experts'."""
    gated_deltanet_keys(writer, config)
    shared_expert_keys(writer, config)


def _refuse(config: Any) -> str | None:
    """What llama.cpp's qwen3next graph fixes that a config can set otherwise."""
    if config.mlp_only_layers or config.decoder_sparse_step != 1:
        return ("it has dense MLP layers (mlp_only_layers, decoder_sparse_step), and llama.cpp's qwen3next graph gives "
                "every layer experts")
    if not config.norm_topk_prob:
        return "it does not renormalise its chosen experts' weights (norm_topk_prob), which llama.cpp's graph does"
    return unequal_heads(config, "qwen3next")


TENSORS = GroupedGatedDeltaNetTensors()
register(Family("qwen3_next", QWEN3_NEXT, TinyModel("Qwen3NextConfig", "Qwen3NextForCausalLM", {
    k: v for k, v in MOE.items() if k != "rope_parameters"}),
    Gguf("qwen3next", dense_only=one_count("qwen3next") + " and every Gated DeltaNet by one value head count",
         keys=_keys, refuse=_refuse, tensors=TENSORS, split=TENSORS.split, join=TENSORS.join,
         holds=("blk.0.ssm_ba.weight", "qwen3next.ssm.group_count"), variant=GGUF_VARIANT,
         refused=({**GGUF_VARIANT, "norm_topk_prob": False}, "norm_topk_prob")),
    note="as Qwen3.5's MoE; its Gated DeltaNet's projections laid out by key head", onnx_refused=SCAN))
