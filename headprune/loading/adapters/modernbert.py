"""ModernBERT (``modernbert``): ``layers[i].attn`` with one fused ``Wqkv`` whose rows are the query heads, then the
key heads, then the value heads (as Phi-3's ``qkv_proj``, one key/value head per query head), and the output
projection ``attn.Wo``.

Local (sliding-window) and global layers alternate: that is a mask and a rotary table per layer, with no parameter
per head, so slicing is the same in both. The attention splits ``Wqkv``'s rows by ``head_dim`` alone (no head count
on the module), so a sliced layer needs only its smaller projections. Its sequence classifier pools the last layer
(``classifier_pooling``: the first position or the mean), and the output projection sits inside the attention
module, which needs every position: no layer is cut at the first position.
"""

from headprune.loading.adapters.base import Adapter

MODERNBERT = Adapter(
    family="modernbert",
    model_types=("modernbert",),
    layers_path="layers",
    attention_path="attn",
    output_projection_path="attn.Wo",
    is_encoder=True,
    qkv_layout="fused",
    qkv_paths=("attn.Wqkv",),
)
