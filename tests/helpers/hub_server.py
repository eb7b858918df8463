"""A small local server that answers the Hugging Face Hub API calls of create_repo, create_branch and
create_commit (with ``create_pr=1``: a pull request, ``refs/pr/N`` branched from main, which a token may open on a
repo of another owner), and the downloads' repo_info, list_repo_tree and file resolve (HEAD and GET), the way the
Hub does, and records what arrived. Started by the tests, on 127.0.0.1 only.

Behaviour knobs: ``token_owner`` (the user a valid token belongs to; other namespaces get 403),
``fail`` (path fragment -> status code to answer), ``drop`` (path fragment whose requests are cut off
without an answer).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VALID_TOKEN = "hf_test_token"


class HubState:
    def __init__(self) -> None:
        self.repos: dict[str, dict] = {}  # repo_id -> {"private": bool, "branches": {name: {path: bytes}}}
        self.commits: list[dict] = []
        self.requests: list[tuple[str, str]] = []
        self.token_owner = "alice"
        self.fail: dict[str, int] = {}
        self.drop: set[str] = set()
        self.card_metadata: list[dict] = []  # parsed front matter of every validated model card
        self.pull_requests: list[dict] = []  # {"repo_id", "num", "branch"} of every pull request opened

    def add_repo(self, repo_id: str, files: dict[str, bytes], *, private: bool = False) -> None:
        """A repository whose main branch holds ``files`` (path -> bytes), as if pushed earlier."""
        self.repos[repo_id] = {"private": private, "branches": {"main": dict(files)}}

    def downloaded(self, repo_id: str) -> set[str]:
        """The files of ``repo_id`` whose bytes were sent (GET on a resolve URL)."""
        prefix = f"/{repo_id}/resolve/"
        return {path[len(prefix):].split("/", 1)[1] for method, path in self.requests
                if method == "GET" and path.startswith(prefix)}


def branch_sha(files: dict[str, bytes]) -> str:
    """A commit id for a branch's content (stable while the content is)."""
    listing = json.dumps(sorted((path, hashlib.sha1(data).hexdigest()) for path, data in files.items()))
    return hashlib.sha1(listing.encode()).hexdigest()


