"""``headprune export``: write a pruned checkpoint, verified first. Exit 0 written, 1 verification failed,
2 bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from headprune.cli import exits
from headprune.cli.options import (ablation_option, batch_option, device_option, json_option, model_argument,
                                   refuse_inapplicable, revision_option, slug, trust_remote_code_option)
from headprune.core.choices import DTYPES, EXPORT_FORMATS, EXPORT_LAYOUTS
from headprune.exporter.formats import REGISTRY, format_class, format_options

if TYPE_CHECKING:  # pragma: no cover
    from headprune.exporter.export_record import ExportRecord

DEFAULT_FORMAT = EXPORT_FORMATS[0]  # its exports' default folder has no suffix


def _format_help() -> str:
    """What each format says of itself in --format's help."""
    return "; ".join(f"{name}: {REGISTRY[name].help}" for name in EXPORT_FORMATS if REGISTRY[name].help)


def _tolerance_help() -> str:
    """The default tolerances: the dtype's, and those of the formats that have their own."""
    own = ", ".join(f"{cls.tolerance:.0e}".replace("e-0", "e-") + f" for {cls.title or cls.name}"
                    for cls in (REGISTRY[name] for name in EXPORT_FORMATS) if cls.tolerance is not None)
    return ("Largest allowed |logit difference| to the masked original, times max(1, largest |logit|) "
            f"[default: 1e-5 in float32, 5e-3 in float16, 2e-2 in bfloat16{'; ' + own if own else ''}].")


def _formats_in_words() -> str:
    """``safetensors, ONNX or GGUF``: the formats as prose names them."""
    titles = [REGISTRY[name].title or name for name in EXPORT_FORMATS]
    return ", ".join(titles[:-1]) + " or " + titles[-1] if len(titles) > 1 else titles[0]


def _with_format_options(command):  # noqa: ANN001, ANN201
    """The options only one format takes (``--gguf-type``), each as its format declares it."""
    for _, option in reversed(format_options()):
        command = click.option("--" + option.name.replace("_", "-"), option.name, type=click.Choice(option.choices),
                               default=option.default, show_default=True, help=option.help)(command)
    return command


@click.command("export", help=f"Remove heads from MODEL and write a verified checkpoint ({_formats_in_words()}).")
@model_argument
@click.option("--heads", required=True, metavar="RESULT.json|HEADS",
              help="A find result (result.json or its folder) or heads like L0.H1,L3.H2.")
@click.option("--pick", "--set", "set_rank", type=click.IntRange(min=1), default=1, show_default=True,
              help="With a result: which finalist by its rank (1 = the primary set; another is a point of the front in "
                   "report.md, exported with --allow-unconfirmed, its figures exploratory).")
@click.option("--allow-unconfirmed", is_flag=True,
              help="Export a finalist whose held-out gain is not confirmed (its model card says so first).")
@click.option("--format", "fmt", type=click.Choice(EXPORT_FORMATS), default=DEFAULT_FORMAT,
              show_default=True, help=_format_help())
@click.option("--layout", type=click.Choice(EXPORT_LAYOUTS), default="sliced", show_default=True,
              help="sliced: heads physically removed (smaller); dense: same shapes, heads silenced.")
@ablation_option
@click.option("--verify-task", default=None, metavar="TASK",
              help="Task re-measured on the export [default: the result's held-out set; heads given by hand: "
                   "none, outputs are verified on a built-in text sample].")
@click.option("--verify-limit", type=click.IntRange(min=1), default=500, show_default=True,
              help="At most this many verification examples.")
@click.option("--tolerance", type=float, default=None, help=_tolerance_help())
@batch_option
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder [default: exports/MODEL-pruned]: a new or empty folder, or a previous export with "
                   "--overwrite; never the model's folder, a find run's, or a folder of other files.")
@click.option("--overwrite", is_flag=True,
              help="Replace a previous headprune export in --out (only once the new one is verified).")
@device_option
@click.option("--dtype", type=click.Choice(DTYPES), default=None,
              help="The export's precision [default: the checkpoint's own]; the verification tolerance follows it.")
