"""``headprune export``: write a pruned checkpoint, verified first. Exit 0 written, 1 verification failed,
2 bad input."""

from __future__ import annotations

import json
from pathlib import Path

import click

from headprune.cli.options import (ablation_option, batch_option, device_option, json_option, model_argument,
                                   refuse_inapplicable, slug, trust_remote_code_option)
from headprune.core.choices import DTYPES, EXPORT_FORMATS, EXPORT_LAYOUTS, GGUF_TYPES


@click.command("export")
@model_argument
@click.option("--heads", "heads_spec", required=True, metavar="RESULT.json|HEADS",
              help="A find result (result.json or its folder) or heads like L0.H1,L3.H2.")
@click.option("--set", "set_rank", type=click.IntRange(min=1), default=1, show_default=True,
              help="With a result: which finalist (1 = the primary set).")
@click.option("--allow-unconfirmed", is_flag=True,
              help="Export a finalist whose held-out gain is not confirmed (its model card says so first).")
@click.option("--format", "fmt", type=click.Choice(EXPORT_FORMATS), default="safetensors",
              show_default=True, help="gguf: for llama.cpp (Llama-style models); run in llama.cpp before writing.")
@click.option("--layout", type=click.Choice(EXPORT_LAYOUTS), default="sliced", show_default=True,
              help="sliced: heads physically removed (smaller); dense: same shapes, heads silenced.")
@ablation_option
@click.option("--verify-task", default=None, metavar="TASK",
              help="Task re-measured on the export [default: the result's held-out set; heads given by hand: "
                   "none, outputs are verified on a built-in text sample].")
@click.option("--verify-limit", type=click.IntRange(min=1), default=500, show_default=True,
              help="At most this many verification examples.")
@click.option("--tolerance", type=float, default=None,
              help="Largest allowed |logit difference| to the masked original, times max(1, largest |logit|) "
                   "[default: 1e-5 in float32, 5e-3 in float16, 2e-2 in bfloat16; 5e-5 for ONNX, 2e-5 for GGUF].")
@batch_option
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder [default: exports/MODEL-pruned]: a new or empty folder, or a previous export with "
                   "--overwrite; never the model's folder, a find run's, or a folder of other files.")
@click.option("--overwrite", is_flag=True,
              help="Replace a previous headprune export in --out (only once the new one is verified).")
@device_option
@click.option("--dtype", type=click.Choice(DTYPES), default=None,
              help="The export's precision [default: the checkpoint's own]; the verification tolerance follows it.")
@click.option("--gguf-type", type=click.Choice(GGUF_TYPES), default="f32", show_default=True,
              help="With --format gguf: the file's tensor type (a float32 copy is the one verified in llama.cpp).")
@click.option("--max-shard-size", default=None, metavar="SIZE",
              help="Safetensors exports larger than this (5GB, 500MB, bytes) are written in shards with an index "
                   "[default: transformers' save_pretrained default].")
@trust_remote_code_option
@json_option
def export_command(model: str, heads_spec: str, set_rank: int, allow_unconfirmed: bool, fmt: str, layout: str,
                   ablation: str, verify_task: str | None, verify_limit: int, tolerance: float | None,
                   batch_size: int | str, out: Path | None, device: str, dtype: str | None, gguf_type: str,
                   max_shard_size: str | None, overwrite: bool, trust_remote_code: bool, as_json: bool) -> None:
    """Remove heads from MODEL and write a verified checkpoint (safetensors, ONNX or GGUF)."""
    from headprune.core.io import check_writable_folder
    from headprune.core.record_json import to_json
    from headprune.exporter.destination import check_destination, local_sources
    from headprune.exporter.pipeline import export

    refuse_inapplicable(click.get_current_context(), ("gguf_type", fmt == "gguf", "with --format gguf"))
    out = out or Path("exports") / f"{slug(model)}-pruned{'' if fmt == 'safetensors' else '-' + fmt}"
    check_destination(out, sources=local_sources(model), overwrite=overwrite)  # before even a write probe
    check_writable_folder(out.parent)
    record = export(model, heads_spec, set_rank=set_rank, format=fmt, layout=layout, ablation=ablation,
                    verify_task=verify_task, verify_limit=verify_limit, tolerance=tolerance, out=out,
                    batch_size=batch_size, device=device, dtype=dtype,
                    trust_remote_code=trust_remote_code, allow_unconfirmed=allow_unconfirmed, gguf_type=gguf_type,
                    max_shard_size=max_shard_size, overwrite=overwrite)
    if as_json:
        click.echo(json.dumps({"out": str(out), **{k: to_json(getattr(record, k)) for k in (
            "removed_heads", "layout", "format", "parameters", "bytes", "verification", "gguf")}}))
        return
    logits, task = record.verification.logits, record.verification.task
    params, size = record.parameters, record.bytes
    click.echo(f"removed {','.join(record.removed_heads)} ({layout}, {ablation}); parameters "
               f"{params.before:,} -> {params.after:,}; weight bytes {size.before:,} -> {size.after:,}")
    click.echo(f"verified: max |logit diff| {logits.max_abs_diff:.2e} <= {logits.allowed:.2e}; " + (
               f"{task.task} (n={task.n}): original {_metric(task.intact, task.metric)}, masked "
               f"{_metric(task.masked, task.metric)}, exported {_metric(task.exported, task.metric)}"
               if task is not None else f"on a built-in text sample ({logits.examples} texts); no task re-measured"))
    if record.gguf is not None:
        _echo_gguf(record.gguf)
    if fmt == "gguf":
        checked = record.gguf.runtime.runtime if record.gguf is not None else ""
        how = (f'llama_cpp.Llama("{out}/model.gguf"), as checked in {checked}'
               if "llama-cpp-python" in checked else f"llama-cli or llama-server -m {out}/model.gguf, or "
               f"xllamacpp.Server" + (f"; checked in {checked}" if checked else "; not run in llama.cpp here"))
    elif fmt == "onnx":
        how = f'onnxruntime.InferenceSession("{out}/model.onnx")'
    elif layout == "sliced":
        how = f'headprune.load("{out}")  or  {record.auto_class}.from_pretrained("{out}", trust_remote_code=True)'
    else:
        how = f'{record.auto_class}.from_pretrained("{out}")'
    click.echo(f"wrote {out}  (load with {how})")


def _metric(value: float | None, metric: str) -> str:
    return "n/a" if value is None else f"{value:.2%}" if metric == "accuracy" else f"{value:.4f}"


def _echo_gguf(info) -> None:  # noqa: ANN001
    check = info.runtime
    if not check.done:
        click.echo(f"note: the GGUF file was not run in llama.cpp: {check.reason}")
    else:
        click.echo(f"llama.cpp ({info.architecture}, float32): {check.identical} of {check.prompts} prompts decode "
                   f"greedily to the masked original's tokens ({check.ties} near-ties, {check.tokens} tokens); "
                   f"tokenizer agrees on {check.tokenizer_agree} of {check.tokenizer_texts} texts")
    typed = info.typed_runtime
    if typed is not None and typed.done:
        click.echo(f"{info.gguf_type} file (lossy, reported, not gated): {typed.identical} of {typed.prompts} prompts "
                   f"give the same greedy tokens ({typed.mismatches} diverge)")
