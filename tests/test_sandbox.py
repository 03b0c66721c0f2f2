"""The bubblewrap sandbox around bash: what it lets through and what it stops."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.agent.tools.shell import BashTool
from orchestrator.errors import ConfigError
from orchestrator.sandbox import Sandbox, _probe, safe_env
from tests.helpers import child_pids, git

needs_bwrap = pytest.mark.skipif(_probe()[1] is not None,
                                 reason=f"bubblewrap unusable here: {_probe()[1]}")


@pytest.fixture
def worktree(repo: Path) -> Path:
    git(repo, "worktree", "add", "-q", "-b", "task/001-x", str(repo.parent / "wt"))
    return repo.parent / "wt"


def bash(worktree: Path, command: str, *, network: bool = False, timeout: float = 60) -> \
        ToolResult:
    ctx = ToolContext(cwd=worktree, env=safe_env(os.environ),
                      sandbox=Sandbox.detect("on", network=network))
    return BashTool().run({"command": command, "timeout": timeout}, ctx)


@pytest.fixture
def no_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    _probe.cache_clear()
    yield
    _probe.cache_clear()


def test_modes_and_bad_mode() -> None:
    assert Sandbox.detect("off") == Sandbox(enabled=False)
    assert Sandbox.detect("off").wrap(["true"], Path("/")) == ["true"]
    with pytest.raises(ConfigError, match=r"agent\.sandbox must be one of auto, on, off"):
        Sandbox.detect("maybe")


def test_without_bubblewrap_auto_is_off_with_a_notice_and_on_is_an_error(no_bwrap: None) -> None:
    box = Sandbox.detect("auto")
    assert not box.enabled and box.notice is not None and "not installed" in box.notice
    with pytest.raises(ConfigError, match=r"agent\.sandbox = on, but bubblewrap .* not installed"):
        Sandbox.detect("on")


@needs_bwrap
def test_auto_turns_it_on_where_bubblewrap_works() -> None:
    assert Sandbox.detect("auto").enabled


@needs_bwrap
def test_write_outside_the_worktree_is_blocked(worktree: Path, repo: Path) -> None:
    victim = Path("/var/tmp") / f"orch-sandbox-test-{uuid.uuid4().hex}"
    try:
        r = bash(worktree, f"echo pwned > {victim}; echo pwned > {repo}/README.md; "
                 "echo ok > inside.txt")
        assert "No such file or directory" in r.content  # /var is not there at all
        assert not victim.exists()
        assert (repo / "README.md").read_text() == "# sample\n"
        assert (worktree / "inside.txt").read_text() == "ok\n"
    finally:
        victim.unlink(missing_ok=True)


@needs_bwrap
def test_git_commit_works_in_the_worktree_but_hooks_and_config_stay_read_only(
        worktree: Path, repo: Path) -> None:
    r = bash(worktree, "echo new > f.txt && git add f.txt && git commit -qm 'from the box' "
             "&& echo committed; echo 'touch /tmp/x' > $(git rev-parse --git-common-dir)/hooks/"
             "post-commit; git config core.hooksPath /tmp")
    assert r.content.startswith("committed\n"), r.content
    assert r.content.count("Read-only file system") >= 1
    assert git(repo, "log", "-1", "--format=%s", "task/001-x") == "from the box"
    assert not (repo / ".git/hooks/post-commit").exists()
    assert "hookspath" not in (repo / ".git/config").read_text().lower()


@needs_bwrap
def test_network_is_off_unless_allowed(worktree: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]
        probe = (f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo connected "
                 "|| echo refused")
        assert bash(worktree, probe).content == "refused\n"
        assert bash(worktree, probe, network=True).content == "connected\n"


@needs_bwrap
def test_private_tmp_and_no_leftover_processes(worktree: Path) -> None:
    name = f"orch-{uuid.uuid4().hex}"
    r = bash(worktree, f"echo $TMPDIR; echo hi > /tmp/{name} && cat /tmp/{name}; "
             "sleep 60 & echo started")
    assert r.content == "/tmp\nhi\nstarted\n"
    assert not (Path("/tmp") / name).exists()
    assert child_pids() == []
    r = bash(worktree, "sleep 60 & sleep 60", timeout=1)
    assert r.is_error and "timed out" in r.content
    assert child_pids() == []
