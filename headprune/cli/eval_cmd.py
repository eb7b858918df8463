"""``headprune eval``: score a task on a model, optionally with heads ablated."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import click

from headprune.cli.options import (HEAD_LIST, ablation_option, batch_option, code_execution_rule, model_argument,
                                   refuse_inapplicable, revision_option, run_options, task_option)
from headprune.heads import format_heads


@click.command("eval")
@model_argument
@task_option
@click.option("--heads", type=HEAD_LIST, default="", help="Heads to ablate, e.g. L0.H1,L3.H2.")
@ablation_option
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Score only the first N examples.")
@click.option("--margin", type=float, default=None, metavar="M",
              help="With --heads: also score the intact model and test TASK as find --guard does: the heads' removal "
                   "costs at most M accuracy points (or M nats of mean NLL for a text task); on fresh examples, a "
                   "check of a find claim.")
@click.option("--alpha", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=0.05,
              show_default=True, help="With --margin: the test's level (one-sided at alpha/2, as find's).")
@batch_option
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write per-example results (id, correct, margin; text for generate tasks) as JSONL.")
@revision_option
@run_options
@click.pass_context
def eval_command(ctx: click.Context, model: str, task_spec: str, heads: tuple, ablation: str, limit: int | None,
                 margin: float | None, alpha: float, batch_size: int | str, out: Path | None, device: str, device_map: str | None, max_memory: str | None,
                 dtype: str, trust_remote_code: bool, allow_code_execution: bool, sandbox_mode: str | None,
                 as_json: bool, revision: str | None) -> None:
    """Score TASK on MODEL, example by example, with HEADS ablated.

    Code tasks run the model's generated code only with --allow-code-execution (untrusted code: use a
    container or VM), in the sandbox mode it prints.
    """
    from headprune.scoring.execution import permit_code_execution

    refuse_inapplicable(ctx, ("ablation", bool(heads), "with --heads (the heads whose outputs it replaces)"),
                        ("margin", bool(heads), "with --heads (the set whose cost it tests)"),
                        ("alpha", margin is not None, "with --margin"),
                        ("device", device_map is None, "without --device-map (which places the layers itself)"),
                        code_execution_rule(allow_code_execution))
    if out is not None:
        _check_out(out, task_spec, model)  # before the evaluation, not after it
    placement = {"device": device, "device_map": device_map, "max_memory": max_memory, "dtype": dtype,
                 "trust_remote_code": trust_remote_code, "revision": revision}
    if margin is not None:  # positive, finite and within 100 points, before anything is read (text: on loading)
        from headprune.search.guards import margin_for

        margin_for("accuracy", margin, settings=("margin",))
    with permit_code_execution(allow_code_execution, mode=sandbox_mode):
        _eval(model, task_spec, heads, ablation, limit, batch_size, out, placement, as_json,
              guard=None if margin is None else (margin, alpha))


def _check_out(out: Path, task_spec: str, model: object) -> None:
    """Refuse an --out that cannot be written, or that is, holds or lies inside an input of this evaluation (the
    model, the task's files); checked before the evaluation and again, with the loaded model's folder, before the
    results are written.

    Raises:
        ResultFileError
    """
    from headprune.core.io import check_writable_folder
    from headprune.core.paths import check_output_name, refuse_overlap
    from headprune.exporter.destination import local_sources
    from headprune.tasks import task_files

    check_output_name(out)
    check_writable_folder(out.parent)
    inputs = [*(("the model", path) for path in local_sources(model)),
              *(("the task file", path) for path in task_files(task_spec))]
    refuse_overlap(out, inputs, advice="write the results elsewhere")


def _eval(model: str, task_spec: str, heads: tuple, ablation: str, limit: int | None, batch_size: int | str,
          out: Path | None, placement: dict, as_json: bool, guard: tuple[float, float] | None = None) -> None:
    from headprune.core.io import atomic_write_text
    from headprune.core.record_json import to_json
    from headprune.evaluation import Evaluator
    from headprune.loading.models import load_model
    from headprune.scoring.execution import require_code_execution
    from headprune.tasks import load_task
    from headprune.tasks.kinds import kind_spec

    task = load_task(task_spec, trust_remote_code=placement["trust_remote_code"]).first(limit)
    if kind_spec(task.kind).runs_code:
        require_code_execution(task.name)  # before the model is even loaded
    if guard is not None:
        from headprune.search.guards import check_guard_sample

        check_guard_sample(task, guard[0], settings=("margin",))  # the margin and the sample the test can take
    lm = load_model(model, **placement)
    lm.grid.check(heads)
    evaluator = Evaluator(lm, task, batch_size=batch_size)
    evaluator.check_finite()  # a broken model is refused, not scored
    means = evaluator.head_means() if ablation == "mean" and heads else None
    started = time.perf_counter()
    if not sys.stderr.isatty():  # no bar in a log file: say what is running
        logging.getLogger("headprune").info("eval: %d examples of %s on %s", len(task), task.name, model)
    result = evaluator.run(heads, mode=ablation, means=means, progress=sys.stderr.isatty(), label=task.name)
    seconds = time.perf_counter() - started
    if out is not None:
        _check_out(out, task_spec, lm)  # the folder the model was read from (a Hub id's, a converted GGUF's)
        atomic_write_text(out, "".join(json.dumps({"id": r.id, "correct": r.correct, "margin": r.margin,
                                                   **({"text": r.text} if r.text is not None else {})}) + "\n"
                                       for r in result.results))  # generate kinds: what the model wrote
    summary = {"model": model, "task": result.task, "kind": result.kind,
               **{k: v for k, v in to_json(result.summary()).items() if v is not None},
               "heads": [str(h) for h in heads], "ablation": ablation,
               "seconds": round(seconds, 3)}
    effect = None
    if guard is not None:  # the intact model too, and find --guard's test of the change
        from headprune.search.guards import Guard, GuardEffect, margin_for

        metric = "accuracy" if result.has_accuracy else "mean_nll"
        intact = evaluator.run((), mode=ablation, means=None, progress=sys.stderr.isatty(), label=f"{task.name} intact")
        effect = GuardEffect.measure(Guard(task.name, metric, margin_for(metric, guard[0]), 0), intact, result,
                                     alpha=guard[1])
        summary["guard"] = to_json(effect)
    if as_json:
        click.echo(json.dumps(summary))
        return
    metric = (f"accuracy {result.accuracy:.2%} ({summary['correct']}/{result.n})" if result.has_accuracy
              else f"mean NLL {result.mean_nll:.4f}")
    click.echo(f"{task.name} on {model}, heads ablated: {format_heads(heads)} ({ablation}): {metric}, "
               f"n={result.n}, {seconds:.1f} s")
    if effect is not None:
        from headprune.report.guards import guard_clause

        click.echo(guard_clause(effect))