@_with_format_options
@click.option("--max-shard-size", default=None, metavar="SIZE",
              help="Safetensors exports larger than this (5GB, 500MB, bytes) are written in shards with an index "
                   "[default: transformers' save_pretrained default].")
@revision_option
@trust_remote_code_option
@json_option
def export_command(model: str, heads: str, set_rank: int, allow_unconfirmed: bool, fmt: str, layout: str,
                   ablation: str, verify_task: str | None, verify_limit: int, tolerance: float | None,
                   batch_size: int | str, out: Path | None, device: str, dtype: str | None, max_shard_size: str | None,
                   overwrite: bool, trust_remote_code: bool, as_json: bool, revision: str | None,
                   **chosen: str) -> None:
    # Its help (what --help says) names the registered formats: see the decorator.
    from headprune.core.io import check_writable_folder
    from headprune.core.record_json import to_json
    from headprune.exporter.destination import check_destination, export_inputs
    from headprune.exporter.pipeline import export
    from headprune.exporter.resolve import read_result

    refuse_inapplicable(click.get_current_context(), *((option.name, fmt == owner, f"with --format {owner}")
                                                       for owner, option in format_options()))
    out = out or Path("exports") / f"{slug(model)}-pruned{'' if fmt == DEFAULT_FORMAT else '-' + fmt}"
    read = export_inputs(model, heads, verify_task, read_result(heads, set_rank))  # the model, run, tasks
    check_destination(out, sources=read, overwrite=overwrite)  # before even a write probe
    check_writable_folder(out.parent)
    record = export(model, heads, set_rank=set_rank, format=fmt, layout=layout, ablation=ablation,
                    verify_task=verify_task, verify_limit=verify_limit, tolerance=tolerance, out=out,
                    batch_size=batch_size, device=device, dtype=dtype,
                    trust_remote_code=trust_remote_code, allow_unconfirmed=allow_unconfirmed,
                    max_shard_size=max_shard_size, overwrite=overwrite, revision=revision,
                    format_options={option.name: chosen[option.name] for option in format_class(fmt).takes})
    exits.output_in_place()  # written: a Ctrl-C while the summary prints does not make it a failed export
    if as_json:
        # Each format that records details has them under its name (null for the others), as before schema 4.
        details = {name: record.format_details or None if name == record.format else None
                   for name in EXPORT_FORMATS if REGISTRY[name].details_type is not None}
        click.echo(json.dumps({"out": str(out), **{k: to_json(getattr(record, k)) for k in (
            "removed_heads", "layout", "format", "parameters", "bytes", "verification")}, **details}))
        return
    for line in export_summary(record, str(out)):
        click.echo(line)


def export_summary(record: ExportRecord, out: str) -> list[str]:
    """What ``headprune export`` prints of a written export: what was removed (in the layout written, which a
    format may choose over the one asked for), the verification, the format's own lines and how to load it."""
    logits, task = record.verification.logits, record.verification.task
    params, size, shown = record.parameters, record.bytes, format_class(record.format)
    return [f"removed {','.join(record.removed_heads)} ({record.layout}, {record.ablation}); parameters "
            f"{params.before:,} -> {params.after:,}; weight bytes {size.before:,} -> {size.after:,}",
            f"verified: max |logit diff| {logits.max_abs_diff:.2e} <= {logits.allowed:.2e}; " + (
                f"{task.task} (n={task.n}): original {_metric(task.intact, task.metric)}, masked "
                f"{_metric(task.masked, task.metric)}, exported {_metric(task.exported, task.metric)}"
                if task is not None else f"on a built-in text sample ({logits.examples} texts); no task re-measured"),
            *([f"layout: {record.layout_note}"] if record.layout_note else []),
            *([f"quantization: {record.quantization.line()}"] if record.quantization else []),
            *shown.summary_lines(record), f"wrote {out}  (load with {shown.load_hint(record, out)})"]


def _metric(value: float | None, metric: str) -> str:
    return "n/a" if value is None else f"{value:.2%}" if metric == "accuracy" else f"{value:.4f}"
