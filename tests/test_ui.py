"""The web board without a browser: its security rules against a real `orchestrator ui`
process, and the pieces (diff view, cards, labels) on their own."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.adding import check_labels
from orchestrator.board import init_repo, open_board
from orchestrator.budget import money
from orchestrator.errors import InvalidInput
from orchestrator.layout import Layout
from orchestrator.model import Status, Usage
from orchestrator.ui import diffview
from orchestrator.ui.security import Guard, is_loopback
from tests.helpers import make_repo
from tests.test_team_support import team_env
from tests.test_ui_support import Ui, running_ui, wait_http_ready

SECRET = "sk-live-0123456789abcdef"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Ui, Path]]:
    repo = make_repo(tmp_path_factory.mktemp("ui") / "repo")
    layout = init_repo(repo)
    with open_board(layout) as board:
        task = board.add("leaky task", description="uses the key")
    # A transcript line written by a process that did not know the value was a secret.
    layout.logs.mkdir(parents=True, exist_ok=True)
    (layout.logs / f"{task.id}.jsonl").write_text(json.dumps(
        {"ts": "2026-01-01T00:00:00Z", "kind": "output", "text": f"key is {SECRET}"}) + "\n")
    with running_ui(repo, env=team_env(my_api_key=SECRET)) as ui:
        wait_http_ready(ui)
        yield ui, repo


def test_a_change_needs_the_token_and_the_boards_own_origin(served: tuple[Ui, Path]) -> None:
    ui, repo = served
    token = ui.token()
    body = {"subject": "from a test", "labels": "web test"}
    assert ui.post("/api/tasks", body)[0] == 403  # no token
    assert ui.post("/api/tasks", body, token="wrong")[0] == 403
    status, res = ui.post("/api/tasks", body, token=token, origin="http://evil.example")
    assert status == 403 and "origin" in res["text"]
    assert ui.post("/api/tasks", body, token=token, origin=None)[0] == 403
    subjects = [t.subject for t in open_board(Layout.at(repo)).list()]
    assert "from a test" not in subjects
    status, res = ui.post("/api/tasks", body, token=token)
    assert status == 200, res
    with open_board(Layout.at(repo)) as board:
        added = board.get(res["id"])
    assert added.subject == "from a test" and added.metadata["labels"] == ["web", "test"]


def test_another_host_name_is_refused(served: tuple[Ui, Path]) -> None:
    ui, _ = served
    status, headers, _ = ui.request("GET", "/")
    assert status == 200 and headers["x-frame-options"] == "DENY"
    assert "default-src 'self'" in headers["content-security-policy"]
    status, _, text = ui.request("GET", "/", headers={"Host": "evil.example:80"})
    assert status == 421 and "evil.example" in text


def test_bad_ids_and_paths_are_a_404_with_a_message(served: tuple[Ui, Path]) -> None:
    ui, _ = served
    for path, message in (("/task/task_999", "no task task_999"),
                          ("/task/..%2F..%2Fetc%2Fpasswd", "nothing at /task/../../etc"),
                          ("/task/-1", "not a task id"),
                          ("/task/1;rm/review", "not a task id"),
                          ("/nowhere", "nothing at /nowhere"),
                          ("/column/bogus", "no column")):
        status, _, html = ui.request("GET", path)
        assert status == 404, path
        assert message in html.replace("&#39;", "'") and "Traceback" not in html, path
    token = ui.token()
    status, res = ui.post("/api/task/task_999/merge", {}, token=token)
    assert status == 404 and res == {"error": "no task task_999"}
    status, res = ui.post("/api/task/task_001/explode", {}, token=token)
    assert status == 404 and "no action" in res["error"]
    status, res = ui.post("/api/task/task_001/retry", [1], token=token)
    assert status == 400 and "JSON object" in res["error"]
    status, res = ui.post("/api/tasks", {"subject": "x", "blocked_by": "task_404"}, token=token)
    assert status == 404 and "unknown blocker task_404" in res["error"]


def test_a_secret_in_a_transcript_never_reaches_the_page(served: tuple[Ui, Path]) -> None:
    ui, _ = served
    status, _, html = ui.request("GET", "/task/task_001")
    assert status == 200 and "key is ***" in html
    assert SECRET not in html
    for path in ("/", "/needs", "/team"):
        assert SECRET not in ui.request("GET", path)[2]


def test_off_loopback_every_request_needs_the_token(repo: Path) -> None:
    init_repo(repo)
    with running_ui(repo, "--host", "0.0.0.0") as ui:
        wait_http_ready(ui)
        assert "?token=" in ui.url
        token = ui.url.split("token=")[1]
        status, _, text = ui.request("GET", "/")
        assert status == 401 and "token" in text
        assert ui.request("GET", "/task/1")[0] == 401
        assert ui.request("GET", "/", headers={"Cookie": "orch_ui_token=nope"})[0] == 401
        status, headers, _ = ui.request("GET", f"/?token={token}")
        assert status == 303 and headers["location"] == "/"
        assert "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]
        status, _, html = ui.request("GET", "/", headers={"Cookie": f"orch_ui_token={token}"})
        assert status == 200 and "orch-token" in html


def test_guard_hosts_and_urls() -> None:
    g = Guard(host="127.0.0.1", port=8765, token="t")
    assert g.loopback and g.url() == "http://127.0.0.1:8765/"
    assert "localhost:8765" in (g.hosts() or set())
    assert Guard(host="0.0.0.0", port=1, token="t").hosts() is None
    assert Guard(host="10.1.2.3", port=80, token="t k").url() == "http://10.1.2.3:80/?token=t+k"
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("10.0.0.1")


def test_labels_are_checked() -> None:
    assert check_labels([" ui ", "ui", "a.b:c-d"]) == ["ui", "a.b:c-d"]
    for bad in ("", "-x", "a b", "<script>", "x" * 41):
        with pytest.raises(InvalidInput):
            check_labels([bad])


DIFF = """diff --git a/app.py b/app.py
index 1..2 100644
--- a/app.py
+++ b/app.py
@@ -1,4 +1,4 @@
 import os
