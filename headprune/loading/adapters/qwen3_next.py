"""Qwen3-Next (``qwen3_next``, Qwen3-Next-80B-A3B): Qwen3.5's hybrid of gated attention and Gated DeltaNet layers
(``headprune.loading.adapters.qwen3_5`` says what a head is in each), with a mixture of experts in every layer (its
router, experts and shared expert untouched). Its Gated DeltaNet keeps its projections by key head
(``in_proj_qkvz``: each key head's query and key, then its value heads' values and gates; ``in_proj_ba``: their b, then
their a; :class:`~headprune.surgery.remote_modeling.GroupedGatedDeltaNet`), so a sliced layer keeps even groups too.
"""

from __future__ import annotations

from dataclasses import replace

from headprune.loading.adapters.base import LLAMA_STYLE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.qwen3_5 import GATED_DELTANET, MOE, SCAN, layer_kinds

GROUPED_GATED_DELTANET = replace(GATED_DELTANET, qkv_layout="gated-deltanet-grouped", qkv_paths=(
    "linear_attn.in_proj_qkvz", "linear_attn.conv1d", "linear_attn.in_proj_ba"))
QWEN3_NEXT = Adapter(family="qwen3_next", **LLAMA_STYLE,  # type: ignore[arg-type]
                     mixers=(GROUPED_GATED_DELTANET,), layer_kinds=layer_kinds)
register(Family("qwen3_next", QWEN3_NEXT, TinyModel("Qwen3NextConfig", "Qwen3NextForCausalLM", {
    k: v for k, v in MOE.items() if k != "rope_parameters"}),
    note="as Qwen3.5's MoE; its Gated DeltaNet's projections laid out by key head", onnx_refused=SCAN))
