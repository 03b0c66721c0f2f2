"""Each built-in tool on real files, a real git repository and real processes."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.agent.permissions import PermissionGate
from orchestrator.agent.tools import default_tools
from orchestrator.agent.tools.shell import OUTPUT_HEAD_BYTES
from orchestrator.board import open_board
from orchestrator.board.mailboxes import Mailbox
from orchestrator.layout import Layout
from orchestrator.sandbox import safe_env
from tests.helpers import child_pids, git, make_repo

TOOLS = {t.name: t for t in default_tools()}


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    root = make_repo(tmp_path / "wt", {"README.md": "# sample\n", "src/app.py": "x = 1\n"})
    return ToolContext(cwd=root, env=safe_env(os.environ), task_id="task_001")


def run(ctx: ToolContext, name: str, **args: Any) -> ToolResult:
    return TOOLS[name].run(args, ctx)


# --- read ----------------------------------------------------------------------


def test_read_numbers_lines_and_pages(ctx: ToolContext) -> None:
    (ctx.cwd / "f.txt").write_text("".join(f"l{i}\n" for i in range(1, 11)))
    assert run(ctx, "read", file_path="f.txt").content.splitlines()[0] == "     1\tl1"
    r = run(ctx, "read", file_path="f.txt", offset=4, limit=2)
    assert r.content.splitlines() == ["     4\tl4", "     5\tl5",
                                      "(lines 4-5 of 10; use offset/limit to see more)"]
    assert "past the end" in run(ctx, "read", file_path="f.txt", offset=99).content


def test_read_refuses_binary_and_explains_other_failures(ctx: ToolContext) -> None:
    (ctx.cwd / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0")
    r = run(ctx, "read", file_path="img.png")
    assert r.is_error and "binary file (11 bytes)" in r.content
    assert "file not found: nope.txt" in run(ctx, "read", file_path="nope.txt").content
    assert "is a folder; use ls" in run(ctx, "read", file_path="src").content
    (ctx.cwd / "empty").write_text("")
    assert run(ctx, "read", file_path="empty").content == "(empty is empty)"


def test_read_cuts_long_lines_and_strips_carriage_returns(ctx: ToolContext) -> None:
    (ctx.cwd / "f.txt").write_bytes(b"a\r\n" + b"b" * 5000 + b"\r\n")
    lines = run(ctx, "read", file_path="f.txt").content.splitlines()
    assert lines[0] == "     1\ta"
    assert lines[1].endswith("[line cut: 5000 chars]") and len(lines[1]) < 2100


# --- write, edit, multi_edit -----------------------------------------------------


def test_write_creates_parents_and_keeps_mode_and_newline_style(ctx: ToolContext) -> None:
    r = run(ctx, "write", file_path="new/deep/f.py", content="a\nb\n")
    assert r.content == "created new/deep/f.py (2 lines)"
    assert (ctx.cwd / "new/deep/f.py").read_text() == "a\nb\n"
    script = ctx.cwd / "run.sh"
    script.write_bytes(b"#!/bin/sh\r\necho hi\r\n")
    script.chmod(0o755)
    run(ctx, "write", file_path="run.sh", content="#!/bin/sh\necho bye\n")
    assert script.read_bytes() == b"#!/bin/sh\r\necho bye\r\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert "is a folder" in run(ctx, "write", file_path="src", content="").content


def test_edit_exact_unique_match(ctx: ToolContext) -> None:
    f = ctx.cwd / "f.py"
    f.write_text("a = 1\nb = 1\nc = 2\n")
    r = run(ctx, "edit", file_path="f.py", old_string="c = 2", new_string="c = 3")
    assert r.content == "edited f.py: 1 replacement (first at line 3)"
    r = run(ctx, "edit", file_path="f.py", old_string="= 1", new_string="= 9")
    assert r.is_error and "matches 2 times" in r.content
    r = run(ctx, "edit", file_path="f.py", old_string="zzz", new_string="y")
    assert r.is_error and "not found" in r.content
    assert "same" in run(ctx, "edit", file_path="f.py", old_string="a", new_string="a").content
    assert "empty" in run(ctx, "edit", file_path="f.py", old_string="", new_string="a").content
    assert f.read_text() == "a = 1\nb = 1\nc = 3\n"
    r = run(ctx, "edit", file_path="f.py", old_string="= 1", new_string="= 9", replace_all=True)
    assert "2 replacements" in r.content and f.read_text() == "a = 9\nb = 9\nc = 3\n"
    r = run(ctx, "edit", file_path="missing.py", old_string="a", new_string="b")
    assert "file not found" in r.content and "write" in r.content


def test_edit_keeps_crlf_and_bytes_that_are_not_utf8(ctx: ToolContext) -> None:
    f = ctx.cwd / "win.txt"
    f.write_bytes(b"caf\xe9\r\nline two\r\nend\r\n")
    r = run(ctx, "edit", file_path="win.txt", old_string="line two\nend",
            new_string="line 2\nnew\nend")
    assert not r.is_error, r.content
    assert f.read_bytes() == b"caf\xe9\r\nline 2\r\nnew\r\nend\r\n"


def test_multi_edit_is_all_or_nothing(ctx: ToolContext) -> None:
    f = ctx.cwd / "f.py"
    f.write_text("def a():\n    return 1\n")
    edits = [{"old_string": "def a", "new_string": "def b"},
             {"old_string": "return 1", "new_string": "return 2"},
             {"old_string": "def a", "new_string": "def c"}]  # gone after edit 1
    r = run(ctx, "multi_edit", file_path="f.py", edits=edits)
    assert r.is_error and "edit 3 of 3" in r.content and "no edit was applied" in r.content
    assert f.read_text() == "def a():\n    return 1\n"
    r = run(ctx, "multi_edit", file_path="f.py", edits=edits[:2])
    assert r.content == "edited f.py: 2 edits, 2 replacements"
    assert f.read_text() == "def b():\n    return 2\n"


# --- glob, grep, ls --------------------------------------------------------------


def test_glob_newest_first_skipping_ignored_files(ctx: ToolContext) -> None:
    (ctx.cwd / ".gitignore").write_text("build/\n")
    (ctx.cwd / "build").mkdir()
    (ctx.cwd / "build/gen.py").write_text("")
    (ctx.cwd / "src/new.py").write_text("")
    past = time.time() - 100
    os.utime(ctx.cwd / "src/app.py", (past, past))
    assert run(ctx, "glob", pattern="**/*.py").content.splitlines() == ["src/new.py",
                                                                          "src/app.py"]
    assert run(ctx, "glob", pattern="*.{md,txt}").content == "README.md"
    assert run(ctx, "glob", pattern="*.py", path="src").content.count("\n") == 1
    assert "no files match" in run(ctx, "glob", pattern="*.rs").content


def test_grep_modes_filters_and_errors(ctx: ToolContext) -> None:
    (ctx.cwd / "src/b.py").write_text("import os\nx = 2\ny = x\n")
    (ctx.cwd / "notes.md").write_text("x marks\n")
    (ctx.cwd / "blob.bin").write_bytes(b"x\0x")
    assert run(ctx, "grep", pattern=r"^x").content.splitlines() == [
        "notes.md", "src/app.py", "src/b.py"]
    assert run(ctx, "grep", pattern="x", glob="*.py", output_mode="count").content == \
        "src/app.py:1\nsrc/b.py:2"
    r = run(ctx, "grep", pattern="X = 2", path="src/b.py", output_mode="content",
            case_insensitive=True, context=1)
    assert r.content.splitlines() == ["src/b.py-1-import os", "src/b.py:2:x = 2",
                                      "src/b.py-3-y = x"]
    r = run(ctx, "grep", pattern="x", output_mode="content", head_limit=2)
    assert r.content.splitlines()[-1].startswith("(2 more lines not shown")
    assert "bad regular expression" in run(ctx, "grep", pattern="(").content
    assert "no matches" in run(ctx, "grep", pattern="zebra").content


def test_search_tools_skip_files_a_read_deny_rule_covers(ctx: ToolContext) -> None:
    (ctx.cwd / ".env").write_text("x_TOKEN=abc\n")
    ctx.gate = PermissionGate.from_rules(deny=["Read(.env)"], root=ctx.cwd)
    assert ".env" not in run(ctx, "grep", pattern="x").content
    assert "no files match" in run(ctx, "glob", pattern=".env").content


def test_ls_lists_one_level_without_git(ctx: ToolContext) -> None:
    (ctx.cwd / "link").symlink_to("README.md")
    assert run(ctx, "ls").content.splitlines() == ["src/", "README.md  (9 bytes)",
                                                   "link -> README.md"]
    assert run(ctx, "ls", path="src", ignore=["*.py"]).content == "src is empty"
    assert "not a folder" in run(ctx, "ls", path="README.md").content


# --- bash ----------------------------------------------------------------------


def test_bash_runs_in_the_worktree_and_reports_the_exit_code(ctx: ToolContext) -> None:
    r = run(ctx, "bash", command="pwd; echo oops >&2; exit 3")
    assert r.content == f"{ctx.cwd}\noops\n\n[exit code 3]" and not r.is_error
    assert run(ctx, "bash", command="true").content == "(no output)"
    assert run(ctx, "bash", command="cat").content == "(no output)"  # stdin is closed
    assert run(ctx, "bash", command="  ").is_error


def test_bash_timeout_kills_the_whole_process_group(ctx: ToolContext) -> None:
    r = run(ctx, "bash", command="echo started; sleep 60 & sleep 60; echo never", timeout=1)
    assert r.is_error and r.content.startswith("started\n")
    assert "timed out after 1 s" in r.content
    assert child_pids() == []


def test_bash_leaves_no_background_processes(ctx: ToolContext) -> None:
    r = run(ctx, "bash", command="(sleep 60 &) ; echo done")
    assert r.content == "done\n"
    assert child_pids() == []


def test_bash_keeps_head_and_tail_of_huge_output(ctx: ToolContext) -> None:
    r = run(ctx, "bash", command="echo FIRST; head -c 300000 /dev/zero | tr '\\0' x; "
            "echo; echo LAST")
    assert r.content.startswith("FIRST\n") and r.content.rstrip().endswith("LAST")
    assert "bytes of output cut" in r.content
    assert len(r.content) < 2 * OUTPUT_HEAD_BYTES + 200


# --- board tools ------------------------------------------------------------------


def test_board_tools_on_a_real_board(repo: Path) -> None:
    layout = Layout.at(repo)
    with open_board(layout) as board:
        first = board.add("Set up the project")
        ctx = ToolContext(cwd=repo, env={}, task_id=first.id,
                          board=board, teammate="alice", layout=layout)
        r = run(ctx, "task_create", subject="Write the docs", description="All of them.",
                blocked_by=[first.id], priority=2)
        assert r.content == f"created task_002 [pending] Write the docs (blocked by {first.id})"
        made = board.get("task_002")
        assert (made.priority, made.metadata) == (2, {"parent": first.id})
        assert run(ctx, "task_list").content.splitlines() == [
            "task_001 [pending] Set up the project",
            "task_002 [pending] Write the docs (blocked by task_001)"]
        assert run(ctx, "task_list", status="review").content == "no tasks"
        assert '"description": "All of them."' in run(ctx, "task_get", task_id="2").content
        r = run(ctx, "task_get", task_id="task_099")
        assert r.is_error and "no task task_099" in r.content
        assert run(ctx, "task_create", subject="x", blocked_by=["task_050"]).is_error
        assert "sent message" in run(ctx, "send_message", to="lead", body="need a hand").content
        [msg] = Mailbox(layout, "lead").all()
        assert (msg["from"], msg["body"], msg["task"]) == ("alice", "need a hand", first.id)
        assert run(ctx, "send_message", to="../etc", body="x").is_error
    no_board = ToolContext(cwd=repo, env={})
    assert "no task board" in run(no_board, "task_list").content


def test_worktree_fixture_is_a_git_checkout(ctx: ToolContext) -> None:
    assert git(ctx.cwd, "rev-parse", "--is-inside-work-tree") == "true"
