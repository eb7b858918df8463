"""``headprune find``: screen, joint search and the held-out verdict. Exit 0 confirmed (compress: accepted as
non-inferior), 1 not, 2 bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from headprune.cli.options import (ablation_option, batch_option, code_execution_rule, model_argument,
                                   refuse_inapplicable, revision_option, run_options, slug, task_option)
from headprune.core.choices import NO_GUARD, OBJECTIVES, PREFER, PROTOCOLS, RANK_KEYS, SCREENS, SEARCHES
from headprune.search.settings import (DEFAULT_BEAM_WIDTH, DEFAULT_CANDIDATES, DEFAULT_DISCOVERY, DEFAULT_HELDOUT,
                                       DEFAULT_MAX_DROP, DEFAULT_PATIENCE, DEFAULT_SHRINK_EXAMPLES, PROTOCOL_PRESETS,
                                       FindSettings, check_shrink, settings_for, with_protocol)

if TYPE_CHECKING:  # pragma: no cover
    from headprune.core.folder_lock import FolderLock

DEFAULTS = FindSettings()  # the options' defaults are the settings' own


def _claim(lock: FolderLock, out: Path, inputs: list) -> frozenset[str]:
    """Hold ``out``; then the run files it holds, those find's outputs may replace (refused as at the start)."""
    from headprune.report.run_folder import check_run_destination

    lock.acquire()
    return check_run_destination(out, inputs)


def _refuse_code_tasks(*specs: str | None) -> None:
    """Tasks whose kind runs generated code (code tasks, from JSONL files) need code execution allowed and a sandbox
    that holds (or one named): say so, and which mode programs will run in, before anything is loaded."""
    from headprune.scoring.execution import require_code_execution
    from headprune.tasks import PREFIX, load_task
    from headprune.tasks.kinds import kind_spec

    for spec in specs:
        if spec and not spec.startswith(PREFIX) and kind_spec(load_task(spec).kind).runs_code:
            require_code_execution(spec)


@click.command("find")
@model_argument
@task_option
@click.option("--heldout-task", default=None, metavar="TASK",
              help="Held-out examples from this task instead of a split.")
@click.option("--discovery", type=int, default=DEFAULT_DISCOVERY, show_default=True,
              help="Discovery examples (selection).")
@click.option("--heldout", type=int, default=DEFAULT_HELDOUT, show_default=True,
              help="Held-out examples (verdict only).")
@click.option("--seed", type=click.IntRange(min=0), default=DEFAULTS.seed, show_default=True,
              help="Split and bootstrap seed.")
@ablation_option
@click.option("--nominees", type=int, default=DEFAULTS.nominees, show_default=True, help="M: best single heads kept.")
@click.option("--max-heads", type=int, default=DEFAULTS.max_heads, show_default=True,
              help="K: nominee subsets of size 2..K.")
@click.option("--extend", type=int, default=DEFAULTS.extend, show_default=True,
              help="Steps growing the best set from a screen taken with it removed (partners: heads that help once "
                   "it is gone), each while the added head earns its place on discovery's search half.")
@click.option("--finalists", type=int, default=DEFAULTS.finalists, show_default=True,
              help="F: sets scored on held-out: the primary set, then the other candidates and the best other "
                   "sets (exploratory).")
@click.option("--control", multiple=True, metavar="TASK",
              help="A second task measured for the finalists (the trade); repeat for several.")
@click.option("--control-limit", type=click.IntRange(min=1), default=DEFAULTS.control_limit, show_default=True,
              help="Control examples used.")
@click.option("--guard", multiple=True, metavar="TASK[:margin=M]",
              help="A task the shipped set must not hurt, by more than M accuracy points (default 5) or, for a text "
                   "task such as the built-in 'general', M nats of mean NLL (default 0.05): it steers the search, and "
                   "the claim needs it non-inferior on held-out guard examples; repeat for several. [default: "
                   "general, on a causal language model whose positions fit enough of its texts; 'none': no guard]")
@click.option("--guard-limit", type=click.IntRange(min=30), default=DEFAULTS.guard_limit, show_default=True,
              help="Examples used per guard: a third for the search, the rest for the verdict.")
@click.option("--alpha", type=float, default=DEFAULTS.alpha, show_default=True,
              help="Significance level of the verdict (compress: its non-inferiority test is one-sided at alpha/2).")
@click.option("--rank-by", type=click.Choice(RANK_KEYS), default=DEFAULTS.rank_by, show_default=True,
              help="First ranking key: count gain, or mean margin change (more power on small sets).")
@click.option("--screen", type=click.Choice(SCREENS), default=DEFAULTS.screen,
              show_default=True, help="Stage 1: every head exactly; or a one-pass gradient estimate, or successive "
              "halving on growing shares of discovery, then the best --candidates exactly.")
