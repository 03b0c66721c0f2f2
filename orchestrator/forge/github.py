"""GitHub through githubkit: typed from GitHub's own OpenAPI description, sync, and with
hishel's HTTP cache, so every GET is a conditional request (``If-None-Match`` with the
last ETag): an unchanged answer is a 304 that does not count against the rate limit.

githubkit's own retries are off: a rate limit raises `RateLimited` with its retry-after,
and the caller (`orchestrator.forge.watcher`) backs off for the whole board instead of
sleeping inside one request.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import httpx
from githubkit import GitHub
from githubkit.cache import MemCacheStrategy
from githubkit.exception import (
    GitHubException,
    RateLimitExceeded,
    RequestError,
    RequestFailed,
    RequestTimeout,
)

from orchestrator.errors import ConfigError
from orchestrator.forge import (
    AuthFailed,
    Check,
    CheckLine,
    Feedback,
    ForgeDown,
    ForgeError,
    Issue,
    PullRequest,
    RateLimited,
    Stats,
    cut,
)
from orchestrator.secrets import redact, remember

DETAIL_CHARS = 4_000
"""The tail of a failing check's output given to the agent."""
MAX_ANNOTATIONS = 30


def find_token(token_file: str | None, root: Path, environ: dict[str, str] | None = None) -> str:
    """The token: ``token_file`` (relative to the repository), ``GITHUB_TOKEN``, ``GH_TOKEN``,
    or ``gh auth token``; a `ConfigError` naming the four when none gives one."""
    env = os.environ if environ is None else environ
    if token_file:
        path = Path(token_file).expanduser()
        path = path if path.is_absolute() else root / path
        try:
            token = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"forge.token_file {path}: {exc.__class__.__name__}: cannot read "
                              "it") from None
        if token:
            return remember(token, "forge token")
        raise ConfigError(f"forge.token_file {path} is empty")
    for name in ("GITHUB_TOKEN", "GH_TOKEN"):
        if env.get(name, "").strip():
            return remember(env[name].strip(), name)
    if shutil.which("gh"):
        out = subprocess.run(["gh", "auth", "token"], capture_output=True, text=True,
                             timeout=20, check=False)
        if out.returncode == 0 and out.stdout.strip():
            return remember(out.stdout.strip(), "gh auth token")
    raise ConfigError("no forge token: set [forge] token_file, GITHUB_TOKEN or GH_TOKEN, or log "
                      "in with `gh auth login`")


class Counting(httpx.BaseTransport):
    """Counts what goes on the wire (under the cache): requests, and the 304s among them."""

    def __init__(self, inner: httpx.BaseTransport, stats: Stats) -> None:
        self.inner = inner
        self.stats = stats

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        self.stats.requests += 1
        route = f"{request.method} {request.url.path}"
        self.stats.by_route[route] = self.stats.by_route.get(route, 0) + 1
        if response.status_code == 304:
            self.stats.not_modified += 1
        return response

    def close(self) -> None:
        self.inner.close()


