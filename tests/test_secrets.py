"""Secrets never reach tools, transcripts or commits (issue 16, part 3).

Which values are secret and how they are masked; bash without a sandbox asks;
the processes above every tool keep their secrets out of /proc/<pid>/environ;
a commit that would add a secret's value is refused with the reason on the task.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.agent.base import ToolContext
from orchestrator.agent.permissions import PermissionGate
from orchestrator.agent.tools import default_tools
from orchestrator.agent.toolset import Toolset
from orchestrator.board import open_board
from orchestrator.config import AgentConfig
from orchestrator.errors import SecretLeak
from orchestrator.layout import Layout
from orchestrator.model import Status, Task
from orchestrator.secrets import redact, safe_env, secret_names
from orchestrator.team.commit import commit_leftovers
from orchestrator.transcript import Output
from tests.helpers import git
from tests.test_sandbox import needs_bwrap
from tests.test_team_support import cli, team_cleanup, team_env

KEY = "sk-ant-api03-L2-test-key-0123456789abcdef"
DB_PASSWORD = "hunter2-very-secret"
DB_URL = f"postgres://app:{DB_PASSWORD}@db.internal:5432/prod"
SECRET_ENV = {"ANTHROPIC_API_KEY": KEY, "DATABASE_URL": DB_URL}


def test_which_values_are_secret() -> None:
    env = {**SECRET_ENV, "ANTHROPIC_CUSTOM_HEADERS": "x-api: abcdefgh123",
           "REDIS_URL": "redis://:pw12@cache/0", "ANTHROPIC_MODEL": "claude-sonnet-4-6",
           "ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "GIT_AUTHOR_NAME": "Ann Author",
           "HOME": "/home/somebody", "PLAIN_URL": "https://example.com/a:b@c", "GH_TOKEN": "short"}
    found = secret_names(env)
    assert found[KEY] == "ANTHROPIC_API_KEY"
    assert found[DB_URL] == found[DB_PASSWORD] == found[f"app:{DB_PASSWORD}@"] == "DATABASE_URL"
    assert found["x-api: abcdefgh123"] == "ANTHROPIC_CUSTOM_HEADERS"  # every ANTHROPIC_*…
    assert "claude-sonnet-4-6" not in found and "http://127.0.0.1:9" not in found  # …but these
    assert found[":pw12@"] == "REDIS_URL" and "pw12" not in found  # too short on its own
    assert not {"Ann Author", "/home/somebody", "short"} & set(found)
    text = f"url={DB_URL} pw={DB_PASSWORD} key={KEY} again {DB_PASSWORD}"
    assert redact(text, sorted(found, key=len, reverse=True)) == "url=*** pw=*** key=*** again ***"


def test_safe_env_drops_secret_names_and_urls_with_passwords() -> None:
    env = {**SECRET_ENV, "PLAIN_DB": "postgres://h/db", "PATH": "/bin",
           "GIT_AUTHOR_EMAIL": "a@b.c", "ANTHROPIC_BASE_URL": "https://u:pass1234@proxy/"}
    assert safe_env(env) == {"PLAIN_DB": "postgres://h/db", "PATH": "/bin",
                             "GIT_AUTHOR_EMAIL": "a@b.c"}
    assert safe_env(env, ["DATABASE_URL"])["DATABASE_URL"] == DB_URL


BASH = next(t for t in default_tools() if t.name == "bash")


@pytest.mark.parametrize(("agent", "sandboxed", "want"), [
    ({"permission_mode": "bypassPermissions"}, False, "ask"),
    ({"allow": ["Bash"]}, False, "ask"),
    ({"allow": ["Bash(*)"], "permission_mode": "bypassPermissions"}, False, "ask"),
    ({"allow": ["Bash(make:*)"]}, False, "allow"),  # an explicit rule is consent
    ({"permission_mode": "bypassPermissions", "allow_unsandboxed_bash": True}, False, "allow"),
    ({"allow": ["Bash"], "allow_unsandboxed_bash": True}, False, "allow"),
    ({}, True, "allow"),  # confined: auto-allowed as before
    ({"permission_mode": "bypassPermissions"}, True, "allow"),
])
def test_without_a_sandbox_bash_asks_unless_the_user_opted_in(
        repo: Path, agent: dict[str, object], sandboxed: bool, want: str) -> None:
    gate = PermissionGate.from_sources(AgentConfig(**agent), repo, sandboxed=sandboxed)
    decision = gate.check(BASH, {"command": "make test"})
    assert decision.behavior == want, decision.reason
    if want == "ask":
        assert "allow_unsandboxed_bash" in decision.reason


def test_tool_results_and_spills_are_masked(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", DB_URL)
    (repo / "config.txt").write_text(f"db = {DB_URL}\npassword = {DB_PASSWORD}\n" + "x" * 90_000)
    spill = repo.parent / "spill"
    ctx = ToolContext(cwd=repo, env=safe_env(os.environ), spill_dir=spill)
    ts = Toolset(default_tools(), PermissionGate.from_rules(root=repo, allow=["Bash"]), ctx)
    out = ts.call("bash", {"command": "head -c 300 config.txt; echo; echo $DATABASE_URL."})
    assert DB_PASSWORD not in out.content and "db = ***\npassword = ***" in out.content
    assert out.content.rstrip().endswith("\n.")  # the variable itself never reached the tool
    big = ts.call("read", {"file_path": "config.txt"})
    assert DB_PASSWORD not in big.content
    assert all(DB_PASSWORD not in f.read_text() for f in spill.rglob("*") if f.is_file())


def _secret_worktree(repo: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A task worktree and its base commit, with `SECRET_ENV` in the environment."""
    for k, v in SECRET_ENV.items():
        monkeypatch.setenv(k, v)
    wt = _worktree(repo)
    return wt, git(wt, "rev-parse", "HEAD")


