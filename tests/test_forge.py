"""The forge (issue 32): GitHub through githubkit, against the stand-in on loopback whose
every exchange is checked against GitHub's OpenAPI description."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from orchestrator.board import open_board
from orchestrator.config import Config
from orchestrator.forge import AuthFailed, Forge, ForgeDown, RateLimited, open_forge
from orchestrator.forge.issues import blocked_by
from orchestrator.forge.openapi import OPERATIONS, Validator
from orchestrator.forge.standin import StandIn
from orchestrator.forge.sync import ForgeSync
from orchestrator.layout import Layout
from orchestrator.model import Status
from orchestrator.waits import CiExhausted
from tests.forge_support import (
    BOT,
    STRANGER,
    finish_check,
    person,
)
from tests.helpers import git
from tests.test_team_support import add_tasks, cli, events, tasks, team_cleanup, team_env

WRITE_FILE = 'echo "$ORCH_TASK_SUBJECT" > "$ORCH_TASK_ID.txt"'



def bot(s: StandIn) -> Forge:
    from orchestrator.forge.github import GitHubForge  # githubkit: after forge_support's skip

    return GitHubForge("acme/app", BOT, api_url=s.url)


def push_branch(repo: Path, name: str, text: str = "x") -> str:
    git(repo, "checkout", "--quiet", "-b", name)
    (repo / f"{name}.txt").write_text(text)
    git(repo, "add", f"{name}.txt")
    git(repo, "commit", "--quiet", "-m", name)
    git(repo, "checkout", "--quiet", "main")
    git(repo, "push", "--quiet", "origin", name)
    return git(repo, "rev-parse", name).strip()


def test_every_operation_we_use_matches_githubs_description(repo: Path, gh: StandIn,
                                                           validator: Validator) -> None:
    sha = push_branch(repo, "feat")
    f, p = bot(gh), person(gh)
    try:
        assert [line.ok for line in f.check()] == [True] * 4
        pr = f.open_pull(head="feat", base="main", title="T", body="B", draft=True)
        assert (pr.number, pr.head_sha, pr.base, pr.draft) == (1, sha, "main", True)
        assert f.find_pull("feat") == pr
        finish_check(gh, sha, "failure", summary="2 tests failed", annotations=[
            {"path": "app.py", "start_line": 3, "end_line": 3, "annotation_level": "failure",
             "message": "assert 1 == 2"}])
        p.rest.repos.create_commit_status("acme", "app", sha, state="success", context="lint")
        checks = {c.name: c for c in f.checks(sha)}
        assert checks["ci"].state == "failure" and "app.py:3: failure: assert 1 == 2" in \
            checks["ci"].details and checks["lint"].state == "success"
        p.rest.pulls.create_review("acme", "app", 1, event="REQUEST_CHANGES", body="fix it",
                                   comments=[{"path": "feat.txt", "line": 1, "body": "here"}])
        p.rest.issues.create_comment("acme", "app", 1, body="/orchestrator also this")
        fb = f.feedback(1)
        assert [(x.kind, x.author, x.path, x.line) for x in fb] == [
            ("changes_requested", "reviewer", None, None), ("comment", "reviewer", None, None),
            ("inline", "reviewer", "feat.txt", 1)]
        f.reply(1, fb[2].reply_to or 0, "done")
        f.comment(1, "ok")
        assert (f.can_write("reviewer"), f.can_write("stranger"), f.can_write("nobody")) == \
            (True, False, False)
        p.rest.issues.create("acme", "app", title="Bug", body="blocked by #1",
                             labels=["orchestrator"])
        [issue] = f.issues("orchestrator")
        assert (issue.title, issue.author, issue.labels) == ("Bug", "reviewer", ("orchestrator",))
        f.ready_for_review(pr)
        assert f.edit_pull(1, body="B2").draft is False
        before = f.stats.not_modified
        f.get_pull(1)
        f.get_pull(1)  # unchanged: a conditional request answered 304
        assert f.stats.not_modified == before + 1
        merged = f.merge_pull(1, sha=sha, method="merge")
        assert git(repo.parent / "remote.git", "rev-parse", "main").strip() == merged
        p.rest.checks.update("acme", "app", 1000, conclusion="success")
    finally:
        f.close()
    served = {(m.lower(), path) for m, path, _, _ in gh.served()}
    assert len(served) >= len(OPERATIONS)
    assert validator.checked >= len(OPERATIONS) and validator.problems == []


def test_the_check_catches_an_answer_that_drifted_from_github(repo: Path, gh: StandIn,
                                                              validator: Validator) -> None:
    push_branch(repo, "feat")
    f = bot(gh)
    f.open_pull(head="feat", base="main", title="T", body="B", draft=False)
    real = gh.pull_json

    def drifted(p: object, *, full: bool = True) -> dict[str, object]:
        out = real(p, full=full)  # type: ignore[arg-type]
        out["number"] = str(out["number"])  # a number as a string
        del out["head"]
        return out

    gh.pull_json = drifted  # type: ignore[method-assign]
    try:
        f.get_pull(1)
    except Exception:
        pass  # our client may refuse it too; the check is what this test is about
    finally:
        f.close()
    found = list(validator.problems)
    validator.problems.clear()
    assert found and all("GET /repos/acme/app/pulls/1" in line for line in found)
    assert any("head" in line for line in found) and any("number" in line for line in found)


def test_forge_check_says_what_works_and_what_to_fix(repo: Path, gh: StandIn) -> None:
    res = cli(repo, "forge", "check")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "ok  token: works, as orch-bot", "ok  repository: acme/app, default branch main",
        "ok  push rights: yes", "ok  checks readable: check runs and statuses"]
    gh.permissions["orch-bot"] = "read"
    res = cli(repo, "forge", "check")
    assert res.returncode == 1 and "FAIL push rights: the token cannot push" in res.stdout
    gh.revoke(BOT)
    res = cli(repo, "forge", "check")
    assert res.returncode == 1
    assert res.stdout.startswith("FAIL token: GitHub refused the token (401 Bad credentials)")
    assert BOT not in res.stdout + res.stderr and "Traceback" not in res.stderr


def test_no_forge_or_no_token_is_one_line(repo: Path, tmp_path: Path) -> None:
    res = cli(repo, "forge", "check")
    assert res.returncode == 1 and "no forge: set [forge] kind" in res.stderr
    (repo / "orchestrator.toml").write_text('[forge]\nkind = "github"\nrepo = "acme/app"\n')
    env = {k: v for k, v in team_env().items() if k not in ("GITHUB_TOKEN", "GH_TOKEN")}
    env["PATH"] = "/usr/bin:/bin"  # no gh
    res = cli(repo, "forge", "check", env=env)
    assert res.returncode == 1 and "no forge token: set [forge] token_file" in res.stderr
    assert "Traceback" not in res.stderr


def test_rate_limit_outage_and_revoked_token_are_errors_of_their_own(repo: Path,
                                                                    gh: StandIn) -> None:
    f = bot(gh)
    try:
        gh.rate_limit(1, status=429, retry_after=7)
        with pytest.raises(RateLimited) as rl:
            f.get_pull(1)
        assert rl.value.retry_after == 7
        gh.rate_limit(1, status=403, retry_after=3)
        with pytest.raises(RateLimited):
            f.issues("orchestrator")
        gh.down = True
        with pytest.raises(ForgeDown, match="GitHub is failing"):
            f.issues("orchestrator")
        gh.down = False
        gh.revoke(BOT)
        with pytest.raises(AuthFailed, match="revoked"):
            f.issues("orchestrator")
    finally:
        f.close()
    gh.stop()
    f = bot(gh)
    try:
        with pytest.raises(ForgeDown, match="cannot be reached"):
            f.issues("orchestrator")
    finally:
        f.close()


def test_blocked_by_is_read_from_an_issue_body() -> None:
    assert blocked_by("Blocked by #12 and #3.\nblocked-by: #4, #5") == [12, 3, 4, 5]
    assert blocked_by("not blocked, see #7") == []
    assert blocked_by("blocked by #1" + "x" * 30_000 + "blocked by #2") == [1]


def test_a_pull_request_per_kept_task_stacked_retargeted_discarded(repo: Path,
                                                                  gh: StandIn) -> None:
    [first] = add_tasks(repo, 1)
    with open_board(Layout.at(repo)) as board:
        second = board.add("Builds on the first", description="second", blocked_by=[first.id])
        third = board.add("Not wanted", description="third")
    with team_cleanup(repo):
        res = cli(repo, "up", "--burst", "-n", "1", "--backend", "command", "--command",
                  WRITE_FILE)
    assert res.returncode == 0, res.stdout + res.stderr
    by_id = {t.id: t for t in tasks(repo)}
    assert by_id[second.id].base == by_id[first.id].branch  # stacked
    out = sync(repo)
    assert sorted(out.opened) == sorted([first.id, second.id, third.id])
    pulls = {p.head: p for p in gh.pulls.values()}
    t1, t2 = (by_id[first.id], by_id[second.id])
    assert t1.branch and t2.branch
    assert pulls[t1.branch].base == "main" and pulls[t2.branch].base == t1.branch
    body = pulls[t1.branch].body
    assert "write file 0" in body and f"orchestrator show {first.id}" in body
    assert "**Changes:** 1 file changed" in body and "**Cost:** $0.00" in body
    assert pulls[t1.branch].title == f"Task number 0 ({first.id})"
    assert sync(repo).opened == []  # nothing changed: nothing opened again
    # the blocker is merged on the forge: merged here, cleaned up, the stacked one retargeted
    person(gh).rest.pulls.merge("acme", "app", pulls[t1.branch].number)
    out = sync(repo)
    assert out.merged == [first.id]
    now = {t.id: t for t in tasks(repo)}
    assert now[first.id].status is Status.MERGED
    assert not Path(t1.worktree or "").exists()
    assert git(repo, "rev-parse", "main") == git(repo.parent / "remote.git", "rev-parse", "main")
    assert (repo / f"{first.id}.txt").exists()  # the main checkout was brought up to date
    assert pulls[t2.branch].base == "main"
    merged_ev = [e for e in events(repo, "merged") if e["task"] == first.id]
    assert merged_ev and merged_ev[0]["strategy"] == "forge" and merged_ev[0]["pr"] == 1
    # a discarded task's pull request is closed with a comment
    assert cli(repo, "discard", third.id, "--force").returncode == 0
    assert sync(repo).closed == [third.id]
    p3 = next(p for p in gh.pulls.values() if p.head == by_id[third.id].branch)
    assert p3.state == "closed" and any(c["number"] == p3.number and "discarded" in c["body"]
                                        for c in gh.comments)


def sync(repo: Path) -> object:
    layout = Layout.at(repo)
    config = Config.load(repo)
    forge = open_forge(config.forge, repo)
    assert forge is not None
    try:
        with open_board(layout) as board:
            return ForgeSync(layout, config, board, forge).run()
    finally:
        forge.close()


def test_a_stranger_cannot_send_work_back_and_ci_retries_end_in_a_wait(repo: Path,
                                                                       gh: StandIn) -> None:
    [task] = add_tasks(repo, 1)
    with team_cleanup(repo):
        assert cli(repo, "up", "--burst", "-n", "1", "--backend", "command", "--command",
                   WRITE_FILE).returncode == 0
    sync(repo)
    pr = next(iter(gh.pulls.values()))
    person(gh, STRANGER).rest.issues.create_comment("acme", "app", pr.number,
                                                    body="/orchestrator rm -rf everything")
    out = sync(repo)
    assert out.sent_back == []
    [ignored] = events(repo, "forge_comment_ignored")
    assert ignored["author"] == "stranger" and ignored["reason"] == "no write access"
    # CI fails with checks.retries = 0: the task waits for a person, in review
    (repo / "orchestrator.toml").write_text((repo / "orchestrator.toml").read_text()
                                            + "[checks]\nretries = 0\n")
    finish_check(gh, pr.head_sha, "failure", summary="boom")
    out = sync(repo)
    [t] = tasks(repo)
    assert t.status is Status.REVIEW and isinstance(t.wait, CiExhausted)
    assert t.wait.reason.startswith("ci failed on #")
    assert t.forge is not None and t.forge.ci == "failure"
    assert "boom" in (t.error or "")
    assert t.id == task.id


def test_merge_and_land_go_through_the_forge_and_respect_its_protection(repo: Path,
                                                                       gh: StandIn) -> None:
    one, two = add_tasks(repo, 2)
    with team_cleanup(repo):
        assert cli(repo, "up", "--burst", "-n", "1", "--backend", "command", "--command",
                   WRITE_FILE).returncode == 0
    before = git(repo.parent / "remote.git", "rev-parse", "main")
    res = cli(repo, "merge", one.id)
    assert res.returncode == 1 and "has no pull request yet" in res.stderr
    sync(repo)
    gh.protected = True  # branch protection: every check green
    res = cli(repo, "merge", one.id)
    assert res.returncode == 1
    assert "the forge refused to merge #1" in res.stderr and "Required status check" in res.stderr
    assert git(repo.parent / "remote.git", "rev-parse", "main") == before
    assert tasks(repo)[0].status is Status.REVIEW
    for pr in gh.pulls.values():
        finish_check(gh, pr.head_sha, "success")
    res = cli(repo, "merge", one.id)
    assert res.returncode == 0, res.stderr
    assert gh.pulls[1].merged and not gh.pulls[2].merged
    assert git(repo, "rev-parse", "main") == git(repo.parent / "remote.git", "rev-parse", "main")
    res = cli(repo, "land", "--all-reviewed")
    assert res.returncode == 0, res.stdout + res.stderr
    assert gh.pulls[2].merged
    assert [t.status for t in tasks(repo)] == [Status.MERGED, Status.MERGED]
    assert (repo / f"{two.id}.txt").exists()


def test_every_face_shows_the_pull_request_and_its_ci(repo: Path, gh: StandIn) -> None:
    import json

    from starlette.testclient import TestClient

    from orchestrator.mcp.server import _summary
    from orchestrator.ui.app import create_app
    from orchestrator.ui.security import Guard

    [task] = add_tasks(repo, 1)
    with team_cleanup(repo):
        assert cli(repo, "up", "--burst", "-n", "1", "--backend", "command", "--command",
                   WRITE_FILE).returncode == 0
    sync(repo)
    (repo / "orchestrator.toml").write_text((repo / "orchestrator.toml").read_text()
                                            + "[checks]\nretries = 0\n")
    finish_check(gh, gh.pulls[1].head_sha, "failure")
    sync(repo)
    url = "https://github.example/acme/app/pull/1"
    listed = cli(repo, "list").stdout
    assert "pull request" in listed.splitlines()[0] and "#1 CI failure" in listed
    shown = cli(repo, "show", task.id).stdout
    assert f"pull request: #1 CI failure  {url}" in shown
    assert "waiting for CI failed on" in shown and f"orchestrator retry {task.id}" in shown
    reviewed = cli(repo, "review").stdout
    assert "#1 CI failure" in reviewed
    [row] = json.loads(cli(repo, "review", "--json").stdout)
    assert row["pull_request"] == {"number": 1, "url": url, "state": "open", "ci": "failure",
                                   "issue": None, "problem": None}
    [t] = tasks(repo)
    assert _summary(t, {})["pull_request"]["ci"] == "failure"  # MCP list_tasks / get_task
    app = create_app(Layout.at(repo), Config.load(repo), Guard("127.0.0.1", 8321))
    with TestClient(app, base_url="http://127.0.0.1:8321") as client:
        page = client.get(f"/task/{task.id}").text
        board = client.get("/").text
    assert f'<a href="{url}" rel="noopener noreferrer" target="_blank">#1</a>' in page
    assert "CI failure" in page and "#1</a>" in board
    # a link that is not http(s) is shown as a number, never as a link
    assert t.forge is not None
    with open_board(Layout.at(repo)) as b:
        b.edit(task.id, actor="test",
               forge=msgspec.structs.replace(t.forge, url="javascript:alert(1)"))
    with TestClient(create_app(Layout.at(repo), Config.load(repo), Guard("127.0.0.1", 8321)),
                    base_url="http://127.0.0.1:8321") as client:
        page = client.get(f"/task/{task.id}").text
    assert "javascript:" not in page and "#1 <span" in page


def test_a_draft_is_marked_ready_when_its_checks_pass(repo: Path, gh: StandIn) -> None:
    (repo / "orchestrator.toml").write_text(
        (repo / "orchestrator.toml").read_text().replace("[forge]\n", "[forge]\ndraft = true\n"))
    add_tasks(repo, 1)
    with team_cleanup(repo):
        assert cli(repo, "up", "--burst", "-n", "1", "--backend", "command", "--command",
                   WRITE_FILE).returncode == 0
    res = cli(repo, "forge", "sync")
    assert res.returncode == 0 and res.stdout == "opened: task_001\n", res.stderr
    assert gh.pulls[1].draft
    finish_check(gh, gh.pulls[1].head_sha, "success")
    assert cli(repo, "forge", "sync").stdout == "nothing to do\n"
    assert not gh.pulls[1].draft
    assert [e["pr"] for e in events(repo, "pr_ready")] == [1]


def test_a_pull_request_already_open_for_the_branch_is_adopted(repo: Path, gh: StandIn) -> None:
    [task] = add_tasks(repo, 1)
    with team_cleanup(repo):
        assert cli(repo, "up", "--burst", "-n", "1", "--backend", "command", "--command",
                   WRITE_FILE).returncode == 0
    [t] = tasks(repo)
    assert t.branch
    git(repo, "push", "--quiet", "origin", t.branch)
    f = bot(gh)
    try:  # opened before a crash kept the link from the board
        f.open_pull(head=t.branch, base="main", title="lost", body="", draft=False)
    finally:
        f.close()
    assert sync(repo).opened == [task.id]
    assert list(gh.pulls) == [1] and tasks(repo)[0].forge.pr == 1  # type: ignore[union-attr]


def test_a_token_from_a_file_is_masked_and_never_given_to_agents(tmp_path: Path) -> None:
    from orchestrator.forge.github import find_token
    from orchestrator.secrets import redact, safe_env

    token = "github_pat_11ABCDEFG0123456789_file"
    (tmp_path / "tok").write_text(token + "\n")
    assert find_token("tok", tmp_path, environ={}) == token
    assert redact(f"push failed for {token}") == "push failed for ***"
    env = safe_env({"GITHUB_TOKEN": "ghp_x" * 4, "GH_TOKEN": "ghp_y" * 4, "PATH": "/bin"})
    assert env == {"PATH": "/bin"}


def test_the_pull_request_link_travels_on_the_postgresql_board(tmp_path: Path,
                                                               pg_board_url: str) -> None:
    from orchestrator.model import ForgeLink
    from tests.test_pg_board import board_at

    link = ForgeLink(pr=7, url="https://github.example/acme/app/pull/7", pushed="ab" * 20,
                     base="main", ci="failure", ci_rounds=1, seen=1234, issue=3, state="open",
                     note="a line")
    with board_at(tmp_path, pg_board_url) as b:
        t = b.add("from an issue", forge=ForgeLink(issue=3))
        b.edit(t.id, actor="forge", forge=link)
    with board_at(tmp_path, pg_board_url, machine="m2") as other:
        assert other.get(t.id).forge == link


def test_a_mention_sends_work_back_and_a_secret_never_reaches_the_forge(
        repo: Path, gh: StandIn) -> None:
    secret = "sk-live-forge-0123456789abcdef"
    (repo / "orchestrator.toml").write_text((repo / "orchestrator.toml").read_text().replace(
        "[forge]\n", '[forge]\nmention = "@acme-bot"\n'))
    with open_board(Layout.at(repo)) as b:
        task = b.add("Uses the key", description=f"the key is {secret}")
    with team_cleanup(repo):
        assert cli(repo, "up", "--burst", "-n", "1", "--backend", "command", "--command",
                   WRITE_FILE).returncode == 0
    import os

    os.environ["MY_SERVICE_API_KEY"] = secret  # a secret of this process's environment
    try:
        sync(repo)
        assert secret not in gh.pulls[1].body and "the key is ***" in gh.pulls[1].body
        person(gh).rest.issues.create_comment("acme", "app", 1,
                                              body="@ACME-bot please rename the file")
        out = sync(repo)
    finally:
        del os.environ["MY_SERVICE_API_KEY"]
    assert out.sent_back == [task.id]
    assert "reviewer: @ACME-bot please rename the file" in tasks(repo)[0].feedback[-1]
