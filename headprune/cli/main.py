"""The ``headprune`` command: one group, one module per command; errors become one line and an exit code
here (the codes and wording live in ``headprune.cli.exits``)."""

from __future__ import annotations

import gc
import logging
import os

import click

from headprune._version import __version__
from headprune.cli import exits
from headprune.errors import HeadpruneError, redact_credentials


def _debug() -> bool:
    return os.environ.get("HEADPRUNE_DEBUG", "") not in ("", "0")


class OneLineUsageError(click.ClickException):
    """A click error (an unknown option, a value of the wrong type, a missing argument) shown the way headprune
    shows every bad input: one line on stderr, with the exit code click gives it (2 for usage errors)."""

    def __init__(self, error: click.ClickException) -> None:
        context = getattr(error, "ctx", None)
        hint = f" (see '{context.command_path} --help')" if context is not None else ""
        super().__init__(error.format_message() + hint)
        self.exit_code = error.exit_code

    def show(self, file: object = None) -> None:  # noqa: ARG002 - click's signature
        click.echo(f"headprune: error: {self.format_message()}", err=True)


def _one_line(error: click.ClickException) -> click.ClickException:
    """``error`` as one line, except the help click prints for a bare ``headprune``."""
    if isinstance(error, (OneLineUsageError, click.exceptions.NoArgsIsHelpError)):
        return error
    return OneLineUsageError(error)


class HeadpruneGroup(click.Group):
    """Turns headprune's errors, and click's own, into one line on stderr and an exit code; tracebacks only when
    debugging."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: object) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.exceptions.ClickException as error:  # the group's own options
            raise _one_line(error) from None

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except click.exceptions.ClickException as error:  # parsing a command's options and arguments
            raise _one_line(error) from None
        except BrokenPipeError:
            raise  # the reader of stdout went away (| head): click exits quietly
        except HeadpruneError as error:
            if _debug():
                raise
            kind = "internal error" if exits.for_error(error) == exits.INTERNAL else "error"
            click.echo(redact_credentials(f"headprune: {kind}: {exits.message(error, _innermost(ctx))}"), err=True)
            ctx.exit(exits.for_error(error))
        except KeyboardInterrupt:
            click.echo("headprune: interrupted", err=True)
            ctx.exit(exits.INTERRUPTED)
        except Exception as error:  # noqa: BLE001 - the one place that turns bugs into a message
            if _debug():
                raise
            if exits.bad_path(error) is not None:
                click.echo(redact_credentials(f"headprune: error: {exits.bad_path(error)}"), err=True)
                ctx.exit(exits.BAD_INPUT)
            click.echo(redact_credentials(f"headprune: internal error: {type(error).__name__}: {error} "
                                          "(set HEADPRUNE_DEBUG=1 for the traceback)"), err=True)
            ctx.exit(exits.INTERNAL)
        return None


def _innermost(ctx: click.Context) -> click.Context | None:
    """The context of the subcommand that was running (its options name the settings)."""
    sub = getattr(ctx, "invoked_subcommand", None)
    command = ctx.command.get_command(ctx, sub) if sub and isinstance(ctx.command, click.Group) else None
    return click.Context(command, parent=ctx) if command is not None else None


class _StderrHandler(logging.Handler):
    """The ``headprune`` logger's lines on stderr, looked up when written (tests swap stderr per command)."""

    def emit(self, record: logging.LogRecord) -> None:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        click.echo(redact_credentials(f"headprune: {level}{record.getMessage()}"), err=True)


def _log_to_stderr() -> None:
    logger = logging.getLogger("headprune")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())
        logger.setLevel(logging.INFO)


@click.group(cls=HeadpruneGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, package_name="headprune")  # the code running, not whatever metadata is installed
def cli() -> None:
    """Find attention heads whose removal improves a task, and ship the pruned model."""
    from headprune.core.limits import check_environment

    _log_to_stderr()
    check_environment()  # a bad number in the environment is refused before any work


def _register() -> None:
    from headprune.cli import eval_cmd, export_cmd, find_cmd, push_cmd, tasks_cmd

    cli.add_command(eval_cmd.eval_command)
    cli.add_command(export_cmd.export_command)
    cli.add_command(find_cmd.find_command)
    cli.add_command(push_cmd.push_command)
    cli.add_command(tasks_cmd.tasks_command)


_register()


def main() -> None:
    """The ``headprune`` process: the command, then an exit that does not walk every object torch made."""
    exits.run_as_process()
    try:
        cli(prog_name="headprune")
    finally:
        exits.output_in_place()  # the exit status is decided: a Ctrl-C now would only turn it into SIGINT's
        # The process ends here: the interpreter's last garbage collections would visit every object torch,
        # transformers and the model made (measured: 2.4 to 3.8 s after an export on a loaded 2-core machine, 0.4 to
        # 0.6 s frozen), only to free memory the exit frees anyway; a Ctrl-C must end the run within a second.
        gc.freeze()
