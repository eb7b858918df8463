"""GGUF files: which families as which of llama.cpp's architectures (``families``; bare encoders in ``encoders``), the
file written (``writer``: tensors, keys, the tokenizer in ``tokenizer``, experts' stacked tensors in ``experts``, fused
q/k/v in ``fused``, RoPE scalings in ``rope``), read back (``read``), K-quants by llama.cpp's quantizer (``quant``), a
lossy file's checks (``quant_check``) and its size and key/value cache against the original's (``size``)."""
