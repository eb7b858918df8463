"""Publishing an export to the Hugging Face Hub: re-check the folder, create the repo, one commit; or open a pull
request on a repo that exists (``create_pr``: huggingface_hub's own, the way model owners on the Hub review changes).

The token comes from the caller, else ``HF_TOKEN``, else the stored login (``huggingface_hub.get_token``);
the endpoint from ``HF_ENDPOINT``, read at call time. The local folder is only ever read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from headprune.core.credentials import credentials_in_folder
from headprune.core.folder_lock import FolderLock
from headprune.errors import HubError, ResultFileError, redact_credentials
from headprune.exporter.card import card_metadata
from headprune.exporter.export_record import verify_record
from headprune.exporter.formats import format_class


@dataclass(frozen=True)
class PushPlan:
    """What a push would upload."""

    folder: Path
    repo_id: str
    files: list[tuple[str, int]]  # (path in repo, bytes)
    metadata: dict  # the model card's YAML front matter

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)


def _check_repo_id(repo_id: str) -> None:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    parts = repo_id.split("/")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise HubError(f"malformed repo id {repo_id!r}: {error}") from None
    if len(parts) != 2:
        raise HubError(f"malformed repo id {repo_id!r}: expected OWNER/NAME")


def plan_push(folder: Path, repo_id: str) -> PushPlan:
    """Check the repo id and that ``folder`` is an unedited headprune export; list what would go up.

    Raises:
        HubError: malformed repo id. ResultFileError: not an export, edited after export, or holding a credential
        (``headprune.core.credentials``: named by file and key, never shown).
    """
    _check_repo_id(repo_id)
    folder = Path(folder)
    record = verify_record(folder)
    # Every file that would go up, binary ones too (a GGUF file's chat template): an export made before headprune
    # looked for them would publish its source's token.
    found = credentials_in_folder(folder, format_class(record.format).credential_place)
    if found:
        name, place = found[0]
        raise ResultFileError(f"{folder / name} holds a credential ({place}); headprune never publishes one: export "
                              "the model again (a credential in its configs is left out; one elsewhere, such as its "
                              "chat template, must be removed from the source) and push that", settings=("folder",))
    files = sorted((str(p.relative_to(folder)), p.stat().st_size) for p in folder.rglob("*") if p.is_file())
    return PushPlan(folder, repo_id, files, card_metadata(record))


def _token(token: str | None) -> str:
    from huggingface_hub import get_token

    found = token or os.environ.get("HF_TOKEN") or get_token()
    if not found:
        raise HubError("no Hugging Face token: pass --token, set HF_TOKEN, or log in with `hf auth login`")
    if not (found.isascii() and found.isprintable()) or any(c.isspace() for c in found):
        # An HTTP header carries ASCII only; the token itself is never echoed.
        raise HubError("the Hugging Face token holds a character an HTTP header cannot carry (non-ASCII, a space "
                       "or a control character): check --token or HF_TOKEN")
    return found


def check_pr_options(*, create_pr: bool, revision: str | None, private: bool) -> None:
    """Refuse what a pull request cannot take: the Hub opens pull requests against ``main`` of a repo that exists.

    Raises:
        HubError
    """
    if create_pr and revision not in (None, "main"):
        raise HubError(f"a pull request is opened against main; --revision {revision} cannot be combined with "
                       "--create-pr")
    if create_pr and private:
        raise HubError("--private applies when push creates the repo; a pull request goes to a repo that exists")


def push(folder: Path, repo_id: str, *, private: bool = False, revision: str | None = None,
         commit_message: str | None = None, token: str | None = None, create_pr: bool = False) -> str:
    """Upload an export folder to ``repo_id`` in one commit; returns the commit URL. With ``create_pr``, the
    commit opens a pull request on the repo (which must exist; it is neither created nor written to) and the pull
    request's URL is returned.

    Raises:
        HubError: no token, malformed repo id, network unreachable, authentication refused, no write access (no
            such repo, for a pull request), a revision other than main with ``create_pr``.
        ResultFileError: the folder is not an unedited headprune export.
    """
    check_pr_options(create_pr=create_pr, revision=revision, private=private)
    plan_push(folder, repo_id)  # a folder that is no export is refused before anything is locked
    with FolderLock(folder, what="push"):  # no export replaces the folder while it goes up
        return _upload(plan_push(folder, repo_id), private=private, revision=revision,
                       commit_message=commit_message, token=token, create_pr=create_pr)


def _upload(plan: PushPlan, *, private: bool, revision: str | None, commit_message: str | None,
            token: str | None, create_pr: bool) -> str:
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    repo_id = plan.repo_id
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=_token(token))
    message = commit_message or f"Upload headprune export ({len(plan.files)} files)"
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(plan.folder / name))
                  for name, _ in plan.files]
    try:
        if create_pr:  # the owner's repo: neither created nor branched; the Hub opens the pull request
            info = api.create_commit(repo_id, operations, commit_message=message, create_pr=True)
            return str(info.pr_url)
        api.create_repo(repo_id, private=private or None, exist_ok=True)  # None: the namespace default
        if revision and revision != "main":
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        info = api.create_commit(repo_id, operations, commit_message=message, revision=revision)
    except HfHubHTTPError as error:
        raise HubError(_http_message(error, repo_id, create_pr)) from None
    except Exception as error:  # transport failures: OSError, or httpx's own errors (not OSError subclasses)
        if isinstance(error, OSError) or type(error).__module__.startswith(("httpx", "httpcore", "urllib3")):
            raise HubError(f"cannot reach the Hub at {redact_credentials(str(api.endpoint))} "
                           f"({type(error).__name__}); nothing was uploaded") from None
        raise
    return str(info.commit_url)


def _http_message(error: Exception, repo_id: str, create_pr: bool = False) -> str:
    response = getattr(error, "response", None)
    status = getattr(response, "status_code", None)
    owner = repo_id.split("/")[0]
    if status == 401:
        return "authentication refused by the Hub: the token is invalid or expired"
    if status == 403:
        if create_pr:
            return f"the token may not open a pull request on {repo_id}"
        return f"the token may not write to {repo_id}: the repo or the namespace {owner!r} belongs to someone else"
    if status == 404:
        return f"{repo_id} was not found on the Hub (or the token cannot see it)" + (
            "; a pull request needs a repo that exists" if create_pr else "")
    return f"the Hub answered {status or 'an error'} while uploading {repo_id}; nothing was committed"


__all__ = ["PushPlan", "check_pr_options", "plan_push", "push"]