@click.option("--candidates", type=click.IntRange(min=1), default=DEFAULTS.candidates,
              help="With --screen attribution|halving: heads scored exactly on all of discovery "
                   f"[default: {DEFAULT_CANDIDATES}].")
@click.option("--objective", type=click.Choice(OBJECTIVES), default=DEFAULTS.objective, show_default=True,
              help="improve: a few heads whose removal helps; compress: a large head set (greedy or beam search) whose removal keeps "
                   "discovery accuracy within --max-drop, tested for non-inferiority on held-out data.")
@click.option("--max-drop", type=float, default=DEFAULTS.max_drop, metavar="POINTS",
              help=f"With --objective compress: accuracy points the task may lose [default: {DEFAULT_MAX_DROP:g}].")
@click.option("--prefer", type=click.Choice(PREFER), default=DEFAULTS.prefer,
              help="With --objective compress: grow by single heads, or by whole key/value groups (what a sliced "
                   "export of a grouped-query model can drop) [default: heads].")
@click.option("--patience", type=int, default=DEFAULTS.patience,
              help="With --objective compress: stop after this many heads (groups) in a row break the budget "
                   "(the greedy also stops at 2 x (patience + heads taken) distinct sets) "
                   f"[default: {DEFAULT_PATIENCE}].")
@click.option("--compress-search", type=click.Choice(SEARCHES), default=DEFAULTS.compress_search,
              help="With --objective compress: greedy (galloping, with backtracking) or beam (keeps the "
                   "--beam-width best sets, tries each with the next head every round) [default: greedy].")
@click.option("--beam-width", type=int, default=DEFAULTS.beam_width,
              help="With --compress-search beam: sets kept per round; 1 is the plain greedy "
                   f"[default: {DEFAULT_BEAM_WIDTH}].")
@click.option("--shrink", type=float, default=DEFAULTS.shrink, metavar="POINTS",
              help="With --objective improve: grow the primary set by whole key/value groups (what GGUF and ONNX "
                   "slice) that the task and the guards do not need, and claim the grown set when it is no worse "
                   "than the primary set by more than POINTS accuracy points on fresh examples (neither discovery "
                   "nor held-out); export it with --pick.")
@click.option("--shrink-examples", type=int, default=DEFAULTS.shrink_examples, metavar="N",
              help=f"With --shrink: fresh examples for its test; a generated built-in task draws more where its own "
                   f"run short [default: {DEFAULT_SHRINK_EXAMPLES}].")
@click.option("--protocol", type=click.Choice(PROTOCOLS), default=DEFAULTS.protocol,
              help="A preset of the search: cel runs the research protocol (every head exactly, 10 nominees, their "
                   "pairs and triples, 10 finalists re-confirmed on discovery) with headprune's statistics on top.")
@batch_option
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder [default: runs/MODEL-TASK].")
@click.option("--resume", is_flag=True, help="Continue an interrupted run in --out.")
@click.option("--overwrite", is_flag=True, help="Start afresh in an --out that holds an earlier run (replaces its "
              "journal and results); without it, or --resume, such a folder is refused.")
