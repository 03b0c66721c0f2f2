"""The web board in a real browser (Debian's chromium driven by Playwright) over a real
`orchestrator ui` and a real team in a temporary repository.

One team, one UI and one browser for the module; the flows run in order on the same
board: add on the page → claimed → in progress → review without a reload; review →
diff → merge; retry with feedback → a new run sees it; discard of a dirty worktree
refused with the reason; a plan request in Needs you approved from the page; a budget
stop raised on the page.
Every page visited is saved as a screenshot under the test's temp folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.board import init_repo, open_board
from orchestrator.layout import Layout
from orchestrator.model import Status
from tests.helpers import git, make_repo
from tests.test_team_support import start, team_cleanup, team_env, wait_until
from tests.test_ui_support import CHROMIUM, CHROMIUM_ARGS, Ui, running_ui, wait_http_ready

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM) or not shutil.which("git"),
                                reason="needs /usr/bin/chromium (scripts/test-deps)")

# The command agent: a short pause (so "in progress" is seen), then a file named after the
# task, and the prompt it got (a retry's feedback shows there). A "costly" task reports
# $0.50 at once.
AGENT = 'case "$ORCH_TASK_SUBJECT" in costly*) echo \'{"cost_usd": 0.5}\' > "$ORCH_USAGE_FILE";; ' \
        'esac; sleep 2.5; echo "$ORCH_TASK_SUBJECT" > "$ORCH_TASK_ID.txt"; ' \
        'printf "%s" "$ORCH_PROMPT" > prompt.txt'
LEAK_OK_THREADS = ("asyncio_",)
LEAK_OK_PROCESSES = ("/usr/lib/chromium/",)
"""The browser driver's event loop starts executor threads (to write screenshots), and
chromium starts renderer processes (and keeps a spare one); they live as long as the
module's browser, which is closed at the end of the module: the leak check lets them be."""
PLAN_SCRIPT = [[{"tool": "submit_plan", "args": {"plan": "1. write plan.txt"}}],
               [{"tool": "write", "args": {"file_path": "plan.txt", "content": "planned\n"}}],
               "done"]


@dataclass
class Env:
    repo: Path
    ui: Ui
    page: Any
    shots: Path

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def task(self, task_id: str) -> Any:
        with open_board(Layout.at(self.repo)) as board:
            return board.get(task_id)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    base = tmp_path_factory.mktemp("ui-browser")
    repo = make_repo(base / "repo")
    init_repo(repo)
    shots = base / "screenshots"
    shots.mkdir()
    with team_cleanup(repo), contextlib.ExitStack() as stack:
        team = start(repo, "-n", "2", "--command", AGENT, env=team_env())
        stack.callback(_stop, team)
        ui = stack.enter_context(running_ui(repo))
        wait_http_ready(ui)
        pw = stack.enter_context(sync_api.sync_playwright())
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        stack.callback(browser.close)
        page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
        page.set_default_timeout(45_000)
        yield Env(repo, ui, page, shots)


def _stop(team: Any) -> None:
    team.terminate()
    try:
        team.communicate(timeout=30)
    except Exception:
        team.kill()
        team.communicate()


def card(e: Env, column: str, task_id: str) -> str:
    return f"#cards-{column} #card-{task_id}"


def add_on_page(e: Env, subject: str) -> str:
    e.page.click("#add-box summary")
    e.page.fill("#add-form input[name=subject]", subject)
    e.page.click("#add-form button[type=submit]")
    e.page.wait_for_selector(f"#toast:has-text('{subject}')")
    text = e.page.inner_text("#toast")
    return text.split()[1].rstrip(":")


def test_add_on_the_page_then_the_card_moves_live_to_review_and_merges(env: Env) -> None:
    e = env
    e.page.goto(e.ui.url)
    e.page.wait_for_selector("#live.on")
    e.page.evaluate("window.__same_page = 1")  # a reload would lose it
    task_id = add_on_page(e, "write the greeting")
    e.page.wait_for_selector(card(e, "pending", task_id) + ", "
                             + card(e, "in_progress", task_id))
    e.page.wait_for_selector(card(e, "in_progress", task_id))
    e.shot("board-in-progress")
    e.page.wait_for_selector(card(e, "review", task_id))
    assert e.page.evaluate("window.__same_page") == 1
    assert e.page.inner_text("#count-review") == "1"
    e.shot("board-review")

    e.page.click(f"{card(e, 'review', task_id)} a.button")
    e.page.wait_for_selector("table.files")
    assert f"{task_id}.txt" in e.page.inner_text("table.files")
    assert "write the greeting" in e.page.inner_text("table.diff")
    assert "merges cleanly into main" in e.page.inner_text("#mergeable")
    e.page.click("a:has-text('side by side')")
    e.page.wait_for_selector("table.diff.split")
    e.shot("review-split")
    e.page.select_option("#merge-form select[name=strategy]", "squash")
    e.page.click("#merge-form button[type=submit]")
    e.page.wait_for_selector("#action-result:has-text('merged')")
    assert e.task(task_id).status is Status.MERGED
    assert (e.repo / f"{task_id}.txt").read_text() == "write the greeting\n"
    assert git(e.repo, "log", "-1", "--format=%s", "main")  # main moved
    e.page.goto(e.ui.url)
    e.page.wait_for_selector(card(e, "merged", task_id))
    e.shot("board-merged")


