"""``headprune tasks``: list the built-in tasks and the task file layouts."""

from __future__ import annotations

import json

import click

from headprune.cli.options import json_option


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
    click.echo("\nTask files (JSONL, one object per line):")
    click.echo('  choice    {"prompt": str, "choices": [str, ...], "answer": int}   options: length_normalize=true')
    click.echo('  generate  {"prompt": str, "target": str}                          options: max_new_tokens=N, '
               'answer=line|first-number|regex:PATTERN')
    click.echo('  text      {"text": str}')
    click.echo('  code      {"prompt": str, "tests": str | [str, ...], "entry_point"?: str}   '
               'needs --allow-code-execution')
    click.echo("\nlm-evaluation-harness tasks (pip install 'headprune[lm-eval]'): lm-eval:NAME[,NAME...] or "
               "lm-eval:path/to/task.yaml, options metric=acc|acc_norm|acc_bytes, num_fewshot=N, split=NAME, "
               "filter=NAME (generate_until: which filter_list entry reads the answer; default the first)")
