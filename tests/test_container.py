"""The container runner (``[sandbox] runner = "podman"``) gives the bubblewrap sandbox's
guarantees with a full container per command (issue 29, item 5): real podman with runc,
an image made with ``podman import`` from a tarball of host files (no registry here)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from orchestrator.agent.base import ToolContext
from orchestrator.agent.tools.shell import BashTool
from orchestrator.board.tasklogs import TaskLog
from orchestrator.config import Config
from orchestrator.errors import ConfigError
from orchestrator.layout import Layout
from orchestrator.process import run_streamed
from orchestrator.sandbox import Sandbox, safe_env
from tests.helpers import git, survivors

PODMAN = shutil.which("podman")
pytestmark = pytest.mark.skipif(PODMAN is None, reason="podman is not installed "
                                "(scripts/test-deps installs podman and runc)")
IMAGE = "localhost/orch-test-shell:2"


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PODMAN), "--runtime", "runc", *args], capture_output=True,
                          text=True, check=check, timeout=120)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny image: dash as /bin/sh, bash, cat and id with their libraries, a marker."""
    if podman("image", "exists", IMAGE, check=False).returncode == 0:
        return IMAGE
    root = tmp_path_factory.mktemp("image")
    tarball = root / "rootfs.tar"
    with tarfile.open(tarball, "w") as tar:
        for src, dst in (("/usr/bin/dash", "bin/sh"), ("/usr/bin/cat", "bin/cat"),
                         ("/usr/bin/id", "bin/id"), ("/usr/bin/bash", "usr/bin/bash")):
            tar.add(src, dst)
        for lib in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2",
                    "/lib/x86_64-linux-gnu/libselinux.so.1",
                    "/lib/x86_64-linux-gnu/libpcre2-8.so.0", "/lib/x86_64-linux-gnu/libtinfo.so.6"):
            if os.path.exists(lib):
                tar.add(os.path.realpath(lib), lib.lstrip("/"))
        marker = root / "IMAGE-MARKER"
        marker.write_text("from the image\n")
        tar.add(marker, "IMAGE-MARKER")
    podman("import", str(tarball), IMAGE)
    return IMAGE


@pytest.fixture
def worktree(repo: Path) -> Path:
    wt = repo / ".worktrees/task_001"
    git(repo, "worktree", "add", "-q", "-b", "task/001-x", str(wt))
    return wt


def bash(worktree: Path, command: str, box: Sandbox, timeout: float = 60) -> str:
    ctx = ToolContext(cwd=worktree, env=safe_env(os.environ), sandbox=box)
    return BashTool().run({"command": command, "timeout": timeout}, ctx).content


def test_the_repository_is_read_only_and_commits_come_in_verified(
        repo: Path, worktree: Path) -> None:
    box = Sandbox.detect("on", runner="podman")
    main, config = git(repo, "rev-parse", "main"), (repo / ".git/config").read_text()
    out = bash(worktree, f"id -u; grep CapEff /proc/self/status; "
                         f"echo x >> {repo}/.git/config; git branch -f main HEAD; "
                         f"echo hi > new.txt && git add new.txt && git commit -qm boxed && "
                         f"echo committed", box)
    assert out.splitlines()[0] == "65534" and "0000000000000000" in out, out
    assert "committed" in out, out
    assert git(repo, "rev-parse", "main") == main
    assert (repo / ".git/config").read_text() == config
    assert git(repo, "log", "-1", "--format=%s", "task/001-x") == "boxed"
    assert (worktree / "new.txt").stat().st_uid == os.getuid()  # yours, not the container's
    git(repo, "fsck", "--strict", "--no-dangling")


def test_no_host_socket_and_every_process_ends_with_the_container(
        repo: Path, worktree: Path, tmp_path: Path) -> None:
    box = Sandbox.detect("on", runner="podman")
    path = tmp_path / "daemon.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen(1)
        probe = (f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
                 f"s.connect('{path}')\" 2>&1 | tail -1; ls /run /var/run 2>&1 | grep -c sock")
        out = bash(worktree, probe, box)
        assert "FileNotFoundError" in out or "No such file" in out, out
    mark = str(800000 + uuid.uuid4().int % 90000)
    bash(worktree, f"setsid sleep {mark}1 & nohup sleep {mark}2 >/dev/null 2>&1 & echo ok", box)
    assert not survivors(f"sleep {mark}")
    # the client killed at a timeout: the container is removed all the same
    log = TaskLog(Layout.at(repo).ensure(), "task_001", actor="t")
    res = run_streamed(f"sleep {mark}3", cwd=worktree, env=safe_env(os.environ), log=log,
                       timeout=3, sandbox=box)
    assert res.timed_out
    deadline = time.monotonic() + 10
    while survivors(f"sleep {mark}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not survivors(f"sleep {mark}")


def test_the_main_checkout_s_devcontainer_image_and_env_are_used_never_the_worktree_s(
        repo: Path, worktree: Path, image: str) -> None:
    (repo / ".devcontainer").mkdir()
    (repo / ".devcontainer/devcontainer.json").write_text(
        '{\n  // the person\'s\n  "image": "' + image + '",\n  "containerEnv": '
        '{"FROM_DEVCONTAINER": "yes"},\n}\n')
    (worktree / ".devcontainer").mkdir()  # the agent's own, naming another image
    (worktree / ".devcontainer/devcontainer.json").write_text(
        json.dumps({"image": "docker.io/evil/image", "containerEnv": {"EVIL": "1"}}))
    box = Sandbox.detect("on", runner="podman", root=repo)
    assert box.container is not None and box.container.image == image
    out = bash(worktree, "cat /IMAGE-MARKER; echo \"$FROM_DEVCONTAINER$EVIL\"; id -u", box)
    assert out.splitlines() == ["from the image", "yes", "65534"], out
    # a sandbox.image setting wins over the devcontainer
    config = Config.load(repo, environ={}, overrides={"sandbox": {"runner": "podman",
                                                                  "image": "other:1"}})
    from orchestrator.sandbox import task_sandbox

    other = task_sandbox(config, root=repo)
    assert other.container is not None and other.container.image == "other:1"


def test_a_runner_that_is_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match=r"sandbox\.runner = podman, but podman is not installed"):
        Sandbox.detect("on", runner="podman")
    with pytest.raises(ConfigError, match=r"sandbox\.runner must be one of"):
        Sandbox.detect("on", runner="lxc")
