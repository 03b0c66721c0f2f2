"""GitHub's JSON shapes for the stand-in (`orchestrator.forge.standin`): users, the
repository, pull requests, issues, comments, reviews, check runs and statuses, with every
field GitHub's OpenAPI description requires (the tests check each answer against it)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.forge.standin import _Issue, _Pull

STAMP = "2026-01-01T00:00:00Z"
HOST = "https://github.example"
"""Where the stand-in says its pages are (``html_url``)."""


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Shapes:
    """The JSON builders; `orchestrator.forge.standin.StandIn` holds the state they read."""

    url: str
    repo: str
    owner: str
    name: str
    bare: Path
    permissions: dict[str, str]
    comments: list[dict[str, Any]]
    inline: list[dict[str, Any]]

    def head_of(self, branch: str) -> str | None:
        raise NotImplementedError

    def default_branch(self) -> str:
        raise NotImplementedError

    def _api(self, path: str = "") -> str:
        return f"{self.url}/repos/{self.repo}{path}"

    def user_json(self, login: str) -> dict[str, Any]:
        base = f"{self.url}/users/{login}"
        uid = int(hashlib.sha256(login.encode()).hexdigest()[:6], 16)
        return {"login": login, "id": uid, "node_id": f"U_{uid}", "type": "User",
                "site_admin": False, "gravatar_id": "", "url": base,
                "avatar_url": f"{HOST}/{login}.png", "html_url": f"{HOST}/{login}",
                **{f"{k}_url": f"{base}/{k}" for k in (
                    "events", "followers", "following", "gists", "organizations",
                    "received_events", "repos", "starred", "subscriptions")}}

    def repo_json(self, login: str | None = None) -> dict[str, Any]:
        names = ("archive", "assignees", "blobs", "branches", "collaborators", "comments",
                 "commits", "compare", "contents", "contributors", "deployments", "downloads",
                 "events", "forks", "git_commits", "git_refs", "git_tags", "hooks",
                 "issue_comment", "issue_events", "issues", "keys", "labels", "languages",
                 "merges", "milestones", "notifications", "pulls", "releases", "stargazers",
                 "statuses", "subscribers", "subscription", "tags", "teams", "trees")
        out: dict[str, Any] = {
            "id": 1, "node_id": "R_1", "name": self.name, "full_name": self.repo,
            "owner": self.user_json(self.owner), "private": True, "fork": False,
            "description": None, "url": self._api(), "html_url": f"{HOST}/{self.repo}",
            "clone_url": str(self.bare), "git_url": str(self.bare), "ssh_url": str(self.bare),
            "svn_url": f"{HOST}/{self.repo}", "mirror_url": None, "homepage": None,
            "language": None, "default_branch": self.default_branch(), "forks": 0,
            "forks_count": 0, "has_downloads": True, "has_issues": True, "has_projects": False,
            "has_wiki": False, "has_pages": False, "has_discussions": False, "archived": False,
            "disabled": False, "open_issues": 0, "open_issues_count": 0, "license": None,
            "pushed_at": STAMP, "size": 1, "stargazers_count": 0, "watchers": 0,
            "watchers_count": 0, "created_at": STAMP, "updated_at": STAMP,
            "network_count": 0, "subscribers_count": 0,
            **{f"{k}_url": f"{self._api()}/{k}" for k in names}}
        if login is not None:
            perm = self.permissions.get(login, "none")
            out["permissions"] = {"admin": perm == "admin", "maintain": perm == "admin",
                                  "push": perm in ("admin", "write"), "triage": perm != "none",
                                  "pull": perm != "none"}
        return out

    def pull_json(self, p: _Pull, *, full: bool = True) -> dict[str, Any]:
        sha = self.head_of(p.head)
        if sha is not None and p.state == "open":
            if p.head_sha and sha != p.head_sha:
                p.updated = now()  # a push changes the pull request, as on GitHub
            p.head_sha = sha
        api = self._api(f"/pulls/{p.number}")
        html = f"{HOST}/{self.repo}/pull/{p.number}"

        def end(ref: str, sha: str) -> dict[str, Any]:
            return {"label": f"{self.owner}:{ref}", "ref": ref, "sha": sha,
                    "user": self.user_json(self.owner), "repo": self.repo_json()}

        out: dict[str, Any] = {
            "url": api, "id": 5000 + p.number, "node_id": f"PR_{p.number}", "html_url": html,
            "diff_url": f"{html}.diff", "patch_url": f"{html}.patch",
            "issue_url": self._api(f"/issues/{p.number}"), "commits_url": f"{api}/commits",
            "review_comments_url": f"{api}/comments",
            "review_comment_url": self._api("/pulls/comments{/number}"),
            "comments_url": self._api(f"/issues/{p.number}/comments"),
            "statuses_url": self._api(f"/statuses/{p.head_sha}"), "number": p.number,
            "state": p.state, "locked": False, "title": p.title, "user": self.user_json(p.user),
            "body": p.body, "labels": [], "milestone": None, "active_lock_reason": None,
            "created_at": p.created, "updated_at": p.updated,
            "closed_at": p.updated if p.state == "closed" else None,
            "merged_at": p.updated if p.merged else None, "merge_commit_sha": p.merge_commit,
            "assignee": None, "assignees": [], "requested_reviewers": [],
            "requested_teams": [], "head": end(p.head, p.head_sha),
            "base": end(p.base, self.head_of(p.base) or ""),
            "_links": {k: {"href": v} for k, v in (
                ("self", api), ("html", html), ("issue", self._api(f"/issues/{p.number}")),
                ("comments", self._api(f"/issues/{p.number}/comments")),
                ("review_comments", f"{api}/comments"),
                ("review_comment", self._api("/pulls/comments{/number}")),
                ("commits", f"{api}/commits"),
                ("statuses", self._api(f"/statuses/{p.head_sha}")))},
            "author_association": "MEMBER", "auto_merge": None, "draft": p.draft}
        if full:
            out.update({"merged": p.merged, "mergeable": None, "rebaseable": None,
                        "mergeable_state": "unknown",
                        "merged_by": self.user_json(p.merged_by) if p.merged_by else None,
                        "comments": sum(c["number"] == p.number for c in self.comments),
                        "review_comments": sum(c["number"] == p.number for c in self.inline),
                        "maintainer_can_modify": False, "commits": 1, "additions": 0,
                        "deletions": 0, "changed_files": 0})
        return out

    def issue_json(self, i: _Issue) -> dict[str, Any]:
        api = self._api(f"/issues/{i.number}")
        return {
            "id": 7000 + i.number, "node_id": f"I_{i.number}", "url": api,
            "repository_url": self._api(), "labels_url": f"{api}/labels{{/name}}",
            "comments_url": f"{api}/comments", "events_url": f"{api}/events",
            "html_url": f"{HOST}/{self.repo}/issues/{i.number}", "number": i.number,
            "state": i.state, "title": i.title, "body": i.body,
            "user": self.user_json(i.user),
            "labels": [{"id": abs(hash(n)) % 10**6, "node_id": f"L_{n}", "url": "", "name": n,
                        "description": None, "color": "ededed", "default": False}
                       for n in i.labels],
            "assignee": None, "assignees": [], "milestone": None, "locked": False,
            "active_lock_reason": None, "comments": 0, "closed_at": None,
            "created_at": i.created, "updated_at": i.updated, "author_association": "MEMBER"}

    def comment_json(self, c: dict[str, Any]) -> dict[str, Any]:
        return {"id": c["id"], "node_id": f"IC_{c['id']}",
                "url": self._api(f"/issues/comments/{c['id']}"),
                "html_url": f"{HOST}/{self.repo}/pull/{c['number']}#issuecomment-{c['id']}",
                "body": c["body"], "user": self.user_json(c["user"]),
                "created_at": c["at"], "updated_at": c["at"],
                "issue_url": self._api(f"/issues/{c['number']}"),
                "author_association": "MEMBER"}

    def review_json(self, r: dict[str, Any]) -> dict[str, Any]:
        html = f"{HOST}/{self.repo}/pull/{r['number']}#pullrequestreview-{r['id']}"
        return {"id": r["id"], "node_id": f"PRR_{r['id']}", "user": self.user_json(r["user"]),
                "body": r["body"], "state": r["state"], "commit_id": r["commit"],
                "html_url": html, "pull_request_url": self._api(f"/pulls/{r['number']}"),
                "_links": {"html": {"href": html},
                           "pull_request": {"href": self._api(f"/pulls/{r['number']}")}},
                "submitted_at": r["at"], "author_association": "MEMBER"}

    def inline_json(self, c: dict[str, Any]) -> dict[str, Any]:
        api = self._api(f"/pulls/comments/{c['id']}")
        html = f"{HOST}/{self.repo}/pull/{c['number']}#discussion_r{c['id']}"
        pr = self._api(f"/pulls/{c['number']}")
        out = {"id": c["id"], "node_id": f"PRRC_{c['id']}", "url": api, "body": c["body"],
               "diff_hunk": "@@ -1 +1 @@", "path": c["path"], "position": c["line"],
               "original_position": c["line"], "line": c["line"], "original_line": c["line"],
               "side": "RIGHT", "commit_id": c["commit"], "original_commit_id": c["commit"],
               "user": self.user_json(c["user"]), "pull_request_review_id": c["review"],
               "html_url": html, "pull_request_url": pr, "author_association": "MEMBER",
               "created_at": c["at"], "updated_at": c["at"],
               "_links": {"self": {"href": api}, "html": {"href": html},
                          "pull_request": {"href": pr}}}
        if c.get("reply_to"):
            out["in_reply_to_id"] = c["reply_to"]
        return out

    def run_json(self, r: dict[str, Any]) -> dict[str, Any]:
        api = self._api(f"/check-runs/{r['id']}")
        app = {"id": 1, "slug": "ci", "node_id": "A_1", "client_id": "Iv1.ci",
               "owner": self.user_json(self.owner), "name": "CI", "description": None,
               "external_url": HOST, "html_url": f"{HOST}/apps/ci", "created_at": STAMP,
               "updated_at": STAMP, "permissions": {}, "events": []}
        return {"id": r["id"], "node_id": f"CR_{r['id']}", "head_sha": r["head_sha"],
                "external_id": "", "url": api, "html_url": f"{HOST}/{self.repo}/runs/{r['id']}",
                "details_url": None, "status": r["status"], "conclusion": r["conclusion"],
                "started_at": STAMP, "completed_at": r["at"] if r["conclusion"] else None,
                "output": {"title": r["title"], "summary": r["summary"], "text": r["text"],
                           "annotations_count": len(r["annotations"]),
                           "annotations_url": f"{api}/annotations"},
                "name": r["name"], "check_suite": {"id": 1}, "app": app, "pull_requests": []}

    def status_json(self, s: dict[str, Any]) -> dict[str, Any]:
        return {"url": self._api(f"/statuses/{s['sha']}"), "avatar_url": None, "id": s["id"],
                "node_id": f"S_{s['id']}", "state": s["state"], "description": s["description"],
                "target_url": s["target_url"], "context": s["context"],
                "created_at": s["at"], "updated_at": s["at"], "creator": self.user_json(s["user"])}


MINIMAL_REPO = ("id", "node_id", "name", "full_name", "owner", "private", "html_url",
                 "description", "fork", "url", "archive_url", "assignees_url", "blobs_url",
                 "branches_url", "collaborators_url", "comments_url", "commits_url",
                 "compare_url", "contents_url", "contributors_url", "deployments_url",
                 "downloads_url", "events_url", "forks_url", "git_commits_url", "git_refs_url",
                 "git_tags_url", "hooks_url", "issue_comment_url", "issue_events_url",
                 "issues_url", "keys_url", "labels_url", "languages_url", "merges_url",
                 "milestones_url", "notifications_url", "pulls_url", "releases_url",
                 "stargazers_url", "statuses_url", "subscribers_url", "subscription_url",
                 "tags_url", "teams_url", "trees_url")
