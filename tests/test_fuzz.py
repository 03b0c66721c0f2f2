"""Fuzzing (issue 10) with hypothesis: intake of arbitrary dropped files, and every CLI
argument that names a file, a task, a branch or a repository.

Whatever comes in: no traceback and no unexpected exception (only our one-line
errors), no write outside the repository (a sentinel tree beside it stays as it
was), the main working tree untouched, and nothing lost (the tasks already on
the board stay, whole).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.board import init_repo, open_board
from orchestrator.board.index import read_task_file
from orchestrator.cli import main
from orchestrator.layout import Layout
from tests.helpers import git, make_repo

NASTY = ["../../outside/victim.txt", "../outside", "/etc/passwd", "..", ".", "", " ", "-",
         "--help", "-1", "0", "1", "001", "task_001", "task_1", "task_001/../../outside",
         "task_001\n", "task_99999999999999999999", "a" * 300, "~", "~/x", "$(touch pwned)",
         "`touch pwned`", "refs/heads/main", "task/001", "main", "HEAD", "HEAD~1", "@{-1}",
         "task_001;rm -rf .", "*", "?", "\\", "ü", "名前", "lead", "all", ".tasks",
         ".worktrees/task_001", ".git", "CON", "a/b", "a\tb"]
NAMES = st.one_of(st.sampled_from(NASTY),
                  st.text(st.characters(blacklist_characters="\x00",
                                        blacklist_categories=("Cs",)), max_size=40))
FAST = settings(max_examples=10, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<dir>"
            for p in sorted(folder.rglob("*"))}


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path, dict[str, bytes], dict[str, str]]:
    """A repository with two tasks and a sentinel tree beside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("do not touch\n")
    (outside / "sub").mkdir()
    (outside / "sub" / "x.json").write_text("{}\n")
    repo = make_repo(tmp_path / "repo")
    layout = init_repo(repo)
    with open_board(layout) as b:
        first = b.add("first task", description="keep me")
        b.add("second task", blocked_by=[first.id])
    texts = {p.name: p.read_text() for p in layout.tasks.glob("task_*.json")}
    return repo, outside, snapshot(outside), texts


def check_world(repo: Path, outside: Path, before: dict[str, bytes],
                tasks: dict[str, str]) -> None:
    assert snapshot(outside) == before, "something was written outside the repository"
    assert git(repo, "status", "--porcelain") == "", "the main working tree was written"
    assert not (repo / "pwned").exists() and not (repo.parent / "pwned").exists()
    layout = Layout.at(repo)
    for name in tasks:  # still there and whole (its status may change: cancel is allowed)
        task, _ = read_task_file(layout.tasks / name)
        assert task.subject in ("first task", "second task")


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out + out.err


def assert_clean_failure(code: int, output: str, args: list[str]) -> None:
    assert "Traceback" not in output, (args, output)
    assert "ORCH_DEBUG=1" not in output, f"an unexpected exception for {args}: {output}"
    if code not in (0, 2):  # 2: a usage error from click, printed as a usage box
        assert code == 1 and output.strip().splitlines()[-1].startswith("error: "), \
            (args, code, output)


COMMANDS = [
    lambda x: ["show", x], lambda x: ["cancel", x], lambda x: ["logs", x],
    lambda x: ["diff", x], lambda x: ["merge", x],
    lambda x: ["discard", x], lambda x: ["retry", x, "-m", "again"],
    lambda x: ["enter", x, "--", "true"], lambda x: ["approve", x], lambda x: ["deny", x],
    lambda x: ["send", x, "hello"], lambda x: ["add", "new work", "--blocked-by", x],
    lambda x: ["events", "--task", x],
]


@pytest.mark.parametrize("command", range(len(COMMANDS)),
                         ids=["show", "cancel", "logs", "diff", "merge", "discard", "retry",
                              "enter", "approve", "deny", "send", "add-blocked-by", "events"])
