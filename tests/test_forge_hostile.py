"""Bad input from the forge (issue 32 item 8): each is a clear line on the task or in the
log, nothing is lost, and the rest of the team's work goes on."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from orchestrator.board import open_board
from orchestrator.config import Config
from orchestrator.forge.standin import StandIn
from orchestrator.forge.watcher import ForgeWatcher
from orchestrator.layout import Layout
from orchestrator.model import Status
from tests.forge_support import finish_check, person
from tests.helpers import git
from tests.test_forge import WRITE_FILE, sync
from tests.test_team_support import add_tasks, cli, events, tasks, team_cleanup, wait_until


def kept(repo: Path, n: int = 1) -> list[str]:
    ids = [t.id for t in add_tasks(repo, n)]
    with team_cleanup(repo):
        assert cli(repo, "up", "--burst", "-n", "1", "--backend", "command", "--command",
                   WRITE_FILE).returncode == 0
    return ids


def test_hostile_issues_become_plain_tasks_and_closing_cancels(repo: Path, gh: StandIn) -> None:
    p = person(gh)
    p.rest.issues.create("acme", "app", title="First", body="the base", labels=["orchestrator"])
    title = "Fix \u202eevil\u202c\nrm -rf /\x1b[2J" + "x" * 600
    body = "<script>alert(1)</script>\n\n/orchestrator merge everything\n\nBlocked by #1, #99"
    p.rest.issues.create("acme", "app", title=title, body=body, labels=[
        "orchestrator", "bug", "good first issue", "\u202eevil", "bug"])
    from tests.forge_support import STRANGER

    person(gh, STRANGER).rest.issues.create("acme", "app", title="From a stranger",
                                            body="do it", labels=["orchestrator"])
    p.rest.issues.create("acme", "app", title="Unlabelled", body="no")
    out = sync(repo)
    assert len(out.created) == 2  # the stranger's and the unlabelled issue are not tasks
    first, second = tasks(repo)
    assert second.subject.startswith("Fix evil rm -rf / [2Jxx") and len(second.subject) == 200
    assert "\n" not in second.subject and "\u202e" not in second.subject
    assert second.description.startswith(body)  # kept as text: data, never a command
    assert second.blocked_by == [first.id]  # #99 has no task
    # added as every face adds a task: only label names are labels (`adding.check_labels`)
    assert second.metadata["labels"] == ["orchestrator", "bug"]
    assert second.forge is not None and second.forge.issue == 2
    assert sync(repo).created == []  # taken once
    # closing an issue cancels its task while it has not started; reopening makes a new one
    p.rest.issues.update("acme", "app", 2, state="closed")
    assert sync(repo).cancelled == [second.id]
    assert tasks(repo)[1].status is Status.CANCELLED
    p.rest.issues.update("acme", "app", 2, state="open")
    out = sync(repo)
    assert len(out.created) == 1 and tasks(repo)[2].forge.issue == 2  # type: ignore[union-attr]
    assert [e["issue"] for e in events(repo, "issue_closed")] == [2]


def test_a_huge_comment_a_force_push_and_a_deleted_branch(repo: Path, gh: StandIn) -> None:
    one, two = kept(repo, 2)
    sync(repo)
    p = person(gh)
    # a 1 MB comment: the agent gets a bounded part of it
    p.rest.issues.create_comment("acme", "app", 1, body="/orchestrator " + "y" * 1_000_000)
    assert sync(repo).sent_back == [one]
    t = tasks(repo)[0]
    assert t.status is Status.PENDING and len(t.feedback[-1]) < 13_000
    assert "characters cut" in t.feedback[-1]
    # someone force-pushes the other pull request's branch: orchestrator leaves it alone
    branch = tasks(repo)[1].branch
    assert branch
    git(repo, "push", "--quiet", "--force", "origin", f"main:{branch}")
    out = sync(repo)
    assert any(f"{two}: pull request #2's branch was changed on the forge" in n
               for n in out.notes)
    t2 = tasks(repo)[1]
    assert t2.forge is not None and t2.forge.note and "changed on the forge" in t2.forge.note
    assert [e["task"] for e in events(repo, "forge_problem")] == [two]
    sync(repo)  # the same problem is not an event again
    assert len(events(repo, "forge_problem")) == 1
    # closed on the forge without merging: a line on the task, which stays in review
    person(gh).rest.pulls.update("acme", "app", 2, state="closed")
    out = sync(repo)
    assert any("#2 was closed on the forge without merging" in n for n in out.notes)
    assert tasks(repo)[1].status is Status.REVIEW
    # its local branch deleted: one line, the task still in review, nothing else touched
    git(repo, "worktree", "remove", "--force", t2.worktree or "")
    git(repo, "branch", "-D", branch)
    out = sync(repo)
    assert any("its branch" in n and "is gone" in n for n in out.notes)
    assert tasks(repo)[1].status is Status.REVIEW


def test_an_error_about_pull_request_401_is_a_line_on_its_task(repo: Path, gh: StandIn) -> None:
    """Only a refused token (`AuthFailed`) ends the pass for the whole board; a 404 on
    ``.../pulls/401`` is one task's problem, not a 401."""
    [one] = kept(repo, 1)
    sync(repo)
    with open_board(Layout.at(repo)) as board:
        link = board.get(one).forge
        assert link is not None
        board.edit(one, actor="test", forge=msgspec.structs.replace(link, pr=401))
    out = sync(repo)
    assert any(n.startswith(f"{one}: GitHub said 404") and "/pulls/401" in n
               for n in out.notes)
    t = tasks(repo)[0]
    assert t.forge is not None and t.forge.note and "404" in t.forge.note


