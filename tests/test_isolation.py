"""Isolation by construction (issue 29): checks run where the agent runs, the sandbox is
unprivileged with no socket outside it, and every process a run starts ends with it —
for bash, the checks, setup commands and the command backend. Real bubblewrap, real
sockets (a live PostgreSQL cluster's among them), real processes."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.agent.base import ToolContext
from orchestrator.agent.tools.shell import BashTool
from orchestrator.backends.command import CommandBackend
from orchestrator.board import open_board
from orchestrator.board.tasklogs import TaskLog
from orchestrator.checks import run_checks
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.model import Status, Task
from orchestrator.protocols import RunContext, Workspace
from orchestrator.sandbox import Sandbox, safe_env
from orchestrator.worktree.setup import run_setup
from tests.helpers import git, survivors
from tests.pg import Cluster
from tests.test_backend_agent import ClaimFn, claim  # noqa: F401 (the fixture)
from tests.test_sandbox import needs_bwrap
from tests.test_team_support import cli, team_env

pytestmark = needs_bwrap

PROBE = """import socket, sys
for path in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        print("REACHED", path)
    except OSError as exc:
        print("refused", path, type(exc).__name__)
"""


@pytest.fixture
def worktree(repo: Path) -> Path:
    wt = repo / ".worktrees/task_001"
    git(repo, "worktree", "add", "-q", "-b", "task/001-x", str(wt))
    return wt


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[Path]:
    """A live AF_UNIX listener in a folder of its own."""
    folder = tmp_path / "daemon"
    folder.mkdir()
    path = folder / "s.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen(4)
        yield path


def bash(worktree: Path, command: str, box: Sandbox | None = None) -> str:
    ctx = ToolContext(cwd=worktree, env=safe_env(os.environ),
                      sandbox=box or Sandbox.detect("on"))
    return BashTool().run({"command": command, "timeout": 60}, ctx).content


def test_no_unix_socket_outside_the_sandbox_can_be_reached(
        worktree: Path, listener: Path, pg_cluster: Cluster, repo: Path) -> None:
    pg_socket = next(pg_cluster.socket_dir.glob(".s.PGSQL.*"))
    # the person names the listener's folder as a toolchain, and one sits in the git folder
    git_socket = repo / ".git/fsmonitor--daemon.ipc"
    with socket.socket(socket.AF_UNIX) as fsmonitor:
        fsmonitor.bind(str(git_socket))
        fsmonitor.listen(1)
        box = Sandbox.detect("on", read_only=[str(listener.parent)])
        (worktree / "probe.py").write_text(PROBE)
        targets = [str(p) for p in (listener, pg_socket, git_socket, "/run/systemd/private",
                                    "/var/run/postgresql/.s.PGSQL.5432")]
        out = bash(worktree, "python3 probe.py " + " ".join(targets), box)
        assert "REACHED" not in out and out.count("refused") == len(targets), out
        # the checks run there too
        log = TaskLog(Layout.at(repo).ensure(), "task_001", actor="t")
        checks = run_checks("python3 probe.py " + " ".join(targets), cwd=worktree,
                            env=safe_env(os.environ), log=log, timeout=60, sandbox=box)
        assert "REACHED" not in checks.output_tail, checks.output_tail
        assert checks.output_tail.count("refused") == len(targets)


def test_the_sandbox_is_unprivileged_even_for_root(worktree: Path) -> None:
    out = bash(worktree, "id -u; grep CapEff /proc/self/status; ls /proc | grep -c '^[0-9]'; "
                         "mount -o remount,rw / 2>&1 || echo no-remount; "
                         "mount -o remount,rw \"$PWD/..\" 2>&1 || echo no-remount; "
                         "unshare -r true 2>&1 && echo nested-ns || echo no-nested-ns; "
                         "cat /etc/shadow | wc -c; ls /home /root /run /var 2>&1 | wc -l")
    lines = out.splitlines()
    assert lines[0] != "0", out
    assert lines[1].split()[-1] == "0000000000000000", out
    assert int(lines[2]) < 10, out  # only the sandbox's own processes
    assert out.count("no-remount") == 2, out
    assert lines[-2].strip() == "0", out  # /etc/shadow is masked
    assert str(os.getpid()) not in bash(worktree, "ls /proc")


def escapers(marker: str) -> str:
    """A command line that starts children trying to outlive the run, every way."""
    return (f"setsid sleep {marker}1 & nohup sleep {marker}2 >/dev/null 2>&1 & "
            f"(sh -c 'sleep {marker}3 &' &) ; "
            f"python3 -c 'import os,time\nif os.fork()==0:\n os.setsid()\n if os.fork()==0:\n"
            f"  os.execvp(\"sleep\",[\"sleep\",\"{marker}4\"])' ; sleep 0.3")


def gone(marker: str) -> bool:
    deadline = time.monotonic() + 5
    while survivors(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = survivors(marker)
    for pid in left:  # never leave them behind when the test fails
        with __import__("contextlib").suppress(OSError):
            os.kill(pid, 9)
    return not left


def marker() -> str:
    return str(900000 + uuid.uuid4().int % 90000)


def test_every_process_of_bash_checks_and_setup_ends_with_them(
        worktree: Path, repo: Path) -> None:
    box = Sandbox.detect("on")
    m = marker()
    bash(worktree, escapers(m), box)
    assert gone(m), "bash"
    m = marker()
    log = TaskLog(Layout.at(repo).ensure(), "task_001", actor="t")
    run_checks(escapers(m), cwd=worktree, env=safe_env(os.environ), log=log, timeout=60,
               sandbox=box)
    assert gone(m), "checks"
    m = marker()
    run_setup([escapers(m)], worktree, {}, 60, log, "task_001", box)
    assert gone(m), "setup"


@pytest.fixture
def command_run(repo: Path, worktree: Path) -> Iterator[tuple[Layout, Workspace]]:
    layout = Layout.at(repo).ensure()
    with open_board(layout) as board:
        ws = Workspace(task_id="task_001", path=worktree, branch="task/001-x", base="main",
                       base_commit=None, env={})
        yield layout, ws
        del board


def run_command(layout: Layout, ws: Workspace, cmd: str, *, timeout: float | None = None,
                stop: threading.Event | None = None) -> None:
    with open_board(layout) as board:
        ctx = RunContext(task=Task(id="task_001", subject="x"), token=1, teammate="alice",
                         workspace=ws, board=board, layout=layout,
                         log=TaskLog(layout, "task_001", actor="alice"),
                         stop=stop or threading.Event(), timeout=timeout, command=cmd)
        CommandBackend(Config(), layout).run(ctx)


def test_every_process_of_the_command_backend_ends_with_the_run(
        command_run: tuple[Layout, Workspace]) -> None:
    layout, ws = command_run
    m = marker()  # the run ends by itself (the task goes to review)
    run_command(layout, ws, escapers(m))
    assert gone(m), "exit"
    m = marker()  # the run times out
    run_command(layout, ws, escapers(m) + "; sleep 60", timeout=2)
    assert gone(m), "timeout"
    m = marker()  # cancel, budget stop and a teammate's stop all set the run's stop event
    stop = threading.Event()
    threading.Timer(1.5, stop.set).start()
    run_command(layout, ws, escapers(m) + "; sleep 60", stop=stop)
    assert gone(m), "stop"


def test_checks_the_agent_wrote_run_in_its_sandbox_without_the_key(repo: Path) -> None:
    """The red team's first escape: a test file the agent wrote, imported by the checks
    on the host, rewrote .git/config, moved main and read the key."""
    hostile = (
        "import os, pathlib, subprocess\n"
        "common = subprocess.run(['git', 'rev-parse', '--git-common-dir'], text=True,\n"
        "                        capture_output=True).stdout.strip()\n"
        "for rel, text in (('config', '[core]\\n\\thooksPath=/tmp\\n'),\n"
        "                  ('refs/heads/main', '0' * 40 + '\\n')):\n"
        "    try:\n"
        "        with open(os.path.join(common, rel), 'a') as f: f.write(text)\n"
        "    except OSError as exc: print('refused', rel, exc)\n"
        "subprocess.run(['git', 'branch', '-f', 'main', 'HEAD'])\n"
        "pathlib.Path('seen-env.txt').write_text(repr(dict(os.environ)))\n"
    )
    (repo / "hostile.txt").write_text(hostile)
    git(repo, "add", "hostile.txt")
    git(repo, "commit", "-qm", "the agent's payload")
    with open_board(Layout.at(repo)) as board:
        board.add("hostile checks")
    (repo / "orchestrator.toml").write_text(
        "[team]\ncommand = \"cp hostile.txt test_x.py\"\n"
        "verify = \"python3 test_x.py\"\n[agent]\nsandbox = \"on\"\n")
    main, config = git(repo, "rev-parse", "main"), (repo / ".git/config").read_text()
    env = team_env(ANTHROPIC_API_KEY="sk-ant-isolation-test-0123456789")
    res = cli(repo, "up", "--burst", "-n", "1", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    with open_board(Layout.at(repo)) as board:
        task = board.list()[0]
    assert task.status is Status.REVIEW, task.error
    assert git(repo, "rev-parse", "main") == main
    assert (repo / ".git/config").read_text() == config
    seen = (repo / ".worktrees" / task.id / "seen-env.txt").read_text()
    assert "sk-ant-isolation-test" not in seen


def test_every_process_of_claude_code_ends_with_its_run(
        repo: Path, claim: ClaimFn) -> None:  # noqa: F811
    """A CLI that leaves children behind when it exits (and one that hangs until killed)."""
    from orchestrator.backends.claude_code import ClaudeCodeBackend

    for hang, why in ((False, "exit"), (True, "timeout")):
        m = marker()
        fake = repo.parent / f"claude-{why}"
        fake.write_text(f"#!/bin/sh\n{escapers(m)}\necho 'no session' >&2\n"
                        + ("sleep 60\n" if hang else "exit 3\n"))
        fake.chmod(0o755)
        c = claim()
        config = Config.load(repo, environ={}, overrides={
            "claude_code": {"binary": str(fake)}, "agent": {"sandbox": "on"}})
        ctx = c.ctx()
        ctx.timeout = 3
        result = ClaudeCodeBackend(config, c.layout).run(ctx)
        assert not result.ok
        assert gone(m), why


def _host_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))  # no packet is sent: only the route is looked up
            addr = str(s.getsockname()[0])
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


@pytest.mark.skipif(__import__("shutil").which("slirp4netns") is None,
                    reason="slirp4netns is not installed")
def test_a_network_of_its_own_keeps_the_host_s_loopback_and_abstract_sockets_out(
        worktree: Path, repo: Path) -> None:
    from orchestrator.sandbox import task_sandbox

    name = f"orch-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX) as abstract, socket.socket() as loop, \
            socket.socket() as outside:
        abstract.bind("\0" + name)
        abstract.listen(4)
        loop.bind(("127.0.0.1", 0))
        loop.listen(4)
        outside.bind(("0.0.0.0", 0))
        outside.listen(4)
        host = _host_address()
        probe = (
            "python3 -c \"import socket, sys\n"
            "def tcp(h, p):\n"
            "    try:\n"
            "        socket.create_connection((h, int(p)), timeout=3).close(); return 'REACHED'\n"
            "    except OSError: return 'refused'\n"
            "u = socket.socket(socket.AF_UNIX)\n"
            f"print('abstract', 'REACHED' if u.connect_ex('\\\\0{name}') == 0 else 'refused')\n"
            f"print('loopback', tcp('127.0.0.1', {loop.getsockname()[1]}))\n"
            f"print('outside', tcp('{host}', {outside.getsockname()[1]}) if '{host}' != 'None'"
            " else 'REACHED')\n\"")
        (worktree / "probe.sh").write_text(probe + "\n")
        for own, want in ((False, ["abstract REACHED", "loopback REACHED", "outside REACHED"]),
                          (True, ["abstract refused", "loopback refused", "outside REACHED"])):
            config = Config.load(repo, environ={}, overrides={
                "agent": {"sandbox": "on", "network": True},
                "sandbox": {"own_network": own}})
            out = bash(worktree, "sh probe.sh", task_sandbox(config, root=repo))
            assert out.splitlines() == want, (own, out)