@revision_option
@run_options
@click.pass_context
def find_command(ctx: click.Context, model: str, task_spec: str, heldout_task: str | None, discovery: int,
                 heldout: int, control: tuple[str, ...], guard: tuple[str, ...], out: Path | None, resume: bool,
                 overwrite: bool, device: str, device_map: str | None, max_memory: str | None, dtype: str, trust_remote_code: bool,
                 allow_code_execution: bool, sandbox_mode: str | None, as_json: bool, revision: str | None,
                 **options: object) -> None:
    """Find a small head set whose removal improves TASK on MODEL (or, with --objective compress, a large
    one whose removal TASK does not notice), and test it on held-out data.

    Code tasks run the model's generated code only with --allow-code-execution (untrusted code: use a
    container or VM).
    """
    settings = FindSettings(**options)  # every other option is one of the search settings, named as its field
    from headprune.cli import exits
    from headprune.core import distributed
    from headprune.core.folder_lock import FolderLock
    from headprune.core.io import check_writable_folder
    from headprune.report.markdown import verdict_line, write_outputs
    from headprune.report.run_folder import check_run_destination, run_inputs
    from headprune.report.text import stage_times_line
    from headprune.scoring.execution import permit_code_execution
    from headprune.search.find import check_run_folder, find, resume_after_restart
    from headprune.search.guards import parse_guard

    improve_only = "with --objective improve (compress grows its own set from the screen)"
    guard, default_guard = _guards(guard, settings.objective)
    refuse_inapplicable(ctx, ("candidates", settings.screen != "exact", "with --screen attribution or halving"),
                        ("control_limit", bool(control), "with --control"),
                        ("guard_limit", bool(guard) or default_guard, "with a guard (not with --guard none)"),
                        ("guard", settings.objective == "improve" or not guard, improve_only),
                        *((name, settings.objective == "improve", improve_only)
                          for name in ("nominees", "max_heads", "extend", "finalists", "shrink")),
                        ("shrink_examples", settings.shrink is not None, "with --shrink"),
                        ("device", device_map is None, "without --device-map (which places the layers itself)"),
                        code_execution_rule(allow_code_execution))
    given = [name for name in PROTOCOL_PRESETS.get(settings.protocol or "", {})
             if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)]
    with_protocol(settings, given=given)  # a protocol fixes its search: an option given against it is refused
    check_shrink(settings_for(settings))  # a bad margin is refused before any folder is touched
    out = out or Path("runs") / f"{slug(model)}-{slug(task_spec)}"
    guards = [parse_guard(g).task for g in guard]  # a bad margin is refused before anything is read
    inputs = run_inputs(model, [task_spec, heldout_task, *control, *guards])
    check_run_destination(out, inputs)  # never on an input, nor in a folder of other files (again once locked)
    with permit_code_execution(allow_code_execution, mode=sandbox_mode):
        _refuse_code_tasks(task_spec, heldout_task, *control, *guards)  # before any output or model exists
    resume, overwrite = resume_after_restart(out, distributed.restarted(), resume=resume, overwrite=overwrite)
    check_run_folder(out, resume=resume, overwrite=overwrite)  # before even a write probe (again once locked)
    check_writable_folder(out)
    team = distributed.join(device)  # one process unless torchrun / accelerate launch started several
    lock = FolderLock(out, what="find")  # held by rank 0 until the outputs are written
    try:
        present = team.from_main(lambda: _claim(lock, out, inputs))
        with permit_code_execution(allow_code_execution, mode=sandbox_mode):
            result = find(model, task_spec, settings=settings, heldout_task=heldout_task, discovery=discovery,
                          heldout=heldout, control=control or None, guard=guard or None, default_guard=default_guard,
                          out=out, resume=resume,
                          overwrite=overwrite, device=device, device_map=device_map, max_memory=max_memory, dtype=dtype,
                          trust_remote_code=trust_remote_code, progress=sys.stderr.isatty(), team=team,
                          revision=revision)
        if team.is_main:
            write_outputs(result, out, present=present)
    except KeyboardInterrupt:
        if team.is_main:
            click.echo(f"headprune: progress is saved in {out}/journal.jsonl; add --resume to continue", err=True)
        raise
    finally:
        lock.release()
        distributed.leave()
    if not team.is_main:
        ctx.exit(exits.OK)  # rank 0 reports; a launcher reads any other code as a crashed worker
    click.echo(stage_times_line(result), err=True)
    if as_json:
        click.echo(json.dumps(_json_summary(result, out)))
    else:
        plot = ", tradeoff.png" if result.compression is not None else ", controls.png" if control else ""
        click.echo(f"wrote {out}/result.json, report.md, screen.png{plot}", err=True)
        click.echo(verdict_line(result))
    # Under a launcher a non-zero code means a crashed worker (torchrun --max-restarts would restart it):
    # the verdict is in the output and result.json instead.
    ctx.exit(exits.OK if team.parallel else exits.for_verdict(result.accepted))


def _guards(given: tuple[str, ...], objective: str) -> tuple[tuple[str, ...], bool]:
    """The guards named, and whether find's default guard (``general``) applies: an improve run that names none.
    ``--guard none`` names none and takes no default.

    Raises:
        SearchSettingsError: ``none`` beside another guard.
    """
    from headprune.errors import SearchSettingsError

    if NO_GUARD in given:
        if len(given) > 1:
            raise SearchSettingsError(f"--guard {NO_GUARD} runs without guards: give it alone, not beside "
                                      f"{', '.join(g for g in given if g != NO_GUARD)}", settings=("guard",))
        return (), False
    return given, not given and objective == "improve"


def _json_summary(result, out: Path) -> dict:  # noqa: ANN001
    """What ``find --json`` prints: the verdict, and the compression's or the grown set's claim where there is one."""
    from headprune.core.record_json import to_json

    summary = {"confirmed": result.confirmed, "primary": list(result.finalists[0].heads),
               "verdict": to_json(result.verdict), "out": str(out)}
    if result.compression is not None:
        summary.update(accepted=result.accepted, compression={k: to_json(getattr(result.compression, k)) for k in (
            "max_drop", "prefer", "heads", "verdict", "savings")})
    if result.shrink is not None:
        summary.update(shrunk=result.shrunk, shrink=to_json(result.shrink))
    return summary

