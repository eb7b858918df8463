"""DeBERTa-v2 and DeBERTa-v3 (``deberta-v2``): ``encoder.layer[i].attention.self.{query,key,value}_proj`` and the
output projection ``attention.output.dense``, as BERT has them, with disentangled relative-position attention.

Each head also scores relative positions: the relative embeddings are projected per head by the same
``query_proj``/``key_proj`` (``share_att_key``, DeBERTa-v3) or by ``pos_query_proj``/``pos_key_proj`` (DeBERTa-v2),
whose rows are sliced with their heads (a projection the model lacks is skipped). The position scores pair a head's
query with its own position keys and its key with its own position queries, so the heads kept compute what they
did. The sequence classifier's pooler reads the first position alone.
"""

from headprune.loading.adapters.base import Adapter

DEBERTA = Adapter(
    family="deberta",
    model_types=("deberta-v2",),
    layers_path="encoder.layer",
    attention_path="attention.self",
    output_projection_path="attention.output.dense",
    is_encoder=True,
    qkv_paths=("attention.self.query_proj", "attention.self.key_proj", "attention.self.value_proj"),
    count_attrs=("num_attention_heads",),
    # pos_key_proj's heads meet the query heads (content to position), pos_query_proj's the key heads
    head_projections=(("attention.self.pos_key_proj", "q"), ("attention.self.pos_query_proj", "kv")),
    first_position_classes=("DebertaV2ForSequenceClassification",),
    layer_returns_tuple=True,
    unsupported_settings=(("attention_head_size", "a head size set apart from hidden_size / num_attention_heads is "
                                                  "not read by headprune"),),
)
