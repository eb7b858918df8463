"""Parameter types and options shared by the commands; they fail() with a clear message."""

from __future__ import annotations

import re
from pathlib import Path

import click
from click.core import ParameterSource

from headprune.core.choices import ABLATIONS, DEVICE_MAPS, LOAD_DTYPES, SANDBOX_MODES
from headprune.errors import HeadSpecError, SettingsError
from headprune.heads import Head, parse_heads


class HeadListType(click.ParamType):
    """``L0.H1,L3.H2`` -> sorted unique heads."""

    name = "HEADS"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> tuple[Head, ...]:
        if isinstance(value, tuple):
            return value
        try:
            return parse_heads(str(value))
        except HeadSpecError as error:
            self.fail(str(error), param, ctx)


HEAD_LIST = HeadListType()


def slug(text: str) -> str:
    """A model or task spec as part of a folder name (a file's stem; anything but letters, digits, ``._-`` as
    ``-``): the default output folders ``runs/MODEL-TASK`` and ``exports/MODEL-pruned``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", Path(text.split(":")[0]).stem or text).strip("-") or "run"

model_argument = click.argument("model", metavar="MODEL")
task_option = click.option(
    "--task", "task_spec", required=True, metavar="TASK",
    help="Built-in task (see `headprune tasks`), NAME:key=value,..., a JSONL file, or lm-evaluation-harness "
         "tasks: lm-eval:NAME[,NAME...] or lm-eval:path/to/task.yaml (needs headprune[lm-eval]).",
)
allow_code_execution_option = click.option(
    "--allow-code-execution", is_flag=True,
    help="Run the model's generated code against code tasks' tests (also HF_ALLOW_CODE_EVAL=1). DANGEROUS: "
         "the code is untrusted; each program runs isolated (on Linux: its own namespaces, seccomp, Landlock; "
         "no environment, network or files of yours) with time and memory limits; elsewhere the walls are "
         "weaker. Untrusted models are best run in a container or VM.")
sandbox_mode_option = click.option(
    "--sandbox-mode", type=click.Choice(SANDBOX_MODES), default=None,
    help="With --allow-code-execution: the walls programs run behind [default: HEADPRUNE_SANDBOX_MODE, else auto]. "
         "auto takes the strongest here and refuses to run where even that cannot keep your files and HF_TOKEN "
         "unreadable (plain; process without Landlock); a mode named runs in it (README: what each holds).")
ablation_option = click.option(
    "--ablation", type=click.Choice(ABLATIONS), default="zero", show_default=True,
    help="Replace an ablated head's output by zeros, or by its mean over the task's inputs.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
revision_option = click.option(
    "--revision", default=None, metavar="BRANCH|TAG|COMMIT",
    help="For a Hub id: the revision to read [default: main]; the commit read is recorded.")
class BatchSizeType(click.ParamType):
    """A positive number of sequences, or ``auto``."""

    name = "N|auto"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if value == "auto" or (isinstance(value, int) and value >= 1):
            return value
        text = str(value).strip()
        if text.isdigit() and int(text) >= 1:
            return int(text)
        self.fail(f"{value!r} is neither a positive number nor auto", param, ctx)


batch_option = click.option(
    "--batch-size", type=BatchSizeType(), default="auto", show_default=True,
    help="Sequences per forward pass. auto: sized to the GPU's free memory with a token budget (16 on a CPU); "
         "out of memory, batches are halved and the work retried.")
trust_remote_code_option = click.option(
    "--trust-remote-code", is_flag=True,
    help="Run the checkpoint's own modeling code (its auto_map) when its class is not part of transformers, "
         "and the Python an lm-eval task file names (!function, class:). Only for checkpoints and tasks you "
         "trust.")
device_option = click.option(
    "--device", default="auto", show_default=True, metavar="auto|cpu|cuda|cuda:N|mps",
    help="Where the model runs: auto takes the GPU when there is one.")
dtype_option = click.option(
    "--dtype", type=click.Choice(LOAD_DTYPES), default="auto", show_default=True,
    help="Weights' precision: auto is bfloat16 on a GPU that supports it, float32 on a CPU. Margins and "
         "statistics are computed in float32 either way.")
device_map_option = click.option(
    "--device-map", type=click.Choice(DEVICE_MAPS), default=None,
    help="Spread a model too large for one GPU over the visible GPUs (then the CPU, then disk), the way "
         "transformers and accelerate do; replaces --device.")
max_memory_option = click.option(
    "--max-memory", default=None, metavar="DEVICE=SIZE,...",
    help="With --device-map: memory each device may hold, e.g. 0=20GiB,1=20GiB,cpu=64GiB.")


def run_options(command):  # noqa: ANN001, ANN201
    """The options of a command that runs a model on a task (find, eval): where it runs, in what precision,
    what it may execute, and JSON output; in this order in ``--help``."""
    for option in reversed((device_option, device_map_option, max_memory_option, dtype_option,
                            trust_remote_code_option, allow_code_execution_option, sandbox_mode_option,
                            json_option)):
        command = option(command)
    return command


def refuse_inapplicable(ctx: click.Context, *rules: tuple[str, bool, str]) -> None:
    """Refuse an option the user gave that the chosen mode would silently ignore: each rule ``(name, applies,
    when)`` says that option ``name`` applies only ``when`` (e.g. ``"with --screen attribution or halving"``).
    Options left at their defaults are never refused.

    Raises:
        SettingsError: naming the option and when it applies.
    """
    for name, applies, when in rules:
        if not applies and ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE,
                                                               ParameterSource.ENVIRONMENT):
            raise SettingsError(f"{name} applies only {when}; it would be ignored here", settings=(name,))


def code_execution_rule(allow_code_execution: bool) -> tuple[str, bool, str]:
    """:func:`refuse_inapplicable`'s rule for ``--sandbox-mode``: it applies only where code may run."""
    from headprune.scoring.execution import code_execution_allowed

    return ("sandbox_mode", allow_code_execution or code_execution_allowed(),
            "with --allow-code-execution (or HF_ALLOW_CODE_EVAL=1)")