def test_cli_arguments_naming_a_task_file_or_branch(
        world: tuple[Path, Path, dict[str, bytes], dict[str, str]], command: int,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    repo, outside, before, tasks = world
    monkeypatch.chdir(repo)

    @FAST
    @given(name=NAMES)
    def one(name: str) -> None:
        args = [*COMMANDS[command](name), "--repo", str(repo)]
        code, output = run_cli(args, capsys)
        assert_clean_failure(code, output, args)
        check_world(repo, outside, before, tasks)

    one()


@FAST
@given(where=NAMES)
def test_repo_option_anywhere(where: str, tmp_path_factory: pytest.TempPathFactory,
                              capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path_factory.getbasetemp() / "repo-option"
    base.mkdir(exist_ok=True)
    outside = base / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "victim.txt").write_text("do not touch\n")
    before = snapshot(outside)
    cwd = os.getcwd()
    os.chdir(base)
    try:
        for args in (["list", "--repo", where], ["status", "--repo", where]):
            code, output = run_cli(args, capsys)
            assert_clean_failure(code, output, args)
    finally:
        os.chdir(cwd)
    assert snapshot(outside) == before


CONTENT = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300).map(str.encode),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                 lambda kids: st.lists(kids, max_size=4)
                 | st.dictionaries(st.sampled_from(
                     ["title", "subject", "description", "blockedBy", "blocked_by", "id",
                      "status", "priority", "owner", "lease", "plan_first", "x"]), kids,
                     max_size=6), max_leaves=12).map(lambda v: json.dumps(v).encode()),
    st.builds(lambda h, body, fm: (f"---\n{fm}\n---\n# {h}\n\n{body}\n" if fm
                                   else f"# {h}\n\n{body}\n").encode(),
              st.text(max_size=40), st.text(max_size=100),
              st.sampled_from(["", "priority: 3", "blocked_by: [task_001]", "priority: x",
                               "blockedBy: ../../x", ": :", "status: merged"])),
)
FILE_NAMES = st.one_of(
    st.sampled_from(["a.json", "b.md", "c.txt", "noext", ".hidden.json", "x.JSON",
                     "task_001.json", "..json", "a b.md", "ü.md"]),
    st.text(st.characters(whitelist_categories=("L", "N"), whitelist_characters="._- "),
            min_size=1, max_size=30).map(lambda s: s + ".json"),
)


@FAST
@given(drops=st.lists(st.tuples(FILE_NAMES, CONTENT), min_size=1, max_size=4))
def test_intake_of_whatever_is_dropped(
        world: tuple[Path, Path, dict[str, bytes], dict[str, str]],
        drops: list[tuple[str, bytes]]) -> None:
    repo, outside, before, tasks = world
    layout = Layout.at(repo)
    with open_board(layout) as board:
        count_before = len(board.list())
        dropped = {}
        for name, data in drops:
            f = layout.inbox / name
            f.write_bytes(data)
            old = f.stat().st_mtime - 60  # settled: intake waits a moment for fresh files
            os.utime(f, (old, old))
            dropped[name] = data
        created = board.intake()
        after = board.list()
    check_world(repo, outside, before, tasks)
    assert len(after) == count_before + len(created)
    # each dropped file became a task or was set aside with its reason: none vanished
    left = {p.name for p in layout.inbox.iterdir()}
    rejected = ({p.name for p in layout.rejected.iterdir() if not p.name.endswith(".reason")}
                if layout.rejected.exists() else set())
    for name in dropped:
        if not name.startswith("."):
            assert name not in left, f"{name} was neither taken nor rejected"
    assert len(created) + len(rejected) >= len([n for n in dropped if not n.startswith(".")])
    for t in created:
        read_task_file(layout.task_file(t.id))  # whole and valid


def test_a_few_real_processes_fail_with_one_line(
        world: tuple[Path, Path, dict[str, bytes], dict[str, str]]) -> None:
    repo, outside, before, tasks = world
    for args in (["show", "../../outside/victim.txt"], ["diff", "task_001;id"],
                 ["cancel", "/etc/passwd"], ["add", "x", "--blocked-by", "../outside"],
                 ["list", "--repo", str(outside)]):
        res = subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=repo,
                             capture_output=True, text=True, timeout=60, check=False)
        assert res.returncode == 1, (args, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, res.stderr)
        assert "ORCH_DEBUG" not in res.stderr
    check_world(repo, outside, before, tasks)
