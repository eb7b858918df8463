"""BERT / RoBERTa encoders (MiniLM included): ``encoder.layer[i].attention.self.{query,key,value}`` and
the output projection ``attention.output.dense``. Encoders have no LM head; tasks score them by
embedding similarity."""

from headprune.loading.adapters.base import Adapter

BERT = Adapter(
    family="bert",
    model_types=("bert", "roberta"),
    layers_path="encoder.layer",
    attention_path="attention.self",
    output_projection_path="attention.output.dense",
    is_encoder=True,
    qkv_paths=("attention.self.query", "attention.self.key", "attention.self.value"),
    count_attrs=("num_attention_heads",),
    first_position_classes=("BertForSequenceClassification", "RobertaForSequenceClassification"),
)