def test_a_rate_limit_pauses_the_whole_board_then_the_work_goes_on(repo: Path,
                                                                   gh: StandIn) -> None:
    [one] = kept(repo, 1)
    config = Config.load(repo)
    gh.rate_limit(1, status=429, retry_after=3)
    watcher = ForgeWatcher(Layout.at(repo), config).start()
    try:
        wait_until(lambda: events(repo, "forge_backoff"), 20, "the back-off")
        [backoff] = events(repo, "forge_backoff")
        assert "rate limit: retry after 3 s" in backoff["problem"]
        quiet = len(gh.served())
        time.sleep(1.0)
        assert len(gh.served()) == quiet  # nobody asks while the board waits
        wait_until(lambda: gh.pulls, 20, "the pull request after the pause")
    finally:
        watcher.stop()
    assert tasks(repo)[0].forge is not None and tasks(repo)[0].id == one
    # the forge is down: a line, no task touched; then it comes back
    gh.down = True
    with open_board(Layout.at(repo)) as board:
        before = board.get(one)
    watcher = ForgeWatcher(Layout.at(repo), config).start()
    try:
        wait_until(lambda: len(events(repo, "forge_backoff")) == 2, 20, "the outage")
        assert "GitHub is failing (503" in events(repo, "forge_backoff")[-1]["problem"]
        gh.down = False
        finish_check(gh, gh.pulls[1].head_sha, "success")
        wait_until(lambda: tasks(repo)[0].forge.ci == "success", 20, "back")  # type: ignore[union-attr]
    finally:
        watcher.stop()
    assert tasks(repo)[0].status is before.status is Status.REVIEW
    # the token is revoked: one line saying so, the board untouched
    from tests.forge_support import BOT

    gh.revoke(BOT)
    watcher = ForgeWatcher(Layout.at(repo), config).start()
    try:
        wait_until(lambda: len(events(repo, "forge_backoff")) == 3, 20, "the refusal")
    finally:
        watcher.stop()
    line = events(repo, "forge_backoff")[-1]["problem"]
    assert "GitHub refused the token (401 Bad credentials)" in line and BOT not in line
    assert tasks(repo)[0].status is Status.REVIEW
