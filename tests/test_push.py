"""push: what arrives at a local server that speaks the Hub API, and every failure as one clear line."""

from __future__ import annotations

import json

import pytest

from helpers.cli import invoke
from helpers.hub_server import VALID_TOKEN
from helpers import build_tiny, choice_task


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    from headprune.exporter import export

    folder = tmp_path_factory.mktemp("export") / "pruned"
    export(build_tiny("gpt2", tokenizer, seed=2), "L0.H1,L1.H2", verify_task=choice_task(), out=folder)
    return folder


def test_push_uploads_every_file_in_one_commit(hub, export_dir) -> None:
    result = invoke("push", str(export_dir), "--repo-id", "alice/tiny-pruned", "--private", "--token", VALID_TOKEN,
                    "--commit-message", "first pruned model")
    assert result.exit_code == 0, result.output
    assert hub.state.repos["alice/tiny-pruned"]["private"] is True
    (commit,) = hub.state.commits
    assert commit["summary"] == "first pruned model" and commit["branch"] == "main"
    assert commit["content_type"] == "application/x-ndjson"
    local = {str(p.relative_to(export_dir)): p.read_bytes() for p in export_dir.rglob("*") if p.is_file()}
    assert commit["files"] == local  # every file, byte for byte
    (metadata,) = hub.state.card_metadata  # the card's front matter, parsed as YAML by the server
    assert {"headprune", "pruned", "headprune-sliced"} <= set(metadata["tags"])
    assert result.stdout.strip().endswith(f"/alice/tiny-pruned/commit/{'1':0>40}")


def test_push_to_a_branch_and_token_from_the_environment(hub, export_dir, monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", VALID_TOKEN)
    assert invoke("push", str(export_dir), "--repo-id", "alice/m").exit_code == 0
    result = invoke("push", str(export_dir), "--repo-id", "alice/m", "--revision", "experiment")
    assert result.exit_code == 0, result.output
    assert [c["branch"] for c in hub.state.commits] == ["main", "experiment"]
    assert hub.state.repos["alice/m"]["private"] is False
    assert ("POST", "/api/models/alice/m/branch/experiment") in hub.state.requests


def test_create_pr_opens_a_pull_request_on_the_owners_repo(hub, export_dir) -> None:
    # bob owns the repo; alice's token may not commit to it, only open a pull request (huggingface_hub's create_pr).
    hub.state.add_repo("bob/model", {"README.md": b"bob's card"})
    refused = invoke("push", str(export_dir), "--repo-id", "bob/model", "--token", VALID_TOKEN)
    assert refused.exit_code == 2 and "belongs to someone else" in refused.output
    before = len(hub.state.requests)
    result = invoke("push", str(export_dir), "--repo-id", "bob/model", "--token", VALID_TOKEN, "--create-pr")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"opened a pull request on bob/model: {hub.url}/bob/model/discussions/1"
    assert hub.state.pull_requests == [{"repo_id": "bob/model", "num": 1, "branch": "refs/pr/1"}]
    (commit,) = hub.state.commits
    assert commit["branch"] == "refs/pr/1"
    branches = hub.state.repos["bob/model"]["branches"]
    assert branches["main"] == {"README.md": b"bob's card"}  # main untouched until the owner merges
    local = {str(p.relative_to(export_dir)): p.read_bytes() for p in export_dir.rglob("*") if p.is_file()}
    assert branches["refs/pr/1"] == local
    sent = hub.state.requests[before:]  # the owner's repo is neither created nor branched
    assert ("POST", "/api/repos/create") not in sent and not any("/branch/" in path for _, path in sent)
    again = invoke("push", str(export_dir), "--repo-id", "bob/model", "--token", VALID_TOKEN, "--create-pr", "--json")
    assert json.loads(again.stdout) == {"repo_id": "bob/model", "pr_url": f"{hub.url}/bob/model/discussions/2"}


@pytest.mark.parametrize(("args", "fragment"), [
    (["--repo-id", "bob/missing"], "a pull request needs a repo that exists"),
    (["--repo-id", "bob/model", "--revision", "dev"], "cannot be combined with --create-pr"),
    (["--repo-id", "bob/model", "--private"], "a pull request goes to a repo that exists"),
])
def test_create_pr_refusals_are_one_line(hub, export_dir, args, fragment) -> None:
    hub.state.add_repo("bob/model", {})
    result = invoke("push", str(export_dir), *args, "--token", VALID_TOKEN, "--create-pr")
    assert result.exit_code == 2 and fragment in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and hub.state.commits == []


def test_dry_run_touches_no_network(hub, export_dir) -> None:
    result = invoke("push", str(export_dir), "--repo-id", "alice/m", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert "model.safetensors" in plan["files"] and plan["files"]["README.md"] > 0
    assert "headprune" in plan["metadata"]["tags"]
    assert hub.state.requests == []


@pytest.mark.parametrize(("setup", "args", "fragment"), [
    ("no-token", [], "no Hugging Face token"),
    ("bad-token", ["--token", "hf_wrong"], "authentication refused"),
    ("", ["--token", VALID_TOKEN, "--repo-id", "bob/m"], "belongs to someone else"),
    ("fail:/commit/:500", ["--token", VALID_TOKEN], "answered 500"),
    ("fail:/preupload/:404", ["--token", VALID_TOKEN], "was not found"),
    ("fail:/api/repos/create:403", ["--token", VALID_TOKEN], "belongs to someone else"),
    ("drop:/commit/", ["--token", VALID_TOKEN], "cannot reach the Hub"),
])
def test_push_failures_are_one_line_with_exit_2(hub, export_dir, setup, args, fragment) -> None:
    if setup.startswith("fail:"):
        _, path, status = setup.split(":")
        hub.state.fail[path] = int(status)
    elif setup.startswith("drop:"):
        hub.state.drop.add(setup.split(":", 1)[1])
    before = {p: p.read_bytes() for p in export_dir.rglob("*") if p.is_file()}
    repo = [] if "--repo-id" in args else ["--repo-id", "alice/m"]
    result = invoke("push", str(export_dir), *repo, *args)
    assert result.exit_code == 2, result.output
    assert fragment in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert {p: p.read_bytes() for p in export_dir.rglob("*") if p.is_file()} == before  # left untouched
    assert hub.state.commits == []


def test_unreachable_endpoint(monkeypatch, export_dir, tmp_path) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    result = invoke("push", str(export_dir), "--repo-id", "alice/m", "--token", VALID_TOKEN)
    assert result.exit_code == 2 and "cannot reach the Hub" in result.output


@pytest.mark.parametrize("repo_id", ["no-owner", "a/b/c", "bad id/x", "alice/"])
def test_malformed_repo_id(export_dir, repo_id) -> None:
    result = invoke("push", str(export_dir), "--repo-id", repo_id, "--dry-run")
    assert result.exit_code == 2 and "malformed repo id" in result.output


def test_edited_or_foreign_folder_is_refused(export_dir, tmp_path) -> None:
    import shutil

    edited = tmp_path / "edited"
    shutil.copytree(export_dir, edited)
    (edited / "config.json").write_text((edited / "config.json").read_text().replace("}", ' }', 1))
    result = invoke("push", str(edited), "--repo-id", "alice/m", "--dry-run")
    assert result.exit_code == 2 and "config.json was changed after export" in result.output
    (tmp_path / "plain").mkdir()
    result = invoke("push", str(tmp_path / "plain"), "--repo-id", "alice/m", "--dry-run")
    assert result.exit_code == 2 and "not a headprune export" in result.output
