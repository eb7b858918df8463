"""``headprune push``: publish an export folder to the Hugging Face Hub (a commit, or a pull request). Exit 0
pushed, 2 refused or failed."""

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
@click.option("--create-pr", is_flag=True,
              help="Open a pull request on the repo (which must exist) instead of committing to it; prints its URL.")
@click.option("--token", default=None, help="Hub token [default: HF_TOKEN, then the stored login].")
@click.option("--dry-run", is_flag=True, help="List what would be uploaded; touch no network.")
@json_option
def push_command(folder: Path, repo_id: str, private: bool, revision: str | None, commit_message: str | None,
                 create_pr: bool, token: str | None, dry_run: bool, as_json: bool) -> None:
    """Upload the headprune export in DIR to the Hugging Face Hub, in one commit (or one pull request)."""
    from headprune.exporter.hub import check_pr_options, plan_push, push

    check_pr_options(create_pr=create_pr, revision=revision, private=private)
    plan = plan_push(folder, repo_id)
    if dry_run:
        if as_json:
            click.echo(json.dumps({"repo_id": repo_id, "files": dict(plan.files), "total_bytes": plan.total_bytes,
                                   "metadata": plan.metadata, "private": private, "revision": revision or "main",
                                   "create_pr": create_pr}))
            return
        where = "in a pull request against main" if create_pr else f"on {revision or 'main'}"
        click.echo(f"would upload {len(plan.files)} files ({plan.total_bytes:,} bytes) to {repo_id}"
                   f"{' (private)' if private else ''} {where}:")
        for name, size in plan.files:
            click.echo(f"  {size:>14,}  {name}")
        click.echo("card metadata:")
        for key, value in plan.metadata.items():
            click.echo(f"  {key}: {json.dumps(value)}")
        return
    url = push(folder, repo_id, private=private, revision=revision, commit_message=commit_message, token=token,
               create_pr=create_pr)
    if as_json:
        click.echo(json.dumps({"repo_id": repo_id, "pr_url" if create_pr else "commit_url": url}))
    else:
        click.echo(f"opened a pull request on {repo_id}: {url}" if create_pr else f"pushed {folder} to {url}")
