"""Sparse checkouts (``worktree.sparse_paths``): only the listed part of the tree lands on
disk, the worktree still commits, resumes and removes like a full one."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import WorktreeConfig
from orchestrator.errors import UnsafeRemoval
from orchestrator.layout import Layout
from orchestrator.model import Task
from orchestrator.worktree import WorktreeManager
from tests.helpers import git, make_repo

FILES = {"README.md": "top\n", "services/api/main.py": "api\n", "services/web/app.js": "web\n",
         "docs/guide.md": "guide\n", "docs/notes.txt": "notes\n", "big/blob.dat": "x" * 5000}


def files(path: Path) -> set[str]:
    return {p.relative_to(path).as_posix() for p in path.rglob("*")
            if p.is_file() and ".git" not in p.parts and p.name != ".task_ref"}


def manager(repo: Path, sparse: list[str]) -> WorktreeManager:
    return WorktreeManager(Layout.at(repo).ensure(), WorktreeConfig(sparse_paths=sparse))


def test_cone_mode_checks_out_only_the_listed_folders(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    m = manager(repo, ["services/api"])
    t = Task(id="task_001", subject="api work")
    ws = m.create(t)
    assert files(ws.path) == {"README.md", "services/api/main.py"}  # cone keeps top-level files
    assert git(ws.path, "status", "--porcelain") == ""
    (ws.path / "services/api/main.py").write_text("api v2\n")
    git(ws.path, "commit", "-qam", "api v2")
    # the commit changes one file and keeps the rest of the tree
    assert git(repo, "ls-tree", "-r", "--name-only", ws.branch or "").split() == sorted(FILES)
    assert git(repo, "show", f"{ws.branch}:services/api/main.py") == "api v2"
    again = m.create(t)  # resumed: same sparse worktree
    assert files(again.path) == {"README.md", "services/api/main.py"}
    # the main checkout is untouched by the worktree's sparse settings
    assert files(repo) >= set(FILES)
    with pytest.raises(UnsafeRemoval, match="1 commit"):
        m.remove(t)
    assert m.remove(t, force=True) == "refs/orchestrator/snapshots/task_001"


def test_patterns_use_non_cone_mode(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    ws = manager(repo, ["/docs/*.md", "/README.md"]).create(Task(id="task_002", subject="docs"))
    assert files(ws.path) == {"docs/guide.md", "README.md"}


def test_a_creation_killed_before_its_checkout_is_completed_on_reuse(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    m = manager(repo, ["docs"])
    t = Task(id="task_003", subject="docs")
    branch = m.branch_for(t)
    path = m.path_for(t)
    # what a kill between `git worktree add --no-checkout` and the checkout leaves behind
    git(repo, "worktree", "add", "-q", "--no-checkout", "-b", branch, str(path), "HEAD")
    assert files(path) == set()
    ws = m.create(t)
    assert files(ws.path) == {"README.md", "docs/guide.md", "docs/notes.txt"}
    assert git(ws.path, "status", "--porcelain") == ""
    assert m.remove(t) is None  # clean and nothing ahead: removed without force
    assert not path.exists()
