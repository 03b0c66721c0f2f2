"""Issue 29 item 6: host reads and writes in a worktree never follow the agent's links.

Hostile inputs: a committed ``.task_ref`` symlink to the repository's ``.git/config``
(and one through a symlinked folder), a FIFO in the agent's private ref and under
``.task_ref``, a symlinked and a FIFO usage file, a huge file, ``..`` in a name.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.beneath import NotRegular, read_beneath, write_beneath
from orchestrator.board import open_board
from orchestrator.budget import read_usage_file
from orchestrator.config import Config
from orchestrator.errors import InvalidInput
from orchestrator.layout import Layout
from orchestrator.sandbox.git_confine import GitConfinement
from orchestrator.worktree.manager import WorktreeManager
from tests.helpers import git
from tests.test_review import get, keep


def within(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()``'s answer, failing the test (not hanging it) when it takes longer."""
    box: list[Any] = []

    def call() -> None:
        try:
            box.append((fn(), None))
        except BaseException as exc:
            box.append((None, exc))

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"{fn} still blocked after {seconds} s")
    value, exc = box[0]
    if exc is not None:
        raise exc
    return value


def test_a_committed_task_ref_symlink_never_overwrites_git_config(repo: Path) -> None:
    task = keep(repo, "plants a link", {"a.txt": "a\n"})
    wt = Path(task.worktree or "")
    config = repo / ".git" / "config"
    before = config.read_bytes()
    (wt / ".task_ref").unlink()
    (wt / ".task_ref").symlink_to(os.path.relpath(config, wt))
    git(wt, "add", "-f", ".task_ref")
    git(wt, "commit", "-qm", "link")
    layout = Layout.at(repo)
    with open_board(layout) as board:
        manager = WorktreeManager(layout, Config.load(repo).worktree, board)
        manager.create(get(repo, task.id))  # reused: .task_ref written again
        assert config.read_bytes() == before
        assert (wt / ".task_ref").is_file() and not (wt / ".task_ref").is_symlink()
        git(repo, "worktree", "remove", "--force", str(wt))
        with manager.lock:
            manager.restore(get(repo, task.id))  # checked out from the branch: a link again
    assert config.read_bytes() == before
    assert '"task": "task_001"' in (wt / ".task_ref").read_text()


def test_reads_refuse_links_on_the_way_fifos_devices_and_huge_files(tmp_path: Path) -> None:
    root = tmp_path / "wt"
    (root / "d").mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.write_text("key\n")
    (root / "link").symlink_to(secret)
    (root / "dirlink").symlink_to(tmp_path)
    os.mkfifo(root / "fifo")
    (root / "null").symlink_to("/dev/null")
    with open(root / "huge", "wb") as fh:
        fh.truncate(1 << 30)
    (root / "d" / "ok").write_text("fine")
    assert read_beneath(root, "d/ok") == b"fine"
    for name, err in (("link", errno.ELOOP), ("dirlink/secret", errno.ENOTDIR),
                      ("null", errno.ELOOP)):
        with pytest.raises(OSError) as exc:
            read_beneath(root, name)
        assert exc.value.errno == err, name
    with pytest.raises(NotRegular):
        within(5, lambda: read_beneath(root, "fifo"))
    with pytest.raises(OSError, match="over 1024 bytes"):
        read_beneath(root, "huge", limit=1024)
    for bad in ("../secret", "/etc/passwd", "d/../../secret", ""):
        with pytest.raises(OSError):
            read_beneath(root, bad)
    write_beneath(root, "link", "replaced")  # the link is replaced, its target untouched
    assert secret.read_text() == "key\n" and (root / "link").read_text() == "replaced"
    with pytest.raises(OSError):
        write_beneath(root, "dirlink/x", "through a linked folder")
    assert not (tmp_path / "x").exists()


