"""The agent never holds the key (issue 29, guarantee 7): a credential proxy on the host
adds it to requests for the run's model endpoint; the run sees only a token. Real HTTP
on loopback (the model API stand-in), real sandboxed processes."""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
from pathlib import Path

import pytest

from orchestrator.backends.command import CommandBackend
from orchestrator.board import open_board
from orchestrator.board.tasklogs import TaskLog
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.model import Task
from orchestrator.protocols import RunContext, Workspace
from orchestrator.sandbox import Sandbox, safe_env
from orchestrator.sandbox.credproxy import CredentialProxy, run_env
from tests.helpers import git
from tests.loopback import LoopbackAPI
from tests.test_sandbox import needs_bwrap

KEY = "sk-ant-proxy-test-0123456789abcdef"


def request(url: str, target: str, token: str | None, *, method: str = "POST") -> tuple[int, str]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    body = json.dumps({"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "hi"}]})
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    if token is not None:
        headers["x-api-key"] = token
    conn.request(method, target, body=body, headers=headers)
    resp = conn.getresponse()
    out = resp.status, resp.read().decode(errors="replace")
    conn.close()
    return out


def test_the_proxy_adds_the_key_only_for_the_run_s_token_and_endpoint() -> None:
    with LoopbackAPI() as api:
        api.reply("hello")
        api.reply("again")
        proxy = CredentialProxy(api.url, KEY).start()
        try:
            status, body = request(proxy.url, "/v1/messages", proxy.token)
            assert status == 200 and "hello" in body, body
            assert api.headers[-1]["x-api-key"] == KEY
            seen = len(api.headers)
            refused = {
                "no token": request(proxy.url, "/v1/messages", None),
                "the real key is no token": request(proxy.url, "/v1/messages", KEY),
                "another run's token": request(proxy.url, "/v1/messages", "orch-run-x"),
                "another host": request(proxy.url, "http://example.com/v1/messages",
                                        proxy.token),
                "climbing out": request(proxy.url, "/v1/../../etc/passwd", proxy.token),
                "connect": request(proxy.url, "example.com:443", proxy.token,
                                   method="CONNECT"),
            }
            assert {k: v[0] for k, v in refused.items()} == {
                "no token": 401, "the real key is no token": 401, "another run's token": 401,
                "another host": 403, "climbing out": 403, "connect": 403}
            assert len(api.headers) == seen  # none of them reached the endpoint
            assert all(KEY not in body for _, body in refused.values())
            # (http.server itself makes a ``//host/...`` target a plain path of the endpoint)
            assert proxy.target("//evil.example/v1") is None
            assert proxy.target("/v1/messages?beta=true") == "/v1/messages?beta=true"
            status, body = request(proxy.url, "/v1/messages", proxy.token)
            assert status == 200 and "again" in body
        finally:
            proxy.close()
        with socket.socket() as s:  # the token dies with the run
            assert s.connect_ex(("127.0.0.1", int(proxy.url.rsplit(":", 1)[1]))) != 0


def test_run_env_replaces_the_key_and_drops_other_secrets_only_in_the_sandbox() -> None:
    environ = {"ANTHROPIC_API_KEY": KEY, "GITHUB_TOKEN": "ghp_" + "x" * 30, "PATH": "/usr/bin",
               "MY_PASSWORD": "hunter2hunter2"}
    with run_env(dict(environ), ["MY_PASSWORD"], sandbox=Sandbox(enabled=True,
                                                                 network=True)) as (env, _):
        assert env["ANTHROPIC_API_KEY"].startswith("orch-run-")
        assert env["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
        assert "GITHUB_TOKEN" not in env and env["MY_PASSWORD"] == "hunter2hunter2"
        assert KEY not in json.dumps(env)
    with run_env(dict(environ), sandbox=Sandbox(enabled=False)) as (env, _):
        assert env == environ  # sandbox.backends = false: on the host as before


@needs_bwrap
@pytest.mark.parametrize("network", ["host", "own", "none"])
def test_the_key_is_in_no_process_a_sandboxed_run_can_see(
        repo: Path, monkeypatch: pytest.MonkeyPatch, network: str) -> None:
    """With the host's network the run reaches the proxy on the host's loopback; with
    one of its own (slirp4netns) or none, through the proxy's Unix socket bound into the
    sandbox (the same URL inside)."""
    if network == "own" and __import__("shutil").which("slirp4netns") is None:
        pytest.skip("slirp4netns is not installed")
    wt = repo / ".worktrees/task_001"
    git(repo, "worktree", "add", "-q", "-b", "task/001-x", str(wt))
    layout = Layout.at(repo).ensure()
    (wt / "ask.py").write_text(
        "import http.client, json, os\n"
        "url = os.environ['ANTHROPIC_BASE_URL'].removeprefix('http://')\n"
        "host, port = url.split(':')\n"
        "c = http.client.HTTPConnection(host, int(port))\n"
        "c.request('POST', '/v1/messages', body=json.dumps({'model': 'm', 'max_tokens': 5,\n"
        "          'messages': [{'role': 'user', 'content': 'hi'}]}),\n"
        "          headers={'x-api-key': os.environ['ANTHROPIC_API_KEY'],\n"
        "                   'content-type': 'application/json'})\n"
        "print('MODEL SAID', c.getresponse().read().decode())\n")
    command = ("cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' > seen.txt; "
               "env >> seen.txt; ls /proc >> seen.txt; python3 ask.py")
    with LoopbackAPI() as api:
        api.reply("through the proxy")
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)  # the teammate holds the key
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        with open_board(layout) as board:
            ctx = RunContext(task=Task(id="task_001", subject="x"), token=1, teammate="alice",
                             workspace=Workspace(task_id="task_001", path=wt,
                                                 branch="task/001-x", base="main",
                                                 base_commit=None, env={}),
                             board=board, layout=layout,
                             log=TaskLog(layout, "task_001", actor="alice"),
                             stop=threading.Event(), timeout=60, command=command)
            config = Config.load(repo, environ={}, overrides={"sandbox": {
                "network": network != "none", "own_network": network == "own"}})
            result = CommandBackend(config, layout).run(ctx)
        assert result.ok, result.error
        assert "through the proxy" in (result.summary or "")
        assert api.headers[-1]["x-api-key"] == KEY
    seen = (wt / "seen.txt").read_text()
    assert KEY not in seen and "orch-run-" in seen
    assert str(os.getpid()) not in seen.split()  # not even the teammate's /proc


def test_a_sandbox_without_the_proxy_still_has_no_key() -> None:
    env = safe_env({"ANTHROPIC_API_KEY": KEY, "PATH": "/usr/bin"})
    assert "ANTHROPIC_API_KEY" not in env
    assert Sandbox(enabled=False).wrap(["true"], Path("/")) == ["true"]


@needs_bwrap
@pytest.mark.parametrize("network", [True, False])
def test_claude_code_works_through_the_proxy_and_its_bash_sees_no_key(
        repo: Path, network: bool) -> None:
    from tests.test_claude_code_support import (
        ClaudeScript,
        bash,
        claude_binary,
        claude_env,
        write,
    )
    from tests.test_team_support import cli, team_env

    claude_binary()
    look = "cat /proc/[0-9]*/environ | tr '\\0' '\\n' > seen.txt; env >> seen.txt"
    with LoopbackAPI() as api:
        ClaudeScript(api, lambda wt: [write(wt / "look.sh", look + "\n"), bash("sh look.sh"),
                                      "Looked around."])
        env = {**team_env(), **claude_env(api, ANTHROPIC_API_KEY=KEY)}
        (repo / "orchestrator.toml").write_text(
            f'[agent]\nallow = ["Bash(sh look.sh)"]\n[sandbox]\nnetwork = {str(network).lower()}\n')
        with open_board(Layout.at(repo)) as board:
            task = board.add("Look around")
        res = cli(repo, "up", "--burst", "-n", "1", "--backend", "claude-code", env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        assert api.headers and {h["x-api-key"] for h in api.headers} == {KEY}
    seen = (repo / ".worktrees" / task.id / "seen.txt").read_text()
    assert "orch-run-" in seen and KEY not in seen


def test_host_git_processes_get_no_model_key(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.git import Git

    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("SSH_AUTH_SOCK", "/run/agent.sock")  # what a push may need stays
    seen = Git(repo).run("-c", "alias.seeenv=!env", "seeenv").stdout
    assert KEY not in seen and "SSH_AUTH_SOCK=/run/agent.sock" in seen
