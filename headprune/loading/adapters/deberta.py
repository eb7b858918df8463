"""DeBERTa-v2 and DeBERTa-v3 (``deberta-v2``): ``encoder.layer[i].attention.self.{query,key,value}_proj`` and the
output projection ``attention.output.dense``, as BERT has them, with disentangled relative-position attention.

Each head also scores relative positions: the relative embeddings are projected per head by the same
``query_proj``/``key_proj`` (``share_att_key``, DeBERTa-v3) or by ``pos_query_proj``/``pos_key_proj`` (DeBERTa-v2),
whose rows are sliced with their heads (a projection the model lacks is skipped). The position scores pair a head's
query with its own position keys and its key with its own position queries, so the heads kept compute what they
did. The sequence classifier's pooler reads the first position alone.
"""

from headprune.loading.adapters.base import Adapter
from headprune.loading.adapters.family import Family, TinyModel, register

DEBERTA = Adapter(
    family="deberta",
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
# DeBERTa-v3 as shipped: relative positions only, projected by the shared query/key projections, in log buckets (8
# here, so the tests' 7-token rows reach them). llama.cpp has no DeBERTa architecture: no GGUF.
register(Family("deberta-v2", DEBERTA, TinyModel("DebertaV2Config", "DebertaV2ForMaskedLM", dict(
    relative_attention=True, pos_att_type=["p2c", "c2p"], share_att_key=True, position_biased_input=False,
    position_buckets=8, max_relative_positions=-1, norm_rel_ebd="layer_norm", type_vocab_size=0)),
    note="DeBERTa-v3 too; the relative-position projections go with their heads"))