class GitHubForge:
    kind = "github"

    def __init__(self, repo: str, token: str, *, api_url: str = "https://api.github.com",
                 transport: httpx.BaseTransport | None = None, timeout: float = 20.0) -> None:
        owner, _, name = repo.partition("/")
        if not owner or not name or "/" in name:
            raise ConfigError(f"forge.repo must be owner/name, not {repo!r}")
        self.repo, self.owner, self.name = repo, owner, name
        self.stats = Stats()
        self._login: str | None = None
        self._gh = GitHub(token, base_url=api_url.rstrip("/") + "/", timeout=timeout,
                          transport=Counting(transport or httpx.HTTPTransport(), self.stats),
                          cache_strategy=MemCacheStrategy(), auto_retry=False,
                          user_agent="orchestrator", trust_env=False)
        self._gh.__enter__()  # type: ignore[no-untyped-call]  # one pool, one cache for life

    def close(self) -> None:
        self._gh.__exit__(None, None, None)

    # --- the Protocol -------------------------------------------------------------------
    def login(self) -> str:
        """Who the token is (its own comments are not feedback)."""
        if self._login is None:
            self._login = str(self._call(
                lambda: self._gh.rest.users.get_authenticated().json())["login"])
        return self._login

    def check(self) -> list[CheckLine]:
        lines = []
        try:
            lines.append(CheckLine("token", True, f"works, as {self.login()}"))
        except ForgeError as exc:
            return [CheckLine("token", False, f"{exc} (make a token with repo access)")]
        try:
            info = self._call(lambda: self._gh.rest.repos.get(self.owner, self.name).json())
        except ForgeError as exc:
            return [*lines, CheckLine("repository", False,
                                      f"{self.repo}: {exc} (check [forge] repo)")]
        lines.append(CheckLine("repository", True, f"{info['full_name']}, default branch "
                                                   f"{info['default_branch']}"))
        push = bool((info.get("permissions") or {}).get("push"))
        lines.append(CheckLine("push rights", push, "yes" if push else
                               "the token cannot push: give it write access to the repository"))
        try:
            self.checks(info["default_branch"])
            lines.append(CheckLine("checks readable", True, "check runs and statuses"))
        except ForgeError as exc:
            lines.append(CheckLine("checks readable", False,
                                   f"{exc} (the token needs checks:read and statuses:read)"))
        return lines

    def find_pull(self, head: str) -> PullRequest | None:
        data = self._call(lambda: self._gh.rest.pulls.list(
            self.owner, self.name, head=f"{self.owner}:{head}", state="all").json())
        found = [_pull(p) for p in data if p["head"]["ref"] == head]
        open_ = [p for p in found if p.state == "open"]
        return (open_ or found)[0] if found else None

    def recent_pulls(self) -> list[PullRequest]:
        """The 100 pull requests changed last, open or closed: one request (a 304 while
        none changed) tells which need a closer look."""
        data = self._call(lambda: self._gh.rest.pulls.list(
            self.owner, self.name, state="all", sort="updated", direction="desc",
            per_page=100).json())
        return [_pull(p) for p in data]

    def open_pull(self, *, head: str, base: str, title: str, body: str,
                  draft: bool) -> PullRequest:
        return _pull(self._call(lambda: self._gh.rest.pulls.create(
            self.owner, self.name, head=head, base=base, title=redact(title),
            body=cut(redact(body)), draft=draft).json()))

    def get_pull(self, number: int) -> PullRequest:
        return _pull(self._call(lambda: self._gh.rest.pulls.get(
            self.owner, self.name, number).json()))

    def edit_pull(self, number: int, *, title: str | None = None, body: str | None = None,
                  base: str | None = None, state: str | None = None) -> PullRequest:
        fields = {k: v for k, v in (("title", title and redact(title)),
                                    ("body", body and cut(redact(body))), ("base", base),
                                    ("state", state)) if v is not None}
        return _pull(self._call(lambda: self._gh.rest.pulls.update(
            self.owner, self.name, number, data=cast(Any, fields)).json()))

    def ready_for_review(self, pull: PullRequest) -> None:
        """Draft -> ready: only GitHub's GraphQL API has this mutation."""
        self._call(lambda: self._gh.graphql(
            "mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id})"
            " { pullRequest { isDraft } } }", {"id": pull.node_id}))

    def merge_pull(self, number: int, *, sha: str, method: str) -> str:
        data = self._call(lambda: self._gh.rest.pulls.merge(
            self.owner, self.name, number, data=cast(Any, {"sha": sha, "merge_method": method})
        ).json())
        return str(data["sha"])

    def checks(self, sha: str) -> list[Check]:
        runs = self._call(lambda: self._gh.rest.checks.list_for_ref(
            self.owner, self.name, sha, per_page=100).json())
        out = [self._run(r) for r in runs["check_runs"]]
        combined = self._call(lambda: self._gh.rest.repos.get_combined_status_for_ref(
            self.owner, self.name, sha, per_page=100).json())
        for s in combined["statuses"]:
            state = {"success": "success", "pending": "pending"}.get(s["state"], "failure")
            out.append(Check(name=cut(s["context"], 200), state=state,  # type: ignore[arg-type]
                             conclusion=s["state"], details=cut(s.get("description") or "",
                                                                DETAIL_CHARS),
                             url=s.get("target_url") or ""))
        return out

    def _run(self, r: dict[str, Any]) -> Check:
        if r["status"] != "completed":
            return Check(name=cut(r["name"], 200), state="pending", conclusion=r["status"])
        ok = r["conclusion"] in ("success", "neutral", "skipped")
        details = ""
        if not ok:
            output = r.get("output") or {}
            parts = [output.get("title") or "", output.get("summary") or "",
                     output.get("text") or ""]
            if output.get("annotations_count"):
                notes = self._call(lambda: self._gh.rest.checks.list_annotations(
                    self.owner, self.name, r["id"], per_page=MAX_ANNOTATIONS).json())
                parts += [f"{a['path']}:{a['start_line']}: {a['annotation_level']}: "
                          f"{a['message']}" for a in notes]
            text = "\n".join(p for p in parts if p)
            details = text[-DETAIL_CHARS:]
        return Check(name=cut(r["name"], 200), state="success" if ok else "failure",
                     conclusion=r["conclusion"] or "", details=details,
                     url=r.get("html_url") or "")

    def feedback(self, number: int) -> list[Feedback]:
        out: list[Feedback] = []
        reviews = self._call(lambda: self._gh.rest.pulls.list_reviews(
            self.owner, self.name, number, per_page=100).json())
        for r in reviews:
            kind = {"CHANGES_REQUESTED": "changes_requested", "APPROVED": "approved"}.get(
                r["state"], "comment")
            out.append(Feedback(id=f"review-{r['id']}", author=_login(r), kind=kind,  # type: ignore[arg-type]
                                body=cut(r.get("body"))))
        comments = self._call(lambda: self._gh.rest.issues.list_comments(
            self.owner, self.name, number, per_page=100).json())
        out += [Feedback(id=f"comment-{c['id']}", author=_login(c), kind="comment",
                         body=cut(c.get("body"))) for c in comments]
        inline = self._call(lambda: self._gh.rest.pulls.list_review_comments(
            self.owner, self.name, number, per_page=100).json())
        out += [Feedback(id=f"inline-{c['id']}", author=_login(c), kind="inline",
                         body=cut(c.get("body")), path=cut(c["path"], 500),
                         line=c.get("line") or c.get("original_line"),
                         reply_to=c.get("in_reply_to_id") or c["id"]) for c in inline]
        return out

    def can_write(self, login: str) -> bool:
        try:
            data = self._call(lambda: self._gh.rest.repos.get_collaborator_permission_level(
                self.owner, self.name, login).json())
        except ForgeError as exc:
            if "404" in str(exc):
                return False
            raise
        return data["permission"] in ("admin", "write", "maintain")

    def comment(self, number: int, body: str) -> None:
        self._call(lambda: self._gh.rest.issues.create_comment(
            self.owner, self.name, number, body=cut(redact(body))))

    def reply(self, number: int, comment_id: int, body: str) -> None:
        self._call(lambda: self._gh.rest.pulls.create_reply_for_review_comment(
            self.owner, self.name, number, comment_id, body=cut(redact(body))))

    def issues(self, label: str) -> list[Issue]:
        data = self._call(lambda: self._gh.rest.issues.list_for_repo(
            self.owner, self.name, labels=label, state="all", per_page=100).json())
        return [Issue(number=i["number"], title=cut(i["title"], 400), body=cut(i.get("body")),
                      state=i["state"], labels=tuple(cut(lb["name"], 100) for lb in i["labels"]
                                                     if isinstance(lb, dict)),
                      url=i["html_url"], author=_login(i))
                for i in data if "pull_request" not in i]

    # --- errors ---------------------------------------------------------------------------
    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run one request, translating githubkit's errors into `ForgeError`s of one line."""
        try:
            return fn()
        except RateLimitExceeded as exc:
            wait = exc.retry_after.total_seconds()
            raise RateLimited(f"GitHub rate limit: retry after {wait:.0f} s", wait) from None
        except RequestFailed as exc:
            code = exc.response.status_code
            message = _message(exc.response.raw_response)
            what = f"{exc.request.method} {exc.request.url.path}"
            if code == 401:
                raise AuthFailed(f"GitHub refused the token (401 {message}): it is missing, "
                                 "revoked or expired") from None
            if code >= 500:
                raise ForgeDown(f"GitHub is failing ({code} on {what})") from None
            raise ForgeError(f"GitHub said {code} to {what}: {message}") from None
        except (RequestTimeout, RequestError) as exc:
            raise ForgeDown(f"GitHub cannot be reached: {exc.__class__.__name__}: "
                            f"{cut(str(exc), 200)}") from None
        except GitHubException as exc:
            raise ForgeError(f"GitHub: {exc.__class__.__name__}: {cut(str(exc), 300)}") from None


def _message(response: httpx.Response) -> str:
    try:
        return cut(str(response.json().get("message", "")), 300)
    except Exception:
        return ""


def _login(obj: dict[str, Any]) -> str:
    return str((obj.get("user") or {}).get("login") or "")


def _pull(p: dict[str, Any]) -> PullRequest:
    return PullRequest(number=p["number"], url=p["html_url"], state=p["state"],
                       merged=bool(p.get("merged") or p.get("merged_at")),
                       draft=bool(p.get("draft")), head=p["head"]["ref"],
                       head_sha=p["head"]["sha"], base=p["base"]["ref"],
                       merge_commit=p.get("merge_commit_sha"), node_id=p.get("node_id", ""),
                       updated=p.get("updated_at") or "")
