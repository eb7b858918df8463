"""The ``headprune`` command: one group, one module per command, errors mapped to exit codes here.

Exit codes: 0 success; 1 a normal negative outcome (find confirmed no improvement, export failed its
verification); 2 bad input;
3 an internal error (a bug: set ``HEADPRUNE_DEBUG=1`` for the traceback); 130 interrupted.
"""

from __future__ import annotations

import os

import click

from headprune.errors import HeadpruneError

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130


def _debug() -> bool:
    return os.environ.get("HEADPRUNE_DEBUG", "") not in ("", "0")


class HeadpruneGroup(click.Group):
    """Turns headprune's errors into one line on stderr and an exit code; tracebacks only when debugging."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.ClickException, click.exceptions.Abort):
            raise
        except HeadpruneError as error:
            if _debug():
                raise
            click.echo(f"headprune: error: {error}", err=True)
            ctx.exit(error.exit_code)
        except KeyboardInterrupt:
            click.echo("headprune: interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except Exception as error:  # noqa: BLE001 - the one place that turns bugs into a message
            if _debug():
                raise
            click.echo(f"headprune: internal error: {type(error).__name__}: {error} "
                       "(set HEADPRUNE_DEBUG=1 for the traceback)", err=True)
            ctx.exit(EXIT_INTERNAL)
        return None


@click.group(cls=HeadpruneGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="headprune")
def cli() -> None:
    """Find attention heads whose removal improves a task, and ship the pruned model."""


def _register() -> None:
    from headprune.cli import eval_cmd, export_cmd, find_cmd, push_cmd, tasks_cmd

    cli.add_command(eval_cmd.eval_command)
    cli.add_command(export_cmd.export_command)
    cli.add_command(find_cmd.find_command)
    cli.add_command(push_cmd.push_command)
    cli.add_command(tasks_cmd.tasks_command)


_register()


def main() -> None:
    cli(prog_name="headprune")