def _worktree(repo: Path) -> Path:
    wt = repo.parent / "wt"
    git(repo, "worktree", "add", "-q", "-b", "task/001-x", str(wt))
    return wt


def test_a_commit_adding_a_secret_is_refused_with_the_reason(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wt, base = _secret_worktree(repo, monkeypatch)
    task = Task(id="task_001", subject="Add things")
    (wt / "ok.txt").write_text("nothing to see\n")
    (wt / "deep/er").mkdir(parents=True)
    (wt / "deep/er/settings.py").write_text(f"DB = '{DB_URL}'\n")
    (wt / "link").symlink_to(f"/tmp/{DB_PASSWORD}")
    with pytest.raises(SecretLeak) as err:
        commit_leftovers(wt, task, "alice", base)
    msg = str(err.value)
    assert "deep/er/settings.py holds the value of $DATABASE_URL" in msg
    assert "link holds the value of $DATABASE_URL" in msg and "ok.txt" not in msg
    assert DB_PASSWORD not in msg
    assert git(wt, "diff", "--cached", "--name-only") == ""  # the index is as it was
    assert git(wt, "rev-parse", "HEAD") == base

    (wt / "deep/er/settings.py").write_text("DB = os.environ['DATABASE_URL']\n")
    (wt / "link").unlink()
    assert commit_leftovers(wt, task, "alice", base)  # the value gone: committed

    # a commit the agent made itself is caught too (the task's branch against its base)
    (wt / "notes.md").write_text(f"key: {KEY}\n")
    git(wt, "add", "notes.md")
    git(wt, "commit", "-qm", "agent commit")
    with pytest.raises(SecretLeak, match=r"notes\.md holds the value of \$ANTHROPIC_API_KEY"):
        commit_leftovers(wt, task, "alice", base)


PROTECT = """
import os, subprocess, sys
from orchestrator.secrets import protect_process
import time
t = time.perf_counter()
protect_process()
ms = (time.perf_counter() - t) * 1000
probe = 'tr "\\\\0" "\\\\n" < /proc/$PPID/environ; echo "child: $ANTHROPIC_API_KEY"'
out = subprocess.run(["sh", "-c", probe], capture_output=True, text=True)
print(out.stdout + out.stderr)
print("parent:", os.environ["ANTHROPIC_API_KEY"])
print(f"cost {ms:.2f} ms")
"""


def test_protect_process_hides_secrets_from_proc_but_not_from_itself(repo: Path) -> None:
    env = {**os.environ, **SECRET_ENV, "HARMLESS": "visible-value"}
    out = subprocess.run([sys.executable, "-c", PROTECT], env=env, capture_output=True,
                         text=True, check=True, cwd=Path(__file__).parent.parent).stdout
    assert f"child: {KEY}" in out and f"parent: {KEY}" in out  # children still get it
    environ = out.split("child:")[0]
    assert KEY not in environ and DB_PASSWORD not in environ
    # root can still read a non-dumpable process's environ: then it is the scrubbed one
    assert "HARMLESS=visible-value" in environ or "Permission denied" in environ


# --- end to end: a real team, real tools, with and without the sandbox -----------

ANCESTORS = r"""p=$PPID; n=0
while [ "$p" -gt 0 ] && [ $n -lt 30 ]; do
  n=$((n+1))
  if e=$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null); then
    echo "pid $p readable $(printf '%s\n' "$e" | grep -c .) vars"
    printf '%s\n' "$e" | grep -E '^(ANTHROPIC_API_KEY|DATABASE_URL)='
  else echo "pid $p unreadable"; fi
  p=$(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f2)
done > probe.txt; cat probe.txt; echo key=${ANTHROPIC_API_KEY:-none}"""


@pytest.mark.parametrize("sandbox", [pytest.param("auto", marks=needs_bwrap), "off"])
def test_a_team_keeps_secrets_from_tools_logs_and_commits(repo: Path, sandbox: str) -> None:
    with open_board(Layout.at(repo)) as board:
        probe = board.add("Probe the ancestors", metadata={"script": [
            [{"tool": "bash", "args": {"command": ANCESTORS}}], "probed"]})
        leak = board.add("Leak a secret", metadata={"script": [
            [{"tool": "write", "args": {"file_path": "leak.txt",
                                        "content": f"the key is {KEY}\n"}}], "leaked"]})
    env = team_env(team_backend="scripted", board_max_attempts=1, agent_sandbox=sandbox,
                   agent_permission_mode="bypassPermissions",
                   agent_allow_unsandboxed_bash="true")
    env.update(SECRET_ENV)
    with team_cleanup(repo):
        res = cli(repo, "up", "--burst", "-n", "1", env=env)
    with open_board(Layout.at(repo)) as board:
        done, failed = board.get(probe.id), board.get(leak.id)
    assert done.status == Status.REVIEW, (done.error, res.stdout, res.stderr)
    report = (Path(done.worktree or "") / "probe.txt").read_text()
    assert "pid " in report
    assert KEY not in report and DB_PASSWORD not in report
    if sandbox == "off":  # the walk went up through teammate, spawner and lead
        assert report.count("pid ") >= 3, report
        notice = (Layout.at(repo).logs / f"{probe.id}.jsonl").read_text()
        assert "sandbox off (agent.sandbox = off); bash runs unconfined" in notice
        for line in report.splitlines():
            if line.startswith(("ANTHROPIC_API_KEY=", "DATABASE_URL=")):
                assert set(line.split("=", 1)[1]) == {"*"}, line
    assert failed.status == Status.FAILED
    assert "leak.txt holds the value of $ANTHROPIC_API_KEY" in (failed.error or "")
    history = git(repo, "log", "-p", "--all")
    layout = Layout.at(repo)
    seen = [history, layout.events.read_text(), res.stdout, res.stderr,
            *(p.read_text() for p in layout.logs.glob("*.jsonl"))]
    assert not [s for s in seen if KEY in s or DB_PASSWORD in s]


# --- issue 29 item 10: secrets stay out of streams, names, messages and MCP answers ------
def test_a_secret_split_across_reads_of_a_stream_is_still_masked(tmp_path: Path) -> None:
    from orchestrator.process import run_streamed
    from orchestrator.secrets import StreamMasker

    masker = StreamMasker([KEY, DB_PASSWORD])
    out = b""
    data = f"start {KEY} mid {DB_PASSWORD}{KEY[:5]} end".encode()
    for i in range(0, len(data), 3):  # every split point, three bytes a read
        out += masker.feed(data[i:i + 3])
    out += masker.flush()
    assert out == f"start *** mid ***{KEY[:5]} end".encode()
    assert StreamMasker([KEY]).feed(b"plain output\n") == b"plain output\n"  # no delay

    class Log:
        def __init__(self) -> None:
            self.texts: list[str] = []

        def write(self, entry: Output) -> None:
            self.texts.append(entry.text)

    half = len(KEY) // 2
    script = (f"printf '%s' '{KEY[:half]}'; sleep 0.3; printf '%s\\n' '{KEY[half:]}'; "
              f"head -c 70000 /dev/zero | tr '\\0' x; printf '%s' '{KEY}'")
    log = Log()
    env = {**os.environ, "ANTHROPIC_API_KEY": KEY}
    old = os.environ.get("ANTHROPIC_API_KEY")
    os.environ["ANTHROPIC_API_KEY"] = KEY
    try:
        res = run_streamed(script, cwd=tmp_path, env=env, log=log,  # type: ignore[arg-type]
                           timeout=30)
    finally:
        if old is None:
            del os.environ["ANTHROPIC_API_KEY"]
        else:
            os.environ["ANTHROPIC_API_KEY"] = old
    assert len(log.texts) >= 2
    assert all(KEY[:half] not in t and KEY[half:] not in t for t in log.texts), log.texts
    assert "".join(log.texts).count("***") == 2 and KEY not in res.tail


def test_a_secret_in_a_file_name_or_a_commit_message_is_refused(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wt, base = _secret_worktree(repo, monkeypatch)
    (wt / f"cache-{DB_PASSWORD}.txt").write_text("harmless content\n")
    with pytest.raises(SecretLeak, match="a file name holds the value of \\$DATABASE_URL"):
        commit_leftovers(wt, Task(id="task_001", subject="x"), "alice", base)
    (wt / f"cache-{DB_PASSWORD}.txt").unlink()
    (wt / "a.txt").write_text("a\n")
    git(wt, "add", "a.txt")
    git(wt, "commit", "-qm", f"wip\n\nused {KEY} to test")  # the agent's own commit
    (wt / "b.txt").write_text("b\n")
    with pytest.raises(SecretLeak, match="commit message of the task holds the value of "
                                         "\\$ANTHROPIC_API_KEY") as err:
        commit_leftovers(wt, Task(id="task_001", subject="x"), "alice", base)
    assert KEY not in str(err.value)
    git(wt, "reset", "-q", "--hard", base)
    (wt / "c.txt").write_text("c\n")
    with pytest.raises(SecretLeak, match="commit message"):  # our own message, from a subject
        commit_leftovers(wt, Task(id="task_001", subject=f"rotate {KEY}"), "alice", base)


def test_the_mcp_servers_answers_are_masked(repo: Path) -> None:
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    from orchestrator.board import init_repo

    with open_board(init_repo(repo)) as board:
        task = board.add("leaky", description="no secret here yet")
    # written by a process that did not hold the value (a person's paste)
    raw = board.layout.task_file(task.id)
    raw.write_text(raw.read_text().replace("no secret here yet", f"the key is {KEY}"))

    async def main() -> list[str]:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "orchestrator", "mcp"], cwd=repo,
            env={**os.environ, "ANTHROPIC_API_KEY": KEY})
        async with stdio_client(params) as (r, w), ClientSession(r, w) as session:
            await session.initialize()
            out = []
            for name, args in (("get_task", {"id": task.id}), ("list_tasks", {}),
                               ("events", {}), ("get_task", {"id": f"{KEY}"})):
                res = await session.call_tool(name, args)
                out.append("\n".join(getattr(c, "text", "") for c in res.content))
            return out

    answers = anyio.run(main)
    assert "the key is ***" in answers[0]
    assert all(KEY not in a for a in answers), answers
