"""Benchmark: what pruning buys at deployment, in one process: generation speed of the original and the pruned
model in torch (transformers), ONNX Runtime GenAI and llama.cpp, for a realistic and a heavy prune.

Each prune is exported with ``headprune.exporter.export`` (the CLI's code path, verified on a few examples):
sliced safetensors for torch, ``--format onnx`` for ONNX Runtime GenAI (sliced where the installed GenAI runs
layers with different key/value head counts, else the dense fallback; the table says which layout each runtime got)
and ``--format gguf --layout sliced`` for llama.cpp. The baseline in each runtime is the original model
converted by the same writer (``export_decoder`` for ONNX, ``gguf_export.write_files`` as the stock ``llama``
architecture for GGUF), run in the same process on the same prompts. Prompts are real task prompts, one at a
time (batch 1, as a local deployment runs); each is prefilled (prompt tokens/s: the prompt's forward pass and
the first token) and then decoded greedily for exactly --new-tokens single-token steps (decode tokens/s; no
early stop at end-of-sequence); with ``--context N`` every prompt is N tokens (the task texts' tokens one after
another), so decoding reads a key/value cache that long, where a smaller cache shows. After a warm-up, every
model of a runtime runs in turn in each repeat, so drift hits all alike; the table gives the median over repeats
and the ratio pruned/original per runtime, with parameters, file bytes and key/value cache bytes per token.

Prunes: ``realistic`` is --heads (a head list or a find result: file or folder); ``heavy`` is --heavy-heads or,
by default, :func:`heavy_heads` (a fixed rule: a quarter of the heads as whole key/value groups, one group in
each of evenly spaced layers, topped up with single heads; every layer keeps heads).

    python -m scripts.bench.export [--model smollm2-135m] [--heads L3.H0,...|RUN/result.json] [--heavy-heads ...]
        [--tasks sentiment,arithmetic] [--prompts 4] [--new-tokens 16] [--context 2048] [--repeats 3] [--threads N]
        [--runtimes torch,onnx-genai,llama.cpp] [--gguf-type f32] [--verify-limit 8] [--json runs/bench/export.json]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from headprune.exporter import export, resolve_heads
from headprune.exporter.export_record import weight_bytes
from headprune.exporter.runtime_check import eos_ids, task_texts
from headprune.exporter.runtimes import GenaiRunner, LlamaCppModel, TorchRunner
from headprune.heads import Head, HeadGrid, parse_heads
from headprune.loading.models import LoadedModel, load, load_model
from headprune.surgery.slicing import count_parameters
from headprune.tasks import load_task

from .common import add_json_option, write_json

RUNTIMES = ("torch", "onnx-genai", "llama.cpp")
REALISTIC = "L3.H0,L3.H1,L3.H2,L10.H3,L10.H4,L10.H5,L12.H1,L20.H7"  # two whole KV groups and two single heads


def heavy_heads(grid: HeadGrid, fraction: float = 0.25) -> tuple[Head, ...]:
    """``fraction`` of the heads by a fixed rule: whole key/value groups first (so the model really shrinks),
    one per layer in evenly spaced layers (group ``layer % kv_heads``), then single heads (the first query head
    of group ``(layer + 1) % kv_heads``) in the first layers still untouched, or else in any layer that keeps
    more than one group. Every layer keeps heads."""
    target = int(grid.total * fraction)
    size = grid.num_heads // grid.num_kv_heads
    groups = min(target // size, grid.num_layers if grid.num_kv_heads > 1 else 0)
    layers = sorted({int(i * grid.num_layers / groups) for i in range(groups)}) if groups else []
    chosen = [Head(layer, (layer % grid.num_kv_heads) * size + i) for layer in layers for i in range(size)]
    order = [*(x for x in range(grid.num_layers) if x not in layers), *layers]
    while len(chosen) < target:
        grown = len(chosen)
        for layer in order:
            taken = {h.head for h in chosen if h.layer == layer}
            free = [h for h in range(grid.num_heads) if h not in taken]
            pick = ((layer + 1) % grid.num_kv_heads) * size
            if len(chosen) < target and len(free) > 1:
                chosen.append(Head(layer, pick if pick in free else free[0]))
        if len(chosen) == grown:
            break
    return grid.check(chosen)


def long_prompts(prompts: list[list[int]], context: int) -> list[list[int]]:
    """As many prompts of ``context`` tokens: every prompt's tokens one after another, repeated, each long prompt
    starting at the next short one's start."""
    pool = [token for prompt in prompts for token in prompt]
    pool = pool * (context // len(pool) + 2)
    starts = [sum(map(len, prompts[:i])) for i in range(len(prompts))]
    return [pool[start: start + context] for start in starts]


@dataclass
class Entry:
    """One model in one runtime: what it is, and a runner (``timed(prompt, steps) -> (prefill s, decode s)``)."""

    name: str  # "original" or the prune's name
    layout: str
    params: int
    file_bytes: int
    kv_bytes: int  # key/value cache per token
    memory: int | None  # weights in memory (torch)
    runner: Any = None
    note: str = ""
    prompt: list[float] = field(default_factory=list)  # tokens/s per repeat
    decode: list[float] = field(default_factory=list)


def _memory_bytes(model: torch.nn.Module) -> int:
    """Bytes of the parameters and buffers in memory, each shared tensor counted once."""
    seen, total = set(), 0
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            total += tensor.numel() * tensor.element_size()
    return total


def _kv_bytes(grid: HeadGrid, record: Any | None, itemsize: int, padded_values: bool = False) -> int:
    """Keys and values per token: the sliced layers' own key/value heads, else every layer's. ``padded_values``:
    llama.cpp without flash attention stores every layer's values as wide as the widest layer's."""
    heads = [len(p.kv_heads) for p in record.layers] if record is not None and record.layers else (
        [grid.num_kv_heads] * grid.num_layers)
    values = len(heads) * max(heads) if padded_values else sum(heads)
    return (sum(heads) + values) * grid.head_dim * itemsize


class Unavailable(Exception):
    """A runtime that cannot be imported here."""


def _why(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def _failed(name: str, error: Exception) -> Entry:
    return Entry(name, "-", 0, 0, 0, None, None, f"export failed: {_why(error)}")


def build_torch(lm: LoadedModel, prunes: dict, folder: Path, options: dict) -> list[Entry]:
    entries = [Entry("original", "-", count_parameters(lm.model), weight_bytes(lm.folder) if lm.folder.is_dir() else 0,
                     _kv_bytes(lm.grid, None, 4), _memory_bytes(lm.model), TorchRunner(lm.model))]
    for name, heads in prunes.items():
        try:
            record = export(lm, heads, out=folder / f"{name}-torch", **options)
        except Exception as error:  # noqa: BLE001 - one prune's failed export is a row; the others go on
            entries.append(_failed(name, error))
            continue
        pruned = load(folder / f"{name}-torch", dtype=torch.float32, device="cpu")
        entries.append(Entry(name, record.layout, record.parameters.after, record.bytes.after,
                             _kv_bytes(lm.grid, record, 4), _memory_bytes(pruned.model), TorchRunner(pruned.model)))
    return entries


def build_genai(lm: LoadedModel, prunes: dict, folder: Path, options: dict, threads: int) -> list[Entry]:
    from headprune.exporter.onnx.export import export_decoder

    base = folder / "original-onnx"
    base.mkdir()
    export_decoder(lm.model, base, eos=eos_ids(lm), pad=lm.tokenizer.pad_token_id or 0,
                   bos=lm.tokenizer.bos_token_id)
    entries = [Entry("original", "dense", count_parameters(lm.model), weight_bytes(base), _kv_bytes(lm.grid, None, 4),
                     None, GenaiRunner(base, threads=threads))]
    for name, heads in prunes.items():
        try:
            record = export(lm, heads, format="onnx", out=folder / f"{name}-onnx", **options)
        except Exception as error:  # noqa: BLE001
            entries.append(_failed(name, error))
            continue
        note = "" if record.layout == "sliced" else f"fallback: {record.layout_note}"  # what GenAI could not run
        entries.append(Entry(name, record.layout, record.parameters.after, weight_bytes(folder / f"{name}-onnx"),
                             _kv_bytes(lm.grid, record, 4), None,
                             GenaiRunner(folder / f"{name}-onnx", threads=threads), note))
    return entries


def _llama_cpp(path: Path, n_ctx: int, threads: int, flash_attn: bool) -> LlamaCppModel:
    """llama.cpp with its default settings, as a deployment runs it: f16 key/value cache, logits of the last token
    only (``timed``); flash attention off unless asked for."""
    return LlamaCppModel(path, n_ctx=n_ctx, eos=(), threads=threads, kv_f32=False, flash_attn=flash_attn)


def build_llama_cpp(lm: LoadedModel, prunes: dict, folder: Path, options: dict, threads: int, n_ctx: int,
                    gguf_type: str, flash_attn: bool) -> list[Entry]:
    from headprune.exporter.gguf import families as gguf_families
    from headprune.exporter.gguf import writer as gguf_export

    arch = gguf_families.check_supported(lm, "dense", gguf_type)
    base = folder / "original-gguf"
    base.mkdir()
    written = gguf_export.write_files(lm, lm.model, arch, None, base, base, gguf_type, with_original=False)
    kv = 2  # llama.cpp's default f16 key/value cache
    entries = [Entry("original", arch, count_parameters(lm.model), weight_bytes(written.path),
                     _kv_bytes(lm.grid, None, kv), None, _llama_cpp(written.path, n_ctx, threads, flash_attn))]
    for name, heads in prunes.items():
        out = folder / f"{name}-gguf"
        try:
            record = export(lm, heads, format="gguf", layout="sliced", gguf_type=gguf_type, out=out, **options)
        except Exception as error:  # noqa: BLE001
            entries.append(_failed(name, error))
            continue
        entries.append(Entry(name, f"sliced ({record.format_details['architecture']})", record.parameters.after,
                             weight_bytes(out / gguf_export.file_name(gguf_type)),
                             _kv_bytes(lm.grid, record, kv, not flash_attn), None,
                             _llama_cpp(out / gguf_export.file_name(gguf_type), n_ctx, threads, flash_attn)))
    return entries


def measure(entries: list[Entry], prompts: list[list[int]], steps: int, repeats: int, warmup: int) -> None:
    """Warm-up, then ``repeats`` rounds; each round runs every entry over every prompt, the entries in a rotated
    order so that a slow or fast stretch of the machine is shared."""
    entries = [e for e in entries if e.runner is not None]
    for entry in entries:
        for prompt in prompts[:warmup]:
            entry.runner.timed(prompt, steps)
    tokens = sum(len(p) for p in prompts)
    for round_ in range(repeats):
        for entry in entries[round_ % len(entries):] + entries[: round_ % len(entries)]:
            prefill = decode = 0.0
            for prompt in prompts:
                a, b = entry.runner.timed(prompt, steps)
                prefill, decode = prefill + a, decode + b
            entry.prompt.append(tokens / prefill)
            entry.decode.append(len(prompts) * steps / decode)


WIDTHS = (-35, -20, -14, 12, 8, 7, 8, 12, 12, 8, 8)  # negative: left-aligned; columns are two spaces apart
COLUMNS = ("runtime", "model", "layout", "parameters", "file MiB", "mem MiB", "KV B/tok", "prompt tok/s",
           "decode tok/s", "x prompt", "x decode")


def _row(cells: Sequence[str]) -> str:
    return "  ".join(f"{c:<{-w}}" if w < 0 else f"{c:>{w}}" for c, w in zip(cells, WIDTHS)).rstrip()


HEADER = _row(COLUMNS)


def table_rows(runtime: str, entries: list[Entry], sizes: dict[str, int]) -> list[tuple[tuple[str, ...], str]]:
    """The runtime's rows, each its cells and a note: absolute medians, and ratios to the original (the first)."""
    base_prompt, base_decode = statistics.median(entries[0].prompt), statistics.median(entries[0].decode)
    rows = []
    for entry in entries:
        if entry.runner is None:
            rows.append(((runtime, f"{entry.name} ({sizes[entry.name]} heads)", entry.note), ""))
            continue
        prompt, decode = statistics.median(entry.prompt), statistics.median(entry.decode)
        rows.append(((
            runtime, entry.name if entry.name == "original" else f"{entry.name} ({sizes[entry.name]} heads)",
            entry.layout, f"{entry.params:,}", f"{entry.file_bytes / 2**20:.1f}",
            "-" if entry.memory is None else f"{entry.memory / 2**20:.1f}", f"{entry.kv_bytes:,}",
            f"{prompt:.1f}", f"{decode:.1f}", f"{prompt / base_prompt:.2f}", f"{decode / base_decode:.2f}"), entry.note))
    return rows


def runtime_rows(runtime: str, args: argparse.Namespace, lm: LoadedModel, prunes: dict, folder: Path,
                 prompts: list[list[int]], options: dict, sizes: dict[str, int], n_ctx: int
                 ) -> list[tuple[tuple[str, ...], str]]:
    """Export, load and time every model in ``runtime``; its rows (one saying why, when it cannot run)."""
    entries: list[Entry] = []
    label = runtime
    try:
        if runtime == "torch":
            import transformers

            label = f"torch {torch.__version__.split('+')[0]} (transformers {transformers.__version__})"
            entries = build_torch(lm, prunes, folder, options)
        elif runtime == "onnx-genai":
            from headprune.exporter.onnx.export import genai_version

            version, reason = genai_version()
            label = f"ONNX Runtime GenAI {version}"
            if version is None:
                raise Unavailable(reason)
            entries = build_genai(lm, prunes, folder, options, args.threads)
        else:
            from headprune.exporter.gguf.writer import llama_cpp_version

            version, reason = llama_cpp_version()
            label = f"{version or 'llama.cpp'} ({args.gguf_type}{', FA' if args.flash_attn else ''})"
            if version is None:
                raise Unavailable(reason)
            entries = build_llama_cpp(lm, prunes, folder, options, args.threads, n_ctx, args.gguf_type,
                                      args.flash_attn)
        measure(entries, prompts, args.new_tokens, args.repeats, args.warmup)
        return table_rows(label, entries, sizes)
    except Unavailable as error:
        return [((label, f"not available: {error}"), "")]
    except Exception as error:  # noqa: BLE001 - a runtime that fails is a row, not the end of the others
        return [((label, f"failed: {_why(error)}"), "")]
    finally:
        for entry in entries:
            if entry.runner is not None:
                entry.runner.close()


def main(argv: Sequence[str] | None = None) -> list[str]:
    """Run the benchmark; prints the table and returns its lines (header first)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--heads", default=REALISTIC, help="the realistic prune: heads, or a find result")
    parser.add_argument("--heavy-heads", default=None, help="the heavy prune (default: heavy_heads' fixed rule)")
    parser.add_argument("--tasks", default="sentiment,arithmetic", help="task specs whose prompts are run")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per task")
    parser.add_argument("--new-tokens", type=int, default=16, help="decode steps after each prompt")
    parser.add_argument("--context", type=int, default=0,
                        help="prompts of exactly this many tokens (the task texts' tokens one after another, each "
                             "prompt starting elsewhere): decoding then reads that long a key/value cache")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2, help="prompts each model runs before timing")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--runtimes", default=",".join(RUNTIMES))
    parser.add_argument("--gguf-type", default="f32",
                        help="the GGUF files' tensor type (f32, f16, bf16, q8_0, q4_k_m, q5_k_m, q6_k)")
    parser.add_argument("--flash-attn", action="store_true", help="llama.cpp with flash attention")
    parser.add_argument("--verify-limit", type=int, default=8, help="examples each export verifies on")
    add_json_option(parser, "export")
    args = parser.parse_args(argv)
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    unknown = sorted(set(runtimes) - set(RUNTIMES))
    if unknown:
        parser.error(f"unknown runtimes {unknown}; choose from {', '.join(RUNTIMES)}")
    if min(args.new_tokens, args.repeats, args.prompts) < 1:
        parser.error("--new-tokens, --repeats and --prompts must be at least 1")
    torch.set_num_threads(args.threads)
    lm = load_model(args.model, dtype="float32", device="cpu")
    realistic, _ = resolve_heads(args.heads, lm)
    heavy = lm.grid.check(parse_heads(args.heavy_heads)) if args.heavy_heads else heavy_heads(lm.grid)
    prunes = {"realistic": realistic, "heavy": heavy}
    sizes = {name: len(heads) for name, heads in prunes.items()}
    tasks = [load_task(spec) for spec in args.tasks.split(",")]
    texts = [text for task in tasks for text in task_texts(task)[: args.prompts]]
    prompts = [list(lm.tokenizer(text)["input_ids"]) for text in texts]
    if args.context:
        prompts = long_prompts(prompts, args.context)
    options = dict(verify_task=tasks[0], verify_limit=args.verify_limit)
    n_ctx = 64 * -(-(max(map(len, prompts)) + args.new_tokens + 16) // 64)
    print(f"{args.model}: {lm.grid.num_layers} layers x {lm.grid.num_heads} query heads ({lm.grid.num_kv_heads} KV "
          f"heads); float32 weights; {len(prompts)} prompts ({', '.join(t.name for t in tasks)}; "
          f"{sum(map(len, prompts))} prompt tokens), batch 1, {args.new_tokens} decode steps each, warm-up "
          f"{args.warmup} prompts, median of {args.repeats} repeats, {args.threads} threads")
    how = {"realistic": "--heads", "heavy": "--heavy-heads" if args.heavy_heads else
           "fixed rule heavy_heads(): whole KV groups in evenly spaced layers, then single heads"}
    for name, heads in prunes.items():
        print(f"{name} ({how[name]}): {len(heads)} of {lm.grid.total} heads removed: {','.join(map(str, heads))}")
    lines, records = [HEADER], []
    print(HEADER)
    with tempfile.TemporaryDirectory() as scratch:
        for runtime in runtimes:
            for cells, note in runtime_rows(runtime, args, lm, prunes, Path(scratch), prompts, options, sizes,
                                            n_ctx):
                lines.append(_row(cells) + (f"  {note}" if note else ""))
                records.append({**dict(zip(COLUMNS, cells)), **({"note": note} if note else {})})
                print(lines[-1], flush=True)
    write_json(args.json, "export", args, records, prunes={name: [str(h) for h in heads]
                                                          for name, heads in prunes.items()})
    return lines


if __name__ == "__main__":
    main()