def _handler(state: HubState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # keep test output clean
            pass

        def _answer(self, status: int, body: object, error: str | None = None, code: str | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if error:
                self.send_header("X-Error-Message", error)
            if code:  # the Hub's error code (huggingface_hub raises RevisionNotFoundError on RevisionNotFound)
                self.send_header("X-Error-Code", code)
            self.end_headers()
            self.wfile.write(data)

        def _files(self, repo_id: str, revision: str) -> tuple[str, dict[str, bytes]] | None:
            """The commit id and files of a branch name or commit id, or ``None`` (answered 404)."""
            from urllib.parse import unquote

            repo = state.repos.get(repo_id)
            if repo is None:
                self._answer(404, {"error": "Repository not found"}, "Repository not found")
                return None
            revision = unquote(revision)
            history = repo.setdefault("history", {})  # a commit stays readable once a branch has moved on
            for files in repo["branches"].values():
                history[branch_sha(files)] = dict(files)
            if revision in history:
                return revision, history[revision]
            if revision in repo["branches"]:
                files = repo["branches"][revision]
                return branch_sha(files), files
            self._answer(404, {"error": f"Invalid rev id: {revision}"}, f"Invalid rev id: {revision}",
                         "RevisionNotFound")
            return None

        def do_HEAD(self) -> None:  # noqa: N802 - the http.server naming
            self._download(send_body=False)

        def do_GET(self) -> None:  # noqa: N802 - the http.server naming
            self._download(send_body=True)

        def _download(self, *, send_body: bool) -> None:
            path = self.path.split("?")[0]
            state.requests.append(("GET" if send_body else "HEAD", path))
            info = re.match(r"^/api/models/([^/]+/[^/]+)/(revision|tree)/([^/]+)$", path)
            if info:
                repo_id, kind, revision = info.groups()
                found = self._files(repo_id, revision)
                if found is not None:
                    sha, files = found
                    if kind == "revision":
                        self._answer(200, {"id": repo_id, "sha": sha, "private": state.repos[repo_id]["private"],
                                           "siblings": [{"rfilename": name} for name in sorted(files)]})
                    else:
                        self._answer(200, [{"type": "file", "path": name, "size": len(data),
                                            "oid": hashlib.sha1(data).hexdigest()}
                                           for name, data in sorted(files.items())])
                return
            resolve = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
            if not resolve:
                self._answer(404, {"error": "not found"})
                return
            repo_id, revision, name = resolve.groups()
            found = self._files(repo_id, revision)
            if found is None:
                return
            sha, files = found
            if name not in files:
                self._answer(404, {"error": "Entry not found"}, "Entry not found")
                return
            data = files[name]
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
            self.send_header("X-Repo-Commit", sha)
            self.end_headers()
            if send_body:
                self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802 - the http.server naming
            from urllib.parse import parse_qs, urlsplit

            length = int(self.headers.get("Content-Length", 0))
            body = self.rfile.read(length)
            path = self.path.split("?")[0]
            create_pr = parse_qs(urlsplit(self.path).query).get("create_pr") == ["1"]
            state.requests.append(("POST", path))
            if any(fragment in path for fragment in state.drop):
                self.connection.shutdown(2)  # cut off without an answer
                self.close_connection = True
                return
            for fragment, status in state.fail.items():
                if fragment in path:
                    self._answer(status, {"error": f"forced {status}"}, f"forced {status}")
                    return
            if self.headers.get("Authorization") != f"Bearer {VALID_TOKEN}":
                self._answer(401, {"error": "Invalid credentials in Authorization header"}, "Invalid credentials")
                return
            if path == "/api/repos/create":
                self._create_repo(json.loads(body))
                return
            if path == "/api/validate-yaml":
                self._validate_yaml(json.loads(body)["content"])
                return
            match = re.match(r"^/api/models/([^/]+/[^/]+)/(preupload|commit|branch)/(.+)$", path)
            if not match:
                self._answer(404, {"error": "not found"})
                return
            repo_id, action, revision = match.groups()
            if repo_id.split("/")[0] != state.token_owner and not create_pr:  # anyone may open a pull request
                self._answer(403, {"error": "You don't have the rights to write to this repo"}, "Forbidden")
                return
            if repo_id not in state.repos:
                self._answer(404, {"error": "Repository not found"}, "Repository not found")
                return
            branches = state.repos[repo_id]["branches"]
            if action == "branch":
                if revision in branches:
                    self._answer(409, {"error": "Reference already exists"}, "Reference already exists")
                else:
                    branches[revision] = dict(branches["main"])
                    self._answer(200, {})
            elif action == "preupload":
                files = json.loads(body)["files"]
                self._answer(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                                              "oid": None} for f in files]})
            elif create_pr:
                self._pull_request(repo_id, revision, body, branches)
            else:
                self._commit(repo_id, revision, body, branches)

        def _validate_yaml(self, content: str) -> None:
            """The model card's front matter must be a YAML mapping, as the Hub requires."""
            import yaml

            front = content.split("---", 2)[1] if content.startswith("---") else ""
            try:
                metadata = yaml.safe_load(front) or {}
                assert isinstance(metadata, dict), "metadata must be a mapping"
            except Exception as error:  # noqa: BLE001 - any parse failure is the card's fault
                self._answer(400, {"errors": [{"message": f"invalid YAML: {error}"}]}, "invalid YAML")
                return
            state.card_metadata.append(metadata)
            self._answer(200, {"errors": [], "warnings": []})

        def _create_repo(self, payload: dict) -> None:
            owner = payload.get("organization") or state.token_owner
            repo_id = f"{owner}/{payload['name']}"
            if owner != state.token_owner:
                self._answer(403, {"error": "You don't have the rights to create a model under this namespace"},
                             "Forbidden")
                return
            if repo_id in state.repos:
                self._answer(409, {"error": "You already created this model repo",
                                   "url": f"http://{self.headers['Host']}/{repo_id}"},
                             "You already created this model repo")
                return
            private = payload.get("visibility") == "private" or payload.get("private") is True
            state.repos[repo_id] = {"private": private, "branches": {"main": {}}}
            self._answer(200, {"url": f"http://{self.headers['Host']}/{repo_id}", "name": repo_id})

        def _pull_request(self, repo_id: str, revision: str, body: bytes, branches: dict) -> None:
            """A pull request: a ``refs/pr/N`` branch from main holding the commit, as the Hub makes one."""
            if revision != "main":
                self._answer(400, {"error": "Pull requests are opened against main"}, "Bad request")
                return
            num = len(state.pull_requests) + 1
            branch = f"refs/pr/{num}"
            branches[branch] = dict(branches["main"])
            state.pull_requests.append({"repo_id": repo_id, "num": num, "branch": branch})
            self._commit(repo_id, branch, body, branches,
                         pr_url=f"http://{self.headers['Host']}/{repo_id}/discussions/{num}")

        def _commit(self, repo_id: str, revision: str, body: bytes, branches: dict, pr_url: str | None = None
                    ) -> None:
            from urllib.parse import unquote

            branch = unquote(revision)
            if branch not in branches:
                self._answer(404, {"error": f"Invalid rev id: {branch}"}, f"Invalid rev id: {branch}")
                return
            lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            header = next(item["value"] for item in lines if item["key"] == "header")
            files = {item["value"]["path"]: base64.b64decode(item["value"]["content"])
                     for item in lines if item["key"] == "file"}
            branches[branch].update(files)
            oid = f"{len(state.commits) + 1:040x}"
            state.commits.append({"repo_id": repo_id, "branch": branch, "summary": header["summary"],
                                  "files": files, "content_type": self.headers.get("Content-Type")})
            self._answer(200, {"commitUrl": f"http://{self.headers['Host']}/{repo_id}/commit/{oid}",
                               "commitOid": oid, "success": True, "pullRequestUrl": pr_url})

    return Handler


class HubServer:
    """Context manager: ``with HubServer() as hub: hub.url, hub.state``."""

    def __init__(self) -> None:
        self.state = HubState()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state))
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
