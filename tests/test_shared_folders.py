"""Shared heavy folders: linked from a lockfile-keyed cache, private per worktree, opt-out,
built once by a command, disk use that does not count the cache, gc of unused entries."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.board import init_repo, open_board
from orchestrator.board.eventlog import EventLog
from orchestrator.cli import load_app
from orchestrator.config import Config, SharedFolder, WorktreeConfig
from orchestrator.errors import ConfigError
from orchestrator.events import SharedFolderLink, WorktreeCreated
from orchestrator.layout import Layout
from orchestrator.model import Status, Task
from orchestrator.worktree import WorktreeManager, binding
from orchestrator.worktree.shared import tree_bytes
from tests.helpers import git, make_repo

BLOB = 64 * 1024


def deps_repo(path: Path, ignore: str = "node_modules/\n") -> Path:
    """A repository whose gitignored node_modules (main checkout) holds data files, an
    executable and a relative symlink, keyed by the committed package-lock.json."""
    repo = make_repo(path, {".gitignore": ignore, "package-lock.json": '{"lockfileVersion": 3}\n',
                            "src/app.js": "console.log(1)\n"})
    nm = repo / "node_modules"
    (nm / "left-pad" / "lib").mkdir(parents=True)
    (nm / "left-pad" / "lib" / "index.js").write_bytes(os.urandom(BLOB))
    (nm / ".bin").mkdir()
    tool = nm / "left-pad" / "cli.sh"
    tool.write_text("#!/bin/sh\necho padded\n")
    tool.chmod(0o755)
    (nm / ".bin" / "left-pad").symlink_to("../left-pad/cli.sh")
    return repo


def manager(repo: Path, **cfg: object) -> WorktreeManager:
    return WorktreeManager(Layout.at(repo).ensure(), WorktreeConfig(**cfg))  # type: ignore[arg-type]


def task(n: int) -> Task:
    return Task(id=f"task_{n:03d}", subject=f"Task {n}")


def test_each_worktree_gets_a_private_hardlinked_copy_with_modes_and_symlinks(
        tmp_path: Path) -> None:
    repo = deps_repo(tmp_path / "repo")
    m = manager(repo, shared_folders=["node_modules"])
    one, two = m.create(task(1)), m.create(task(2))
    for ws in (one, two):
        nm = ws.path / "node_modules"
        assert nm.is_dir() and not nm.is_symlink()
        tool = nm / "left-pad" / "cli.sh"
        assert tool.stat().st_mode & stat.S_IXUSR
        assert os.readlink(nm / ".bin" / "left-pad") == "../left-pad/cli.sh"
        assert (nm / ".bin" / "left-pad").read_text() == tool.read_text()
        data = nm / "left-pad" / "lib" / "index.js"
        assert data.read_bytes() == (repo / "node_modules/left-pad/lib/index.js").read_bytes()
        assert data.stat().st_nlink == 3  # the cache entry and the two worktrees
        assert git(ws.path, "status", "--porcelain") == ""  # ignored: nothing to commit
    # the main checkout's folder was copied into the cache, not linked: it stays the user's
    main_data = repo / "node_modules/left-pad/lib/index.js"
    assert main_data.stat().st_nlink == 1
    # private trees: what one worktree adds or deletes the other does not see
    (one.path / "node_modules" / "new-pkg").mkdir()
    (one.path / "node_modules" / "left-pad" / "lib" / "index.js").unlink()
    assert not (two.path / "node_modules" / "new-pkg").exists()
    assert (two.path / "node_modules" / "left-pad" / "lib" / "index.js").exists()
    # the worktree's own disk use leaves out what the cache holds
    assert m.status(task(2)).disk_bytes < BLOB
    assert tree_bytes(two.path / "node_modules") >= BLOB
    [created] = [e for e in EventLog(m.layout.events).read()
                 if e["event"] == "worktree_created" and e["task"] == "task_002"]
    assert created["shared"] == [{"folder": "node_modules", "how": "hardlink",
                                  "key": created["shared"][0]["key"], "source": "cache"}]
    typed = created.decode()
    assert isinstance(typed, WorktreeCreated) and typed.shared == [SharedFolderLink(
        folder="node_modules", how="hardlink", key=created["shared"][0]["key"], source="cache")]
    # removal deletes the worktree's links, never the cache
    assert m.remove(task(1)) is None and m.remove(task(2)) is None
    [entry] = [p for p in (m.cache() / "node_modules").iterdir() if p.is_dir()]
    assert (entry / "left-pad" / "lib" / "index.js").read_bytes() == main_data.read_bytes()


def test_other_lockfile_is_built_once_by_the_command_then_reused(tmp_path: Path) -> None:
    repo = deps_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "-b", "upgrade")
    (repo / "package-lock.json").write_text('{"lockfileVersion": 3, "upgraded": true}\n')
    git(repo, "commit", "-qam", "upgrade deps")
    git(repo, "checkout", "-q", "main")
    runs = tmp_path / "runs.txt"
    build = (f'echo "$ORCH_TASK_ID" >> {runs} && mkdir -p node_modules/.bin && '
             'printf "#!/bin/sh\\necho built\\n" > node_modules/.bin/tool && '
             'chmod +x node_modules/.bin/tool')
    m = manager(repo, base="upgrade", shared={"node_modules": SharedFolder(command=build)})
    one, two = m.create(task(1)), m.create(task(2))
    assert runs.read_text().split() == ["task_001"]  # built once, by the first worktree
    for ws in (one, two):
        tool = ws.path / "node_modules" / ".bin" / "tool"
        assert tool.read_text() == "#!/bin/sh\necho built\n" and os.access(tool, os.X_OK)
    created = [e for e in EventLog(m.layout.events).read() if e["event"] == "worktree_created"]
    assert [e["shared"][0]["source"] for e in created] == ["command", "cache"]


def test_skipped_with_the_reason_when_no_entry_can_be_made(tmp_path: Path) -> None:
    repo = deps_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "-b", "upgrade")
    (repo / "package-lock.json").write_text("{}\n")
    git(repo, "commit", "-qam", "other deps")
    git(repo, "checkout", "-q", "main")
    ws = manager(repo, base="upgrade", shared_folders=["node_modules"]).create(task(1))
    assert not (ws.path / "node_modules").exists()
    [e] = [e for e in EventLog(Layout.at(repo).events).read() if e["event"] == "worktree_created"]
    assert e["shared"][0]["how"] == "skipped" and "no cache entry" in e["shared"][0]["reason"]


def test_opt_out_per_folder_and_symlink_mode(tmp_path: Path) -> None:
    repo = deps_repo(tmp_path / "repo")
    (repo / ".venv").mkdir()
    (repo / "uv.lock").write_text("version = 1\n")
    (repo / ".gitignore").write_text("node_modules/\n.venv/\nuv.lock\n")
    off = manager(repo, shared_folders=["node_modules"],
                  shared={"node_modules": SharedFolder(enabled=False)}).create(task(1))
    assert not (off.path / "node_modules").exists()
    on = manager(repo, shared={"node_modules": SharedFolder(link="symlink")}).create(task(2))
    nm = on.path / "node_modules"
    assert nm.is_symlink() and (nm / ".bin" / "left-pad").read_text().startswith("#!/bin/sh")


def test_a_folder_git_does_not_ignore_is_left_alone(tmp_path: Path) -> None:
    repo = deps_repo(tmp_path / "repo", ignore="")
    ws = manager(repo, shared_folders=["node_modules"]).create(task(1))
    assert not (ws.path / "node_modules").exists()
    [e] = [e for e in EventLog(Layout.at(repo).events).read() if e["event"] == "worktree_created"]
    assert "does not ignore" in e["shared"][0]["reason"]


def test_a_resumed_worktree_keeps_its_own_folder(tmp_path: Path) -> None:
    repo = deps_repo(tmp_path / "repo")
    m = manager(repo, shared_folders=["node_modules"])
    ws = m.create(task(1))
    (ws.path / "node_modules" / "mine").write_text("installed by the agent")
    again = m.create(task(1))
    assert (again.path / "node_modules" / "mine").read_text() == "installed by the agent"


def test_bad_folder_names_are_a_config_error(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    for bad in ('["../outside"]', '["/abs"]', '[".git"]', '[""]'):
        (repo / "orchestrator.toml").write_text(f"[worktree]\nshared_folders = {bad}\n")
        with pytest.raises(ConfigError, match="must be a folder path inside the worktree"):
            Config.load(repo)
    (repo / "orchestrator.toml").write_text(
        '[worktree]\nshared_folders = ["node_modules"]\n'
        '[worktree.shared.".venv"]\nkey_files = ["uv.lock"]\nlink = "symlink"\n')
    cfg = Config.load(repo).worktree
    assert cfg.shared[".venv"].link == "symlink" and cfg.shared_folders == ["node_modules"]


def cli(repo: Path, *args: str) -> str:
    res = CliRunner().invoke(load_app(), [*args, "--repo", str(repo)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.stdout


def test_worktrees_shows_own_disk_use_and_total_and_gc_reports_what_it_freed(
        tmp_path: Path) -> None:
    repo = deps_repo(tmp_path / "repo")
    (repo / "orchestrator.toml").write_text('[worktree]\nshared_folders = ["node_modules"]\n')
    layout = init_repo(repo)
    with open_board(layout) as board:
        m = WorktreeManager(layout, Config.load(repo).worktree, board)
        ids = []
        for n in range(2):
            t = board.add(f"Task {n}")
            claimed = board.claim("alice", task_id=t.id)
            assert claimed is not None and claimed.lease is not None
            ws = m.create(claimed)
            board.update(t.id, claimed.lease.token, **binding(ws))
            (ws.path / f"{t.id}.bin").write_bytes(os.urandom(3 * BLOB))  # its own work
            git(ws.path, "add", "-A")
            git(ws.path, "commit", "-qm", "work")
            board.complete(t.id, claimed.lease.token)
            ids.append(t.id)
    rows = json.loads(cli(repo, "worktrees", "--json"))
    for row in rows:
        assert 3 * BLOB <= row["disk_bytes"] < 4 * BLOB  # its file, not the linked BLOB
    text = cli(repo, "worktrees")
    total = sum(r["disk_bytes"] for r in rows)
    assert f"total: {total / 1024:.1f} KB in 2 worktree(s)" in text
    # the lockfile moves on in the main checkout: the old cache entry is unused once the
    # worktrees that share it are gone
    with open_board(layout) as board:
        for tid in ids:
            board.set_status(tid, Status.MERGED, actor="lead")
    for row in rows:
        git(repo, "merge", "-q", "--no-ff", "-m", "merge", row["branch"])
    (repo / "package-lock.json").write_text('{"lockfileVersion": 3, "v": 2}\n')
    git(repo, "commit", "-qam", "new lock")
    report = json.loads(cli(repo, "gc", "--json"))
    assert [r["task"] for r in report["removed"]] == ids
    assert all(r["freed_bytes"] >= 3 * BLOB for r in report["removed"])
    [entry] = report["cache"]
    assert entry["freed_bytes"] >= BLOB and not Path(entry["entry"]).exists()
    assert report["freed_bytes"] == sum(r["freed_bytes"] for r in
                                        report["removed"] + report["cache"])
    assert cli(repo, "gc") == "nothing to clean up\n"
