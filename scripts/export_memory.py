"""Peak resident memory of ``headprune export`` as a multiple of the model's weight bytes.

Each export runs in its own process (``python -m headprune export``), and its peak resident set size is read
from the kernel's accounting of that process (``os.wait4``), so nothing of this script counts. The fixed
overhead (Python, torch and transformers imported, no model) is measured the same way and reported beside it.

    python scripts/export_memory.py --shape 1.5b --dtype bfloat16                  # random-init, Qwen2.5-1.5B shape
    python scripts/export_memory.py --model smollm2-135m --formats safetensors,onnx,gguf

Models built from a shape are random-initialised from a config (no download) and cached in ``--work``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# Llama-style shapes of real checkpoints (layers as the real model unless --layers says otherwise).
SHAPES = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=151936),  # Qwen2.5-1.5B: 1.54B parameters, tied embeddings
}


def build(shape: str, dtype: str, folder: Path, layers: int | None) -> Path:
    """A random-initialised Llama of ``shape`` saved in ``folder`` with a small tokenizer (once)."""
    if (folder / "config.json").is_file():
        return folder
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    sizes = dict(SHAPES[shape], **({"num_hidden_layers": layers} if layers else {}))
    config = transformers.LlamaConfig(**sizes, max_position_embeddings=2048, tie_word_embeddings=True,
                                      pad_token_id=0, eos_token_id=1, bos_token_id=1)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    model = model.to_empty(device="cpu").to(getattr(torch, dtype))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.02)
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(["the quick brown fox jumps over the lazy dog 0123456789"] * 20,
                             trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<eos>"],
                                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")
    staging = folder.with_name(folder.name + ".partial")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    staging.rename(folder)
    return folder


def weight_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def peak_rss(command: list[str], env: dict[str, str]) -> tuple[int, int, str]:
    """(peak resident bytes, exit code, last output lines) of one process."""
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        log.seek(0)
        tail = log.read().decode(errors="replace").strip().splitlines()[-3:]
    return usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status), "\n".join(tail)


def measure(model: str, weights: int, formats: list[str], heads: str, layout: str, work: Path) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    overhead, _, _ = peak_rss([sys.executable, "-c", "import torch, transformers, headprune.exporter.pipeline"], env)
    rows = []
    for fmt in formats:
        out = work / f"export-{fmt}"
        command = [sys.executable, "-m", "headprune", "export", model, "--heads", heads, "--layout", layout,
                   "--format", fmt, "--out", str(out)] + (["--dtype", "float32"] if fmt != "safetensors" else [])
        peak, code, tail = peak_rss(command, env)
        rows.append({"format": fmt, "layout": layout, "exit": code, "weights": weights, "peak": peak,
                     "overhead": overhead, "x_weights": round(peak / weights, 2),
                     "x_weights_above_overhead": round((peak - overhead) / weights, 2), "tail": tail if code else ""})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), help="a random-initialised Llama of this shape")
    parser.add_argument("--model", help="an existing model spec instead (folder, .gguf, smollm2-135m)")
    parser.add_argument("--dtype", default="bfloat16", help="for --shape: the weights' dtype")
    parser.add_argument("--layers", type=int, default=None, help="for --shape: fewer layers than the real model")
    parser.add_argument("--formats", default="safetensors", help="comma-separated: safetensors,onnx,gguf")
    parser.add_argument("--layout", default="sliced", choices=["sliced", "dense"])
    parser.add_argument("--heads", default="L0.H0,L0.H1,L1.H3,L2.H5", help="heads removed (by hand: no task)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "headprune-export-memory")
    args = parser.parse_args()
    if (args.shape is None) == (args.model is None):
        parser.error("give --shape or --model")
    args.work.mkdir(parents=True, exist_ok=True)
    if args.shape:
        folder = build(args.shape, args.dtype, args.work / f"{args.shape}-{args.dtype}-{args.layers or 'all'}",
                       args.layers)
        model, weights = str(folder), weight_bytes(folder)
    else:
        from headprune.models import resolve_model

        model, weights = args.model, weight_bytes(resolve_model(args.model))
    with tempfile.TemporaryDirectory(dir=args.work) as scratch:
        measure(model, weights, args.formats.split(","), args.heads, args.layout, Path(scratch))


if __name__ == "__main__":
    main()
