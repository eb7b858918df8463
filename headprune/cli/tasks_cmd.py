"""``headprune tasks``: list the built-in tasks and the task file layouts."""

from __future__ import annotations

import json

import click

from headprune.cli.options import json_option


def task_file_lines() -> list[str]:
    """Each task kind's row layout and file options, one kind per line in the order of ``TASK_KINDS``: made from
    the kinds' registered specs (``headprune.tasks.kinds``), so a new kind shows here without editing this command."""
    from headprune.tasks.kinds import shown_order

    rows = [(spec.name, spec.layout, spec.listing) for spec in shown_order()]
    width = max(len(layout) for _, layout, _ in rows)
    return [f"  {kind:<9} {layout:<{width}}   {options}".rstrip() for kind, layout, options in rows]


@click.command("tasks")
@json_option
def tasks_command(as_json: bool) -> None:
    """List built-in tasks (use them as --task NAME or NAME:key=value,...)."""
    from headprune.tasks import describe_builtin_tasks

    rows = describe_builtin_tasks()
    if as_json:
        click.echo(json.dumps([{"name": n, "kind": k, "summary": s} for n, k, s in rows]))
        return
    for name, kind, summary in rows:
        click.echo(f"{name:<12} {kind:<9} {summary}")
    click.echo("\nTask files (JSONL, one object per line; the keys tell the kind):")
    for line in task_file_lines():
        click.echo(line)
    click.echo("\nlm-evaluation-harness tasks (pip install 'headprune[lm-eval]'): lm-eval:NAME[,NAME...] or "
               "lm-eval:path/to/task.yaml, options metric=acc|acc_norm|acc_bytes, num_fewshot=N, split=NAME, "
               "filter=NAME (generate_until: which filter_list entry reads the answer; default the first)")
