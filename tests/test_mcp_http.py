"""`orchestrator mcp --http`: the board's tools over streamable HTTP, a bearer token on
every request, checked with the SDK's own HTTP client and the official conformance suite."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

ROOT = Path(__file__).resolve().parents[1]
CONFORMANCE = ROOT / ".venv" / "npm" / "node_modules" / ".bin" / "conformance"
SCENARIOS = ("server-initialize", "ping", "tools-list", "server-sse-multiple-streams")


def serve(repo: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "mcp", "--http", *args],
                            cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    if "serving MCP on" not in line:
        proc.kill()
        raise AssertionError(f"no server: {line}{proc.communicate()[1]}")
    return proc, line.split("serving MCP on ", 1)[1].split()[0]


def stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    out, err = proc.communicate(timeout=20)
    return out + err


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    f = tmp_path / "token"
    f.write_text(secrets.token_urlsafe(32) + "\n")
    return f


@pytest.fixture
def server(repo: Path, token_file: Path) -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    proc, url = serve(repo, "127.0.0.1:0", "--token-file", str(token_file))
    try:
        yield url, token_file.read_text().strip(), proc
    finally:
        if proc.poll() is None:
            stop(proc)


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "test", "version": "1"}}}


def post(url: str, headers: dict[str, str], message: dict[str, Any] | None = None) -> int:
    body = json.dumps(message or {"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    req = urllib.request.Request(url, body, {"content-type": "application/json",
                                             "accept": "application/json, text/event-stream",
                                             **headers})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_sdk_client_drives_the_board_with_the_token_and_nothing_passes_without(
        server: tuple[str, str, subprocess.Popen[str]]) -> None:
    url, token, proc = server
    for headers in ({}, {"authorization": "Bearer wrong-token-wrong-token"},
                    {"authorization": token}, {"authorization": f"Basic {token}"}):
        assert post(url, headers) == 401

    async def lead() -> tuple[set[str], Any, Any]:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with http, streamable_http_client(url, http_client=http) as (r, w), \
                ClientSession(r, w) as session:
            await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            added = await session.call_tool("add_task", {"subject": "from afar"})
            listed = await session.call_tool("list_tasks", {})
            return tools, added, listed

    tools, added, listed = anyio.run(lead)
    assert {"add_task", "list_tasks", "merge", "events"} <= tools
    assert not added.is_error and "task_001" in added.content[0].text
    assert "from afar" in listed.content[0].text
    assert token not in stop(proc)  # never logged


def test_an_address_off_loopback_needs_a_token_and_bad_input_is_one_line(
        repo: Path, tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator", "mcp", *args], cwd=repo,
                              capture_output=True, text=True, timeout=60)

    p = run("--http", "0.0.0.0:0")
    assert p.returncode == 1 and "--token-file" in p.stderr and p.stderr.count("\n") == 1
    short = tmp_path / "short"
    short.write_text("abc\n")
    p = run("--http", "0.0.0.0:0", "--token-file", str(short))
    assert p.returncode == 1 and "too short" in p.stderr and "abc" not in p.stderr
    p = run("--http", "nonsense")
    assert p.returncode == 1 and "HOST:PORT" in p.stderr
    p = run("--token-file", str(short))
    assert p.returncode == 1 and "goes with --http" in p.stderr


def test_the_official_conformance_scenarios_pass(repo: Path) -> None:
    if not CONFORMANCE.exists():
        pytest.skip("npm package @modelcontextprotocol/conformance is not installed "
                    "(scripts/test-deps)")
    proc, url = serve(repo, "127.0.0.1:0")
    try:
        for scenario in SCENARIOS:
            t0 = time.monotonic()
            p = subprocess.run([str(CONFORMANCE), "server", "--url", url, "--scenario",
                                scenario], cwd=repo, capture_output=True, text=True,
                               timeout=120)
            assert p.returncode == 0, f"{scenario} ({time.monotonic() - t0:.1f}s):\n" \
                                      f"{p.stdout[-3000:]}\n{p.stderr[-2000:]}"
    finally:
        stop(proc)


def test_claude_code_connects_to_it_as_an_http_client(
        server: tuple[str, str, subprocess.Popen[str]], tmp_path: Path) -> None:
    claude = ROOT / ".venv" / "npm" / "node_modules" / ".bin" / "claude"
    if not claude.exists():
        pytest.skip("Claude Code is not installed (scripts/test-deps)")
    url, token, _ = server
    env = {**os.environ, "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "ANTHROPIC_API_KEY": "sk-ant-test-dummy"}
    work = tmp_path / "project"
    work.mkdir()

    def claude_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(claude), *args], cwd=work, env=env, capture_output=True,
                              text=True, timeout=120)

    p = claude_cli("mcp", "add", "--transport", "http", "board", url, "--header",
                   f"Authorization: Bearer {token}")
    assert p.returncode == 0, p.stderr
    p = claude_cli("mcp", "list")
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("board")), "")
    assert "Connected" in line, p.stdout + p.stderr
    # and without the token it is refused
    claude_cli("mcp", "remove", "board")
    claude_cli("mcp", "add", "--transport", "http", "board", url)
    p = claude_cli("mcp", "list")
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("board")), "")
    assert line and "Connected" not in line, p.stdout


@pytest.mark.parametrize("address", ["127.0.0.2", "127.1.2.3", "127.0.0.1"])
def test_a_loopback_address_without_a_token_checks_host_and_origin(
        repo: Path, address: str) -> None:
    """Issue 29 item 12: the SDK checks Host only for 127.0.0.1/localhost/::1; on any other
    loopback address a rebinding page (Host: evil.example) drove the board."""
    proc, url = serve(repo, f"{address}:0")
    try:
        port = url.rsplit(":", 1)[1].split("/")[0]
        assert post(url, {}, INITIALIZE) == 200  # urllib sends Host: ADDRESS:PORT
        assert post(url, {"host": f"evil.example:{port}"}, INITIALIZE) in (400, 421)
        assert post(url, {"host": f"evil.example:{port}",
                          "origin": f"http://evil.example:{port}"}, INITIALIZE) in (400, 403, 421)
        assert post(url, {"origin": f"http://evil.example:{port}"}, INITIALIZE) == 403
        assert post(url, {"origin": f"http://{address}:{port}"}, INITIALIZE) == 200
    finally:
        stop(proc)