def test_a_fifo_in_the_agents_private_ref_does_not_hang_the_teammate(
        repo: Path) -> None:
    task = keep(repo, "confined", {"a.txt": "a\n"})
    conf = GitConfinement.open(Path(task.worktree or ""))
    assert conf is not None and conf.branch
    conf.binds()
    assert conf.scratch is not None
    leaf = conf.scratch / "refs" / conf.branch.rsplit("/", 1)[1]
    leaf.unlink()
    os.mkfifo(leaf)
    started = time.monotonic()
    note = within(10, lambda: conf.finish(lambda argv: argv))  # wrap unused: no import
    assert time.monotonic() - started < 5
    assert note is not None and "kept as it was" in note
    assert git(repo, "rev-parse", f"refs/heads/{conf.branch}") == conf.start


def test_a_symlinked_or_fifo_usage_file_counts_nothing(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"cost_usd": 5}')
    usage = tmp_path / "run" / "usage.json"
    usage.parent.mkdir()
    usage.symlink_to(elsewhere)
    with pytest.raises(InvalidInput):
        read_usage_file(usage)
    usage.unlink()
    os.mkfifo(usage)
    with pytest.raises(InvalidInput):
        within(5, lambda: read_usage_file(usage))


def hostile_tree(tmp: Path, folder: str, host_text: str, linked: str) -> Path:
    """A worktree ``tmp/wt`` with ``folder`` in it, ``linked`` a link to a host file
    holding ``host_text``, and ``AGENTS.md`` a FIFO."""
    host = tmp / "host-file"
    host.write_text(host_text)
    wt = tmp / "wt"
    (wt / folder).mkdir(parents=True)
    (wt / linked).symlink_to(host)
    os.mkfifo(wt / "AGENTS.md")
    return wt


def test_a_memory_file_linked_to_a_host_file_is_not_read_into_the_prompt(
        tmp_path: Path) -> None:
    from orchestrator.agent.prompt import PromptSources, build_prompt
    from orchestrator.model import Task

    wt = hostile_tree(tmp_path, ".claude", "HOST-ONLY-CONTENT\n", "CLAUDE.md")
    (wt / ".claude" / "CLAUDE.md").write_text("real memory\n")
    prompt = within(10, lambda: build_prompt(Task(id="task_001", subject="x"), [],
                                             PromptSources(wt, home=tmp_path / "home")))
    text = str(prompt.system)
    assert "real memory" in text and "HOST-ONLY-CONTENT" not in text


def test_worktreeinclude_copies_never_follow_a_link_the_agent_put_on_the_way(
        repo: Path, tmp_path: Path) -> None:
    from orchestrator.git import Git
    from orchestrator.worktree.setup import copy_included

    (repo / ".gitignore").write_text("conf/\n.env\n")
    (repo / ".worktreeinclude").write_text("conf/secret.env\n.env\n")
    git(repo, "add", ".gitignore", ".worktreeinclude")
    git(repo, "commit", "-qm", "include")
    (repo / "conf").mkdir()
    (repo / "conf" / "secret.env").write_text("TOKEN=abc\n")
    (repo / ".env").write_text("A=1\n")
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "task/x", str(wt))
    outside = tmp_path / "outside"
    outside.mkdir()
    (wt / "conf").symlink_to(outside)  # the agent's link where a folder should be
    copied = copy_included(Git(repo), repo, wt)
    assert copied == [".env"] and (wt / ".env").read_text() == "A=1\n"
    assert list(outside.iterdir()) == []  # nothing written through the link


def test_a_shared_folders_key_file_is_not_read_through_a_link(tmp_path: Path) -> None:
    from orchestrator.config import SharedFolder
    from orchestrator.worktree.shared import key_of

    wt = hostile_tree(tmp_path, "web", '{"the host": "file"}', "package-lock.json")
    (wt / "web" / "package-lock.json").write_text("{}")
    os.mkfifo(wt / "web" / "yarn.lock")
    spec = SharedFolder()
    assert key_of(wt, "node_modules", spec) is None  # its only key file is a link
    assert within(10, lambda: key_of(wt, "web/node_modules", spec)) is not None
    (wt / "linked").symlink_to(wt / "web")
    assert key_of(wt, "linked/node_modules", spec) is None  # a linked folder on the way
