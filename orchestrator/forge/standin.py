"""A GitHub stand-in on loopback: the part of GitHub's REST API orchestrator uses, with
state, over a real bare git repository as the remote.

It is the test seam shipped in the library (tests, ``scripts/bench/forge.py``, and a
try-out without an account). Its answers are shaped like GitHub's, and the tests check
every request and answer against GitHub's published OpenAPI description
(`orchestrator.forge.openapi`), so it cannot drift from GitHub unnoticed.

- Branch heads are read from the bare repository; a merge really merges there
  (``merge``, ``squash`` or ``rebase`` as a fast-forward of the squashed tree).
- Tokens name users (``StandIn.add_user``); each user has a permission on the repository.
- Every GET has an ETag; ``If-None-Match`` with the current one is a 304.
- Faults on demand: `StandIn.rate_limit` (403/429 with retry-after), `StandIn.down`
  (503), a revoked token (401).
- Webhooks: `StandIn.add_hook` makes it POST a signed delivery (``X-Hub-Signature-256``)
  for each change, as GitHub does.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from orchestrator.forge.shapes import HOST, MINIMAL_REPO, STAMP, Shapes, now

if TYPE_CHECKING:
    from orchestrator.forge.openapi import Validator


@dataclass
class _Pull:
    number: int
    title: str
    body: str
    head: str
    base: str
    user: str
    draft: bool
    state: str = "open"
    merged: bool = False
    merge_commit: str | None = None
    merged_by: str | None = None
    head_sha: str = ""
    created: str = field(default_factory=now)
    updated: str = field(default_factory=now)


@dataclass
class _Issue:
    number: int
    title: str
    body: str
    user: str
    labels: list[str]
    state: str = "open"
    created: str = field(default_factory=now)
    updated: str = field(default_factory=now)


class StandIn(Shapes):
    """The stand-in's state and its server. ``with StandIn(bare, "acme/app") as gh:``."""

    def __init__(self, bare: Path, repo: str = "acme/app", *, port: int = 0) -> None:
        self.bare = bare
        self.owner, self.name = repo.split("/", 1)
        self.repo = repo
        self.lock = threading.RLock()
        self.ids = itertools.count(1000)
        self.numbers = itertools.count(1)
        self.tokens: dict[str, str] = {}
        self.permissions: dict[str, str] = {}
        self.pulls: dict[int, _Pull] = {}
        self.issues: dict[int, _Issue] = {}
        self.comments: list[dict[str, Any]] = []
        """Issue comments: number, id, user, body."""
        self.reviews: list[dict[str, Any]] = []
        self.inline: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []
        self.hooks: list[tuple[str, str]] = []
        self.limit: tuple[int, int, float] | None = None
        """(answers left to refuse, status, retry-after)."""
        self.down = False
        self.requests: list[tuple[str, str, int, str | None]] = []
        """(method, path, status, user) of each request served (user: None when refused)."""
        self.validator: Validator | None = None
        """Checks every exchange against GitHub's description (tests set it)."""
        self.app = Starlette(routes=self._routes())
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", port))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    # --- set-up and faults (what a test does on GitHub's side) ----------------------------
    def add_user(self, login: str, token: str, permission: str = "write") -> None:
        with self.lock:
            self.tokens[token] = login
            self.permissions[login] = permission

    def revoke(self, token: str) -> None:
        with self.lock:
            self.tokens.pop(token, None)

    def rate_limit(self, times: int = 1, *, status: int = 429, retry_after: float = 1) -> None:
        with self.lock:
            self.limit = (times, status, retry_after)

    def add_hook(self, url: str, secret: str) -> None:
        with self.lock:
            self.hooks.append((url, secret))

    def served(self, since: int = 0) -> list[tuple[str, str, int, str | None]]:
        with self.lock:
            return list(self.requests[since:])

    # --- server ---------------------------------------------------------------------------
    def __enter__(self) -> StandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> StandIn:
        config = uvicorn.Config(self.app, log_level="error", lifespan="off")
        self._server = uvicorn.Server(config)
        self._sock.listen(64)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="forge-standin", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(10)
        self._sock.close()

    def _routes(self) -> list[Route]:
        r = "/repos/{owner}/{repo}"
        table: list[tuple[str, str, Callable[..., Any]]] = [
            ("/user", "GET", self.get_user),
            (r, "GET", self.get_repo),
            (f"{r}/pulls", "GET", self.list_pulls),
            (f"{r}/pulls", "POST", self.create_pull),
            (f"{r}/pulls/{{n:int}}", "GET", self.get_pull),
            (f"{r}/pulls/{{n:int}}", "PATCH", self.update_pull),
            (f"{r}/pulls/{{n:int}}/merge", "PUT", self.merge_pull),
            (f"{r}/pulls/{{n:int}}/reviews", "GET", self.list_reviews),
            (f"{r}/pulls/{{n:int}}/reviews", "POST", self.create_review),
            (f"{r}/pulls/{{n:int}}/comments", "GET", self.list_inline),
            (f"{r}/pulls/{{n:int}}/comments", "POST", self.create_inline),
            (f"{r}/pulls/{{n:int}}/comments/{{cid:int}}/replies", "POST", self.reply_inline),
            (f"{r}/issues", "GET", self.list_issues),
            (f"{r}/issues", "POST", self.create_issue),
            (f"{r}/issues/{{n:int}}", "PATCH", self.update_issue),
            (f"{r}/issues/{{n:int}}/comments", "GET", self.list_comments),
            (f"{r}/issues/{{n:int}}/comments", "POST", self.create_comment),
            (f"{r}/commits/{{ref:path}}/check-runs", "GET", self.list_runs),
            (f"{r}/commits/{{ref:path}}/status", "GET", self.combined_status),
            (f"{r}/check-runs", "POST", self.create_run),
            (f"{r}/check-runs/{{cid:int}}", "PATCH", self.update_run),
            (f"{r}/check-runs/{{cid:int}}/annotations", "GET", self.annotations),
            (f"{r}/statuses/{{sha}}", "POST", self.create_status),
            (f"{r}/collaborators/{{user}}/permission", "GET", self.permission),
            ("/graphql", "POST", self.graphql),
        ]
        return [Route(path, self._wrap(fn), methods=[method]) for path, method, fn in table]

    def _wrap(self, fn: Callable[..., Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            body = await request.body()
            response = self._answer(request, fn, body)
            with self.lock:
                auth = request.headers.get("authorization", "").split(" ", 1)[-1]
                self.requests.append((request.method, request.url.path, response.status_code,
                                      self.tokens.get(auth)))
            if self.validator is not None:
                self.validator.check(request.method, request.url.path,
                                     list(request.query_params.multi_items()),
                                     dict(request.headers), body, response.status_code,
                                     dict(response.headers), bytes(response.body))
            return response
        return endpoint

    def _answer(self, request: Request, fn: Callable[..., Any], body: bytes) -> Response:
        with self.lock:
            if self.down:
                return _error(503, "Service Unavailable")
            if self.limit is not None:
                left, status, after = self.limit
                self.limit = (left - 1, status, after) if left > 1 else None
                return JSONResponse(
                    {"message": "API rate limit exceeded",
                     "documentation_url": "https://docs.github.com/rest"}, status,
                    headers={"retry-after": str(int(after)), "x-ratelimit-remaining": "0"})
            auth = request.headers.get("authorization", "")
            user = self.tokens.get(auth.split(" ", 1)[-1]) if auth else None
            if user is None:
                return _error(401, "Bad credentials")
            owner, repo = request.path_params.get("owner"), request.path_params.get("repo")
            if owner is not None and (owner, repo) != (self.owner, self.name):
                return _error(404, "Not Found")
            try:
                data = json.loads(body) if body else {}
            except ValueError:
                return _error(400, "Problems parsing JSON")
            try:
                result = fn(request, user, data)
            except _Refused as exc:
                return _error(exc.status, exc.message)
            if isinstance(result, Response):
                return result
            status = 201 if request.method == "POST" and fn not in (
                self.graphql, self.create_review) else 200
            text = json.dumps(result, sort_keys=True)
            etag = '"' + hashlib.sha256(text.encode()).hexdigest()[:32] + '"'
            if request.method == "GET" and etag in request.headers.get("if-none-match", ""):
                return Response(status_code=304, headers={"etag": etag})
            headers = {"etag": etag, "cache-control": "private, max-age=60, s-maxage=60",
                       "x-ratelimit-remaining": "4999"} if request.method == "GET" else {}
            return Response(text, status, headers=headers, media_type="application/json")

    # --- git --------------------------------------------------------------------------------
    def git(self, *args: str) -> str:
        env = {"GIT_AUTHOR_NAME": "GitHub", "GIT_AUTHOR_EMAIL": "noreply@github.example",
               "GIT_COMMITTER_NAME": "GitHub", "GIT_COMMITTER_EMAIL": "noreply@github.example",
               "PATH": "/usr/bin:/bin"}
        out = subprocess.run(["git", "-C", str(self.bare), *args], capture_output=True,
                             text=True, env=env, check=False)
        if out.returncode != 0:
            raise _Refused(409, f"git {args[0]}: {out.stderr.strip()[:300]}")
        return out.stdout.strip()

    def head_of(self, branch: str) -> str | None:
        try:
            return self.git("rev-parse", "--verify", "-q", f"refs/heads/{branch}^{{commit}}")
        except _Refused:
            return None

    def default_branch(self) -> str:
        try:
            return self.git("symbolic-ref", "--short", "HEAD")
        except _Refused:
            return "main"

    # --- endpoints --------------------------------------------------------------------------
    def get_user(self, req: Request, user: str, data: Any) -> Any:
        return {**self.user_json(user), "user_view_type": "public", "name": None,
                "company": None, "blog": "",
                "location": None, "email": None, "hireable": None, "bio": None,
                "public_repos": 0, "public_gists": 0, "followers": 0, "following": 0,
                "created_at": STAMP, "updated_at": STAMP}

    def get_repo(self, req: Request, user: str, data: Any) -> Any:
        if self.permissions.get(user, "none") == "none":
            raise _Refused(404, "Not Found")
        return self.repo_json(user)

    def list_pulls(self, req: Request, user: str, data: Any) -> Any:
        q = req.query_params
        state = q.get("state", "open")
        head = q.get("head", "").split(":", 1)[-1]
        found = [self.pull_json(p, full=False) for p in self.pulls.values()
                 if (state == "all" or p.state == state) and (not head or p.head == head)]
        if q.get("sort") == "updated":
            found.sort(key=lambda x: (x["updated_at"], x["number"]),
                       reverse=q.get("direction", "desc") == "desc")
        return found[:int(q.get("per_page", 30))]

    def create_pull(self, req: Request, user: str, data: Any) -> Any:
        self._need(user, "write")
        head, base = str(data.get("head", "")), str(data.get("base", ""))
        if self.head_of(head) is None or self.head_of(base) is None:
            raise _Refused(422, "Validation Failed: head or base does not exist")
        if any(p.head == head and p.state == "open" for p in self.pulls.values()):
            raise _Refused(422, f"A pull request already exists for {self.owner}:{head}.")
        p = _Pull(next(self.numbers), str(data.get("title", "")), str(data.get("body") or ""),
                  head, base, user, bool(data.get("draft", False)))
        self.pulls[p.number] = p
        self._deliver("pull_request", "opened", p.number)
        return self.pull_json(p)

    def _pull(self, req: Request) -> _Pull:
        p = self.pulls.get(req.path_params["n"])
        if p is None:
            raise _Refused(404, "Not Found")
        return p

    def get_pull(self, req: Request, user: str, data: Any) -> Any:
        return self.pull_json(self._pull(req))

    def update_pull(self, req: Request, user: str, data: Any) -> Any:
        self._need(user, "write")
        p = self._pull(req)
        for key in ("title", "body", "base", "state"):
            if key in data:
                setattr(p, key, str(data[key]))
        p.updated = now()
        self._deliver("pull_request", "edited", p.number)
        return self.pull_json(p)

    def merge_pull(self, req: Request, user: str, data: Any) -> Any:
        self._need(user, "write")
        p = self._pull(req)
        if p.state != "open":
            raise _Refused(405, "Pull Request is not mergeable")
        head = self.head_of(p.head)
        if head is None:
            raise _Refused(422, "Head branch was deleted")
        if data.get("sha") and data["sha"] != head:
            raise _Refused(409, "Head branch was modified. Review and try the merge again.")
        if self.protected and not self._green(head):
            raise _Refused(405, "Required status check \"ci\" is expected.")
        sha = self.merge_branch(p, str(data.get("merge_method", "merge")), user)
        return {"sha": sha, "merged": True, "message": "Pull Request successfully merged"}

    protected = False
    """Branch protection on the base: a merge needs every check of the head green."""

    def _green(self, sha: str) -> bool:
        runs = [r for r in self.runs if r["head_sha"] == sha]
        sts = [s for s in self.statuses if s["sha"] == sha]
        return bool(runs or sts) and all(r["conclusion"] == "success" for r in runs) and all(
            s["state"] == "success" for s in self._latest(sts))

    def merge_branch(self, p: _Pull, method: str, user: str) -> str:
        """Merge ``p`` in the bare repository (what GitHub's merge button does)."""
        base, head = self.head_of(p.base), self.head_of(p.head)
        assert base is not None and head is not None
        tree = self.git("merge-tree", "--write-tree", base, head).splitlines()[0]
        msg = f"Merge pull request #{p.number} from {self.owner}/{p.head}\n\n{p.title}"
        parents = ["-p", base] if method != "merge" else ["-p", base, "-p", head]
        sha = self.git("commit-tree", tree, *parents, "-m", msg)
        self.git("update-ref", f"refs/heads/{p.base}", sha, base)
        p.state, p.merged, p.merge_commit, p.merged_by = "closed", True, sha, user
        p.head_sha, p.updated = head, now()
        self._deliver("pull_request", "closed", p.number)
        for n in re.findall(r"(?i)\b(?:closes|fixes|resolves) #(\d+)", p.body):
            if int(n) in self.issues:
                self.issues[int(n)].state = "closed"
        return sha

    def list_reviews(self, req: Request, user: str, data: Any) -> Any:
        n = self._pull(req).number
        return [self.review_json(r) for r in self.reviews if r["number"] == n]

    def create_review(self, req: Request, user: str, data: Any) -> Any:
        p = self._pull(req)
        event = str(data.get("event", "COMMENT"))
        state = {"REQUEST_CHANGES": "CHANGES_REQUESTED", "APPROVE": "APPROVED"}.get(
            event, "COMMENTED")
        r = {"id": next(self.ids), "number": p.number, "user": user, "state": state,
             "body": str(data.get("body") or ""), "commit": self.head_of(p.head) or p.head_sha,
             "at": now()}
        self.reviews.append(r)
        for c in data.get("comments") or []:
            self.inline.append({"id": next(self.ids), "number": p.number, "user": user,
                                "body": str(c.get("body", "")), "path": str(c.get("path", "")),
                                "line": int(c.get("line") or 1), "commit": r["commit"],
                                "review": r["id"], "at": r["at"]})
        p.updated = now()
        self._deliver("pull_request_review", "submitted", p.number)
        return self.review_json(r)

    def list_inline(self, req: Request, user: str, data: Any) -> Any:
        n = self._pull(req).number
        return [self.inline_json(c) for c in self.inline if c["number"] == n]

    def create_inline(self, req: Request, user: str, data: Any) -> Any:
        p = self._pull(req)
        c = {"id": next(self.ids), "number": p.number, "user": user,
             "body": str(data.get("body", "")), "path": str(data.get("path", "")),
             "line": int(data.get("line") or 1), "commit": str(data.get("commit_id", "")),
             "review": next(self.ids), "at": now()}
        self.inline.append(c)
        p.updated = now()
        self._deliver("pull_request_review_comment", "created", p.number)
        return self.inline_json(c)

    def reply_inline(self, req: Request, user: str, data: Any) -> Any:
        p = self._pull(req)
        parent = next((c for c in self.inline if c["id"] == req.path_params["cid"]), None)
        if parent is None:
            raise _Refused(404, "Not Found")
        c = {**parent, "id": next(self.ids), "user": user, "body": str(data.get("body", "")),
             "reply_to": parent["id"], "at": now()}
        self.inline.append(c)
        p.updated = now()
        self._deliver("pull_request_review_comment", "created", p.number)
        return self.inline_json(c)

    def list_issues(self, req: Request, user: str, data: Any) -> Any:
        q = req.query_params
        state, labels = q.get("state", "open"), [x for x in q.get("labels", "").split(",") if x]
        return [self.issue_json(i) for i in self.issues.values()
                if (state == "all" or i.state == state) and all(x in i.labels for x in labels)]

    def create_issue(self, req: Request, user: str, data: Any) -> Any:
        i = _Issue(next(self.numbers), str(data.get("title", "")), str(data.get("body") or ""),
                   user, [str(x) for x in data.get("labels") or []])
        self.issues[i.number] = i
        self._deliver("issues", "opened", i.number)
        return self.issue_json(i)

    def update_issue(self, req: Request, user: str, data: Any) -> Any:
        i = self.issues.get(req.path_params["n"])
        if i is None:
            raise _Refused(404, "Not Found")
        if "state" in data:
            i.state = str(data["state"])
        if "body" in data:
            i.body = str(data["body"] or "")
        i.updated = now()
        self._deliver("issues", "closed" if i.state == "closed" else "reopened", i.number)
        return self.issue_json(i)

    def list_comments(self, req: Request, user: str, data: Any) -> Any:
        n = req.path_params["n"]
        return [self.comment_json(c) for c in self.comments if c["number"] == n]

    def create_comment(self, req: Request, user: str, data: Any) -> Any:
        n = req.path_params["n"]
        if n not in self.pulls and n not in self.issues:
            raise _Refused(404, "Not Found")
        c = {"id": next(self.ids), "number": n, "user": user, "body": str(data.get("body", "")),
             "at": now()}
        self.comments.append(c)
        if n in self.pulls:
            self.pulls[n].updated = now()
        self._deliver("issue_comment", "created", n)
        return self.comment_json(c)

    def _sha(self, ref: str) -> str:
        return self.head_of(ref) or ref

    def list_runs(self, req: Request, user: str, data: Any) -> Any:
        sha = self._sha(req.path_params["ref"])
        runs = [self.run_json(r) for r in self.runs if r["head_sha"] == sha]
        return {"total_count": len(runs), "check_runs": runs}

    def create_run(self, req: Request, user: str, data: Any) -> Any:
        r = {"id": next(self.ids), "name": str(data.get("name", "")),
             "head_sha": str(data.get("head_sha", "")), "at": now(),
             "status": str(data.get("status", "queued")), "conclusion": data.get("conclusion")}
        self._output(r, data)
        if r["conclusion"]:
            r["status"] = "completed"
        self.runs = [x for x in self.runs if (x["name"], x["head_sha"]) !=
                     (r["name"], r["head_sha"])] + [r]
        self._deliver("check_run", "created", r["head_sha"])
        return self.run_json(r)

    def _output(self, r: dict[str, Any], data: Any) -> None:
        out = data.get("output") or {}
        r["title"], r["summary"] = out.get("title"), out.get("summary")
        r["text"], r["annotations"] = out.get("text"), list(out.get("annotations") or [])

    def update_run(self, req: Request, user: str, data: Any) -> Any:
        r = next((x for x in self.runs if x["id"] == req.path_params["cid"]), None)
        if r is None:
            raise _Refused(404, "Not Found")
        for key in ("status", "conclusion"):
            if key in data:
                r[key] = data[key]
        if "output" in data:
            self._output(r, data)
        if r["conclusion"]:
            r["status"], r["at"] = "completed", now()
        self._deliver("check_run", "completed", r["head_sha"])
        return self.run_json(r)

    def annotations(self, req: Request, user: str, data: Any) -> Any:
        r = next((x for x in self.runs if x["id"] == req.path_params["cid"]), None)
        if r is None:
            raise _Refused(404, "Not Found")
        return [{"path": a.get("path", ""), "start_line": a.get("start_line", 1),
                 "end_line": a.get("end_line", 1), "start_column": None, "end_column": None,
                 "annotation_level": a.get("annotation_level", "failure"),
                 "title": a.get("title"), "message": a.get("message", ""), "raw_details": None,
                 "blob_href": f"{HOST}/{self.repo}/blob/{r['head_sha']}/{a.get('path', '')}"}
                for a in r["annotations"]]

    @staticmethod
    def _latest(statuses: list[dict[str, Any]]) -> list[dict[str, Any]]:
        latest: dict[str, dict[str, Any]] = {}
        for s in statuses:
            latest[s["context"]] = s
        return list(latest.values())

    def combined_status(self, req: Request, user: str, data: Any) -> Any:
        sha = self._sha(req.path_params["ref"])
        sts = self._latest([s for s in self.statuses if s["sha"] == sha])
        states = {s["state"] for s in sts}
        state = "failure" if states & {"failure", "error"} else \
            "pending" if "pending" in states or not sts else "success"
        return {"state": state, "sha": sha, "total_count": len(sts),
                "statuses": [self.status_json(s) for s in sts],
                "repository": {k: v for k, v in self.repo_json().items() if k in MINIMAL_REPO},
                "commit_url": self._api(f"/commits/{sha}"),
                "url": self._api(f"/commits/{sha}/status")}

    def create_status(self, req: Request, user: str, data: Any) -> Any:
        s = {"id": next(self.ids), "sha": req.path_params["sha"],
             "state": str(data.get("state", "pending")), "context": str(data.get("context",
                                                                                   "default")),
             "description": data.get("description"), "target_url": data.get("target_url"),
             "at": now(), "user": user}
        self.statuses.append(s)
        self._deliver("status", s["state"], s["sha"])
        return self.status_json(s)

    def permission(self, req: Request, user: str, data: Any) -> Any:
        login = req.path_params["user"]
        perm = self.permissions.get(login)
        if perm is None:
            raise _Refused(404, f"{login} is not a user")
        return {"permission": perm, "role_name": perm, "user": {
            **self.user_json(login), "permissions": {"admin": perm == "admin",
                                                     "maintain": perm == "admin",
                                                     "push": perm in ("admin", "write"),
                                                     "triage": perm != "none",
                                                     "pull": perm != "none"},
            "role_name": perm}}

    def graphql(self, req: Request, user: str, data: Any) -> Any:
        query = str(data.get("query", ""))
        if "markPullRequestReadyForReview" not in query:
            return {"errors": [{"message": "the stand-in knows one mutation"}]}
        node = str((data.get("variables") or {}).get("id", ""))
        p = next((x for x in self.pulls.values() if f"PR_{x.number}" == node), None)
        if p is None:
            return {"errors": [{"message": f"no pull request {node}"}]}
        p.draft, p.updated = False, now()
        return {"data": {"markPullRequestReadyForReview": {"pullRequest": {"isDraft": False}}}}

    def _need(self, user: str, level: str) -> None:
        if self.permissions.get(user) not in (("admin", "write") if level == "write"
                                              else ("admin", "write", "read")):
            raise _Refused(403, "Resource not accessible by personal access token")

    # --- webhooks ---------------------------------------------------------------------------
    def _deliver(self, event: str, action: str, about: int | str) -> None:
        if not self.hooks:
            return
        payload = json.dumps({"action": action, "about": about,
                              "repository": {"full_name": self.repo}}).encode()
        for url, secret in self.hooks:
            sig = "sha256=" + hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()
            threading.Thread(target=_post, args=(url, payload, event, sig),
                             daemon=True).start()


def _post(url: str, payload: bytes, event: str, sig: str) -> None:
    try:
        httpx.post(url, content=payload, timeout=10, headers={  # GitHub waits 10 s
            "X-GitHub-Event": event, "X-Hub-Signature-256": sig,
            "X-GitHub-Delivery": hashlib.sha1(payload).hexdigest(),
            "Content-Type": "application/json"})
    except httpx.HTTPError:
        pass  # GitHub, too, just records a failed delivery


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _error(status: int, message: str) -> Response:
    return JSONResponse({"message": message, "documentation_url": "https://docs.github.com/rest"},
                        status)
