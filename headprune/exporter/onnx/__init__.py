"""ONNX: the graph exported and run in onnxruntime (``export``: a logits graph, or a decoder with a key/value cache
for ONNX Runtime GenAI) and whether the installed GenAI runs per-layer key/value head counts (``genai_probe``)."""