-x = 1
-y = "<b>"
+x = 2
 z = 3
@@ -10,0 +11,1 @@ def f():
+print("new")
diff --git a/logo.png b/logo.png
Binary files a/logo.png and b/logo.png differ
"""


def test_diff_view_numbers_pairs_and_escapes() -> None:
    d = diffview.parse(DIFF)
    app, logo = d.files
    assert (app.path, app.added, app.removed) == ("app.py", 2, 2) and logo.binary
    first = app.hunks[0]
    assert [(line.kind, line.old, line.new) for line in first.lines] == [
        ("ctx", 1, 1), ("del", 2, None), ("del", 3, None), ("add", None, 2), ("ctx", 4, 3)]
    assert "&lt;b&gt;" in str(first.lines[2].html) and "<b>" not in str(first.lines[2].html)
    pairs = first.pairs()
    assert [(a.kind if a else None, b.kind if b else None) for a, b in pairs] == [
        ("ctx", "ctx"), ("del", "add"), ("del", None), ("ctx", "ctx")]
    assert app.hunks[1].lines[0].new == 11
    assert diffview.parse(DIFF, max_lines=3).truncated


def test_columns_follow_the_lifecycle(repo: Path) -> None:
    from orchestrator.ui.cards import Filters, by_column, column

    with open_board(init_repo(repo)) as board:
        a = board.add("alpha")
        b = board.add("beta", metadata={"labels": ["x"]})
        board.cancel(a.id)
        tasks = board.list()
    assert [column(t) for t in tasks] == ["closed", "pending"]
    assert tasks[1].status is Status.PENDING
    f = Filters(label="x")
    assert by_column(tasks, f)["pending"] == [tasks[1]] and by_column(tasks, f)["closed"] == []
    assert by_column(tasks, Filters(text="ALPHA"))["closed"][0].id == a.id
    assert by_column(tasks, Filters(owner="nobody"))["pending"] == []
    assert b.id == tasks[1].id


def test_team_control_needs_allow_control(served: tuple[Ui, Path]) -> None:
    ui, _ = served
    status, res = ui.post("/api/team/start", {}, token=ui.token())
    assert status == 409 and "--allow-control" in res["error"]
    assert "orchestrator ui --allow-control" in ui.request("GET", "/team")[2]


def test_start_and_stop_the_team_from_the_page(repo: Path) -> None:
    from orchestrator.team import status as team_status
    from tests.test_team_support import team_cleanup

    init_repo(repo)
    (repo / "orchestrator.toml").write_text('[team]\nbackend = "command"\ncommand = "true"\n')
    with team_cleanup(repo), running_ui(repo, "--allow-control", env=team_env()) as ui:
        wait_http_ready(ui)
        token = ui.token()
        assert ui.post("/api/team/start", {"teammates": 0}, token=token)[0] == 400
        status, res = ui.post("/api/team/start", {"teammates": 1}, token=token)
        assert status == 200, res
        info = team_status.running_daemon(Layout.at(repo))
        assert info is not None and info["pid"] == res["started"]
        assert "running</b>, pid" in ui.request("GET", "/team")[2]
        status, res = ui.post("/api/team/start", {}, token=token)
        assert status == 409 and "already running" in res["error"]
        status, res = ui.post("/api/team/stop", {}, token=token)
        assert status == 200 and res["stopped"] == info["pid"]
        assert team_status.running_daemon(Layout.at(repo)) is None


def test_long_columns_come_in_pages_and_a_change_refiles_one_card(repo: Path) -> None:
    import threading

    from orchestrator.config import Config
    from orchestrator.ui import cards, pages

    layout = init_repo(repo)
    with open_board(layout) as board:
        added = [board.add(f"task {i}", metadata={"labels": ["odd" if i % 2 else "even"]})
                 for i in range(cards.PAGE + 12)]
        ctx = pages.Context(layout, Config.load(repo), board, threading.RLock())
        view = pages.board_view(ctx, cards.Filters())
        pending = next(c for c in view["columns"] if c["name"] == "pending")
        assert pending["total"] == len(added) and len(pending["cards"]) == cards.PAGE
        rest = pages.column_page(ctx, "pending", cards.Filters(), cards.PAGE, 100)
        assert [c["id"] for c in rest] == [t.id for t in added[cards.PAGE:]]
        assert view["labels"] == ["even", "odd"]
        odd = pages.column_page(ctx, "pending", cards.Filters(label="odd"), 0, 100)
        assert [c["id"] for c in odd] == [t.id for t in added[1::2]]

        before = ctx.snapshot()
        board.cancel(added[3].id)
        upd = pages.card_updates(ctx, [added[3].id])
        after = ctx.snapshot()
        assert after is not before and after.tasks is not before.tasks
        assert upd["cards"][0]["column"] == "closed"
        assert upd["counts"]["pending"] == len(added) - 1 and upd["counts"]["closed"] == 1
        assert [t.id for t in after.columns["pending"]] == \
            [t.id for t in added if t.id != added[3].id]
        assert after.columns == pages.Snapshot.build(board.list()).columns


def test_a_taken_port_or_a_bad_host_is_one_clear_line(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    from orchestrator.cli import main

    init_repo(repo)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for args, wanted in ((["--port", str(port)], f"127.0.0.1:{port}: Address already in use"),
                             (["--host", "192.0.2.1"], "cannot listen on 192.0.2.1:8765")):
            with pytest.raises(SystemExit) as exit_:
                main(["ui", *args, "-C", str(repo)])
            err = capsys.readouterr().err
            assert exit_.value.code == 1 and err.startswith("error: cannot listen on")
            assert wanted in err and err.count("\n") == 1


def test_money_prints_as_money(served: tuple[Ui, Path]) -> None:
    """Dollars summed from runs print as $0.30, never 0.30000000000000004 (issue 30)."""
    ui, repo = served
    with open_board(Layout.at(repo)) as board:
        task = board.add("spends in small amounts")
        claimed = board.claim("alice", task_id=task.id)
        assert claimed is not None and claimed.lease is not None
        spent = Usage()
        for cost in (0.1, 0.2, 1.2):
            spent = spent.add(Usage(cost_usd=cost))
        board.update(task.id, claimed.lease.token, usage=spent)
        board.fail(task.id, claimed.lease.token, "stopped", retry=False)
    assert spent.cost_usd == 1.5
    html = ui.request("GET", f"/task/{task.id}")[2]
    assert "$1.50" in html and "1.50000" not in html
    board_html = ui.request("GET", "/")[2]
    assert "$1.50" in board_html
    shown = subprocess.run([sys.executable, "-m", "orchestrator", "show", task.id], cwd=repo,
                           capture_output=True, text=True, check=True).stdout
    assert "spent: $1.50 (" in shown and "0000000" not in shown
    assert money(0.004) == "$0.0040" and money(1234.5) == "$1,234.50"
