"""BERT / RoBERTa encoders (MiniLM included): ``encoder.layer[i].attention.self.{query,key,value}`` and
the output projection ``attention.output.dense``. Encoders have no LM head; tasks score them by
embedding similarity.

GGUF: the bare encoder, as llama.cpp's converter writes it (``BertModel``, ``RobertaModel``); llama.cpp's ``bert``
graph gives its embeddings (:mod:`headprune.exporter.gguf.encoders` says what it computes and how it is checked).
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.base import Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import GELU_TABLE, Gguf, one_count

BERT = Adapter(
    family="bert",
    layers_path="encoder.layer",
    attention_path="attention.self",
    output_projection_path="attention.output.dense",
    is_encoder=True,
    qkv_paths=("attention.self.query", "attention.self.key", "attention.self.value"),
    count_attrs=("num_attention_heads",),
    first_position_classes=("BertForSequenceClassification", "RobertaForSequenceClassification"),
)
GELUS = ("gelu", "gelu_new", "gelu_pytorch_tanh")  # exact, and the tanh approximation llama.cpp computes


def bert_keys(writer: Any, config: Any) -> None:
    """The converter's ``BertModel.set_gguf_parameters``: LayerNorm's epsilon, bidirectional attention, the
    pooling (mean, headprune's), and the token types the embedding holds (llama.cpp checks the tensor by it)."""
    import gguf

    writer.add_layer_norm_eps(float(config.layer_norm_eps))
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)
    writer.add_token_type_count(int(config.type_vocab_size))


def bert_refusal(config: Any) -> str | None:
    """What llama.cpp's bert graph would compute otherwise (None: nothing)."""
    positions = getattr(config, "position_embedding_type", None) or "absolute"
    if positions != "absolute":
        return f"its position embeddings are {positions}, and llama.cpp's bert graph adds absolute ones"
    activation = getattr(config, "hidden_act", "gelu")
    if activation not in GELUS:
        return f"its MLP's activation is {activation}, and llama.cpp's bert graph computes GELU"
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        return "it is configured as a decoder, and llama.cpp's bert graph is bidirectional"
    if not getattr(config, "type_vocab_size", 0):
        return "it has no token type embedding, which llama.cpp's bert graph reads"
    return None


def _roberta_offset(config: Any) -> int:
    """RoBERTa's first position row: transformers numbers positions from ``pad_token_id + 1`` (the converter drops
    the rows before it, so llama.cpp's position 0 is transformers' ``pad_token_id + 1``)."""
    return int(config.pad_token_id) + 1


# The pooler (BERT's next-sentence head on the first token) is not read by llama.cpp's graph: left out, as the
# converter leaves it.
_GGUF = dict(dense_only=one_count("bert"), keys=bert_keys, refuse=bert_refusal, tolerance=GELU_TABLE, encoder=True,
             rotary=False, dropped=("pooler.",))
register(
    Family("bert", BERT, TinyModel("BertConfig", "BertForMaskedLM"), Gguf("bert", **_GGUF), note="MiniLM included"),
    Family("roberta", BERT, TinyModel("RobertaConfig", "RobertaForMaskedLM", dict(max_position_embeddings=260,
                                                                                 pad_token_id=1)),
           Gguf("bert", position_offset=_roberta_offset, **_GGUF)),
)
