"""``headprune push``: publish an export folder to the Hugging Face Hub. Exit 0 pushed, 2 refused or failed."""

from __future__ import annotations

import json
from pathlib import Path

import click

from headprune.cli.options import json_option


@click.command("push")
@click.argument("folder", metavar="DIR", type=click.Path(path_type=Path))
@click.option("--repo-id", required=True, metavar="OWNER/NAME", help="The Hub model repo to create or update.")
@click.option("--private", is_flag=True, help="Create the repo private.")
@click.option("--revision", default=None, metavar="BRANCH", help="Branch to commit to (created if missing).")
@click.option("--commit-message", default=None, help="Commit message.")
@click.option("--token", default=None, help="Hub token [default: HF_TOKEN, then the stored login].")
@click.option("--dry-run", is_flag=True, help="List what would be uploaded; touch no network.")
@json_option
def push_command(folder: Path, repo_id: str, private: bool, revision: str | None, commit_message: str | None,
                 token: str | None, dry_run: bool, as_json: bool) -> None:
    """Upload the headprune export in DIR to the Hugging Face Hub, in one commit."""
    from headprune.exporter.hub import plan_push, push

    plan = plan_push(folder, repo_id)
    if dry_run:
        if as_json:
            click.echo(json.dumps({"repo_id": repo_id, "files": dict(plan.files), "total_bytes": plan.total_bytes,
                                   "metadata": plan.metadata, "private": private, "revision": revision or "main"}))
            return
        click.echo(f"would upload {len(plan.files)} files ({plan.total_bytes:,} bytes) to {repo_id}"
                   f"{' (private)' if private else ''} on {revision or 'main'}:")
        for name, size in plan.files:
            click.echo(f"  {size:>14,}  {name}")
        click.echo("card metadata:")
        for key, value in plan.metadata.items():
            click.echo(f"  {key}: {json.dumps(value)}")
        return
    url = push(folder, repo_id, private=private, revision=revision, commit_message=commit_message, token=token)
    click.echo(json.dumps({"repo_id": repo_id, "commit_url": url}) if as_json else f"pushed {folder} to {url}")