def test_retry_with_feedback_runs_again_and_a_dirty_discard_is_refused(env: Env) -> None:
    e = env
    e.page.goto(e.ui.url)
    e.page.wait_for_selector("#live.on")
    task_id = add_on_page(e, "second thing")
    e.page.wait_for_selector(card(e, "review", task_id))
    e.page.goto(f"{e.ui.base}/task/{task_id}/review")
    e.page.fill(".retry-form textarea[name=feedback]", "Please also say goodbye")
    e.page.click(".retry-form button[type=submit]")
    e.page.wait_for_selector("#action-result:has-text('pending again')")
    e.page.goto(e.ui.url)
    e.page.wait_for_selector(card(e, "review", task_id) + "[data-status=review]")
    task = wait_until(lambda: (t := e.task(task_id)).status is Status.REVIEW and t, 60)
    prompt = (Path(task.worktree) / "prompt.txt").read_text()
    assert "Please also say goodbye" in prompt and task.feedback == ["Please also say goodbye"]

    e.page.goto(f"{e.ui.base}/task/{task_id}")
    assert "Please also say goodbye" in e.page.inner_text("body")
    assert "task_retried" in e.page.inner_text("table.history")
    assert f"orchestrator enter {task_id}" in e.page.inner_text("#enter-cmd")
    e.shot("task")

    (Path(task.worktree) / "notes.txt").write_text("uncommitted work\n")
    e.page.goto(f"{e.ui.base}/task/{task_id}/review")
    e.page.click("#discard-form button[type=submit]")
    result = e.page.wait_for_selector("#action-result.bad")
    assert "uncommitted" in result.inner_text() and "notes.txt" in result.inner_text()
    assert e.task(task_id).status is Status.REVIEW
    assert (Path(task.worktree) / "notes.txt").exists()
    e.shot("review-discard-refused")


def test_a_plan_request_is_approved_from_needs_you(env: Env) -> None:
    e = env
    with open_board(Layout.at(e.repo)) as board:
        task = board.add("planned work", backend="scripted", plan_first=True,
                         metadata={"script": PLAN_SCRIPT})
    e.page.goto(e.ui.url)
    e.page.wait_for_selector(card(e, "waiting", task.id))
    wait_until(lambda: e.page.title().startswith("("), 10, "a count in the title")
    follower = e.page.context.new_page()  # the task page, following the transcript
    follower.goto(f"{e.ui.base}/task/{task.id}")
    follower.wait_for_selector("#transcript .entry:has-text('submit_plan')")
    e.page.goto(f"{e.ui.base}/needs")
    item = e.page.wait_for_selector(f".request:has-text('{task.id}')")
    assert "write plan.txt" in item.inner_text()
    e.shot("needs-you")
    before = e.page.title()
    item.query_selector("input[name=message]").fill("go ahead")
    item.query_selector("button[value=approve]").click()
    e.page.wait_for_selector("#toast:has-text('approved')")
    done = wait_until(lambda: (t := e.task(task.id)).status is Status.REVIEW and t, 60)
    assert (Path(done.worktree) / "plan.txt").read_text() == "planned\n"
    assert done.plan == "1. write plan.txt"
    wait_until(lambda: e.page.title() != before, 10, "the count in the title to drop")
    follower.wait_for_selector("#transcript .entry:has-text('tool call: write')")
    follower.screenshot(path=str(e.shots / "task-transcript.png"), full_page=True)
    follower.close()


def test_a_budget_stop_is_raised_on_the_page_and_the_task_reaches_review(env: Env) -> None:
    e = env
    with open_board(Layout.at(e.repo)) as board:  # each run of it spends $0.50
        task = board.add("costly work", budget={"usd": 0.3})
    e.page.goto(e.ui.url)
    mark = e.page.wait_for_selector(card(e, "waiting", task.id) + " .mark")
    assert "budget" in mark.inner_text() and "permission" not in mark.inner_text()
    e.shot("board-budget")
    e.page.goto(f"{e.ui.base}/task/{task.id}")
    assert "budget reached: $0.50 of $0.30 spent" in e.page.inner_text(".wait")
    assert e.page.query_selector(".answer-form") is None  # nothing to approve
    form = e.page.wait_for_selector(".wait-form[data-action=resume]")
    form.query_selector("input[name=budget_usd]").fill("2")
    e.shot("task-budget")
    form.query_selector("button[type=submit]").click()
    e.page.wait_for_selector("#toast:not([hidden])")
    assert "is pending now" in e.page.inner_text("#toast"), e.page.inner_text("#toast")
    done = wait_until(lambda: (t := e.task(task.id)).status is Status.REVIEW and t, 60)
    assert done.budget.usd == 2.0 and done.usage.cost_usd == 1.0 and done.wait is None


def test_drag_a_card_onto_cancelled(env: Env) -> None:
    e = env
    with open_board(Layout.at(e.repo)) as board:
        blocker = board.add("never done")
        board.cancel(blocker.id)
        task = board.add("waits forever", blocked_by=[blocker.id])
    page = e.page.context.new_page()
    page.goto(e.ui.url)
    page.wait_for_selector("#live.on")
    page.drag_and_drop(card(e, "pending", task.id), "#col-closed")
    page.wait_for_selector(card(e, "closed", task.id))
    assert e.task(task.id).status is Status.CANCELLED
    page.goto(f"{e.ui.base}/team")
    assert "daemon: running" in page.inner_text("#daemon")
    assert {"alice", "bob"} <= set(page.inner_text("table.team").split())
    page.screenshot(path=str(e.shots / "team.png"), full_page=True)
    page.goto(f"{e.ui.base}/task/task_404")
    assert "no task task_404" in page.inner_text("#error-message")
    page.screenshot(path=str(e.shots / "error.png"))
    page.close()
