"""The MCP client against real servers: server-everything (npm), mcp-server-time (PyPI),
a streamable HTTP server, and deliberately broken ones beside them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.base import ToolContext
from orchestrator.agent.permissions import PermissionGate
from orchestrator.agent.toolset import Toolset
from orchestrator.mcp.client import McpClientManager, ServerConnection
from orchestrator.mcp.config import McpSetup, load_setup
from tests.helpers import child_pids, cmdline

ROOT = Path(__file__).resolve().parent.parent
NPM_BIN = ROOT / ".venv" / "npm" / "node_modules" / ".bin"
EVERYTHING = NPM_BIN / "mcp-server-everything"
TIME = Path(sys.executable).parent / "mcp-server-time"


def _need_everything() -> None:
    if EVERYTHING.exists():
        return
    if shutil.which("npm") is None:
        pytest.skip("npm is missing, so @modelcontextprotocol/server-everything is not installed")
    pytest.fail("server-everything is not installed: run scripts/test-deps")


def _need_time() -> None:
    if not TIME.exists():
        pytest.fail("mcp-server-time is not installed: run scripts/test-deps")


# A minimal MCP server speaking raw JSON-RPC: tools only (no resources capability),
# with names that collide once sanitised, and tools that report its cwd and env.
RAW_SERVER = r'''
import json, os, sys
TOOLS = ["a.b", "a_b", "a b", "cwd", "env", "x" * 80, "x" * 81]
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, rid = msg["method"], msg["id"]
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in TOOLS]}
    elif method == "tools/call":
        name = msg["params"]["name"]
        text = os.getcwd() if name == "cwd" else os.environ.get("ORCH_TASK_ID", "") + "|" + \
            os.environ.get("SERVER_VAR", "") if name == "env" else name
        result = {"content": [{"type": "text", "text": text}]}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": rid,
                          "error": {"code": -32601, "message": "no " + method}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}), flush=True)
'''

HTTP_SERVER = r'''
import sys
from mcp.server.mcpserver import MCPServer, Context
server = MCPServer("http-test")

@server.tool()
def whoami(ctx: Context) -> str:
    """The Authorization header this request carried."""
    return (ctx.headers or {}).get("authorization", "none")

server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
'''


def write_config(root: Path, servers: dict[str, Any]) -> None:
    (root / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))


def raw_server(tmp_path: Path) -> dict[str, Any]:
    script = tmp_path / "raw_server.py"
    script.write_text(RAW_SERVER)
    return {"command": sys.executable, "args": [str(script)]}


BROKEN = {
    "exits": {"command": "sh", "args": ["-c", "echo 'cannot start: no config' >&2; exit 3"]},
    "hangs": {"command": "sleep", "args": ["300"]},
}


@pytest.fixture
def manager_for(tmp_path: Path) -> Iterator[Callable[..., McpClientManager]]:
    made: list[McpClientManager] = []

    def make(servers: dict[str, Any], *, start_timeout: float = 60.0, call_timeout: float = 60.0,
             env: dict[str, str] | None = None, cwd: Path | None = None) -> McpClientManager:
        root = tmp_path / f"proj{len(made)}"
        root.mkdir()
        write_config(root, servers)
        m = McpClientManager(load_setup(root, tmp_path / "no-plugins"), cwd=cwd or root,
                             env=env, start_timeout=start_timeout, call_timeout=call_timeout)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


def ctx(tmp_path: Path, **kw: Any) -> ToolContext:
    return ToolContext(cwd=tmp_path, env={}, spill_dir=tmp_path / "spill", **kw)


def by_name(tools: list[Any]) -> dict[str, Any]:
    return {t.name: t for t in tools}


def conn(m: McpClientManager, key: str) -> ServerConnection:
    return m.connections(key)[0]


def wait_until(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def server_pids(m: McpClientManager, key: str) -> list[int]:
    """Processes started for ``key`` (matched on its command line)."""
    target = conn(m, key).spec
    needle = " ".join([target.command or "", *target.args])
    return [p for p in child_pids() if needle in cmdline(p) or
            (target.command and cmdline(p).endswith(Path(target.command).name))]


# --- real servers, broken ones beside them ---------------------------------------


def test_real_servers_work_beside_broken_ones(manager_for: Callable[..., McpClientManager],
                                              tmp_path: Path) -> None:
    _need_everything()
    _need_time()
    m = manager_for({"everything": {"command": str(EVERYTHING)}, "time": {"command": str(TIME)},
                     **BROKEN})
    conn(m, "hangs").start_timeout = 3  # the healthy ones keep a generous time on a busy machine
    tools = by_name(m.tools())
    states = {s["server"]: s for s in m.status()}
    assert states["everything"]["state"] == "connected"
    assert states["time"]["state"] == "connected"
    assert states["exits"]["state"] == "failed"
    assert "cannot start: no config" in states["exits"]["error"]  # stderr tail is reported
    assert states["hangs"]["state"] == "failed"
    assert "did not start within 3s" in states["hangs"]["error"]
    assert not [p for p in child_pids() if "sleep 300" in cmdline(p)]  # the hung one was killed

    assert "mcp__time__get_current_time" in tools
    assert not any(n.startswith(("mcp__exits", "mcp__hangs")) for n in tools)
    res = tools["mcp__time__get_current_time"].run({"timezone": "UTC"}, ctx(tmp_path))
    assert not res.is_error and json.loads(res.content)["timezone"] == "UTC"
    res = tools["mcp__everything__get-sum"].run({"a": 2, "b": 40}, ctx(tmp_path))
    assert not res.is_error and "42" in res.content
    res = tools["mcp__time__get_current_time"].run({"timezone": "Not/AZone"}, ctx(tmp_path))
    assert res.is_error  # a tool error is the model's to read, not a crash

    text = m.capabilities_text()
    assert "mcp__time__*" in text and "exits: unavailable" in text and "cannot start" in text


def test_close_leaves_no_processes_and_no_thread(manager_for: Callable[..., McpClientManager]
                                                 ) -> None:
    _need_everything()
    _need_time()
    before = set(child_pids())
    m = manager_for({"everything": {"command": str(EVERYTHING)}, "time": {"command": str(TIME)}})
    m.start()
    assert len(set(child_pids()) - before) >= 2
    m.close()
    assert set(child_pids()) - before == set()
    assert m._thread is not None and not m._thread.is_alive()
    m.close()  # twice is fine


def test_no_servers_means_no_thread(tmp_path: Path) -> None:
    m = McpClientManager(McpSetup(), cwd=tmp_path)
    assert m.tools() == [] and m.capabilities_text() == ""
    assert m._thread is None
    m.close()


def test_server_dying_mid_session_is_reported_and_reconnected(
        manager_for: Callable[..., McpClientManager], tmp_path: Path) -> None:
    _need_time()
    _need_everything()
    m = manager_for({"time": {"command": str(TIME)}, "everything": {"command": str(EVERYTHING)}})
    tools = by_name(m.tools())
    first = server_pids(m, "time")
    assert first
    for pid in first:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not set(server_pids(m, "time")) & set(first))
    call = tools["mcp__time__get_current_time"]
    res = call.run({"timezone": "UTC"}, ctx(tmp_path))
    assert res.is_error and "unavailable" in res.content and "restarted on next use" in res.content
    assert conn(m, "time").state == "failed"
    # the other server never noticed
    assert not tools["mcp__everything__echo"].run({"message": "hi"}, ctx(tmp_path)).is_error
    res = call.run({"timezone": "UTC"}, ctx(tmp_path))
    assert not res.is_error, res.content
    assert conn(m, "time").state == "connected" and conn(m, "time").starts == 2


def test_hung_call_times_out_and_server_restarts(manager_for: Callable[..., McpClientManager],
                                                 tmp_path: Path) -> None:
    _need_everything()
    m = manager_for({"everything": {"command": str(EVERYTHING)}}, call_timeout=1.5)
    tools = by_name(m.tools())
    res = tools["mcp__everything__trigger-long-running-operation"].run(
        {"duration": 60, "steps": 2}, ctx(tmp_path))
    assert res.is_error and "timed out after 1.5s" in res.content
    res = tools["mcp__everything__echo"].run({"message": "again"}, ctx(tmp_path))
    assert res.content == "Echo: again"
    assert conn(m, "everything").starts == 2


def test_failed_start_is_retried_on_next_use(manager_for: Callable[..., McpClientManager],
                                             tmp_path: Path) -> None:
    flag = tmp_path / "ready"
    script = tmp_path / "raw_server.py"
    script.write_text(RAW_SERVER)
    # fails until the flag file exists, like a server waiting for a dependency
    shell = f'test -e {flag} || {{ echo "not yet" >&2; exit 1; }}; exec {sys.executable} {script}'
    m = manager_for({"late": {"command": "sh", "args": ["-c", shell]}})
    assert m.tools() == []
    assert conn(m, "late").state == "failed" and "not yet" in (conn(m, "late").error or "")
    flag.touch()
    assert "mcp__late__cwd" in by_name(m.tools())
    assert conn(m, "late").state == "connected"


# --- naming, cwd, env ---------------------------------------------------------------


def test_names_sanitised_and_collisions_resolved_deterministically(
        manager_for: Callable[..., McpClientManager], tmp_path: Path) -> None:
    m = manager_for({"my.server": raw_server(tmp_path)})
    names = [t.name for t in m.tools() if t.name.startswith("mcp__")]
    assert all(len(n) <= 64 for n in names)
    assert all(set(n) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
               for n in names)
    tools = {t.tool: t.name for t in m.tools() if hasattr(t, "tool")}
    # sorted by original name: "a b" < "a.b" < "a_b"
    assert tools["a b"] == "mcp__my_server__a_b"
    assert tools["a.b"] == "mcp__my_server__a_b_2"
    assert tools["a_b"] == "mcp__my_server__a_b_3"
    assert tools["x" * 80] != tools["x" * 81]
    assert len(m.naming_notes) == 4 and "mcp__my_server__a_b was taken" in m.naming_notes[0]
    assert "note: my_server: tool 'a.b'" in m.capabilities_text()
    # deterministic: a second manager gives the very same names
    again = manager_for({"my.server": raw_server(tmp_path)})
    assert [t.name for t in again.tools()] == [t.name for t in m.tools()]
    # a tools-only server: no resource tools are offered
    assert "list_mcp_resources" not in tools.values()
    assert not any(t.name in ("list_mcp_resources", "read_mcp_resource") for t in m.tools())


def test_servers_start_in_the_worktree_with_its_env(manager_for: Callable[..., McpClientManager],
                                                    tmp_path: Path) -> None:
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    spec = raw_server(tmp_path) | {"env": {"SERVER_VAR": "${HOME:-x}-ok"}}
    m = manager_for({"raw": spec}, cwd=worktree, env={"ORCH_TASK_ID": "task_007"})
    tools = by_name(m.tools())
    assert tools["mcp__raw__cwd"].run({}, ctx(tmp_path)).content == str(worktree)
    assert tools["mcp__raw__env"].run({}, ctx(tmp_path)).content == \
        f"task_007|{os.environ['HOME']}-ok"


# --- resources -------------------------------------------------------------------------


def test_resources_text_inline_binary_to_disk_and_list_changed(
        manager_for: Callable[..., McpClientManager], tmp_path: Path) -> None:
    _need_everything()
    m = manager_for({"everything": {"command": str(EVERYTHING)}})
    tools = by_name(m.tools())
    c = ctx(tmp_path)
    listing = json.loads(tools["list_mcp_resources"].run({}, c).content)
    uris = [r["uri"] for r in listing]
    assert "demo://resource/static/document/architecture.md" in uris
    cached = conn(m, "everything").resources
    assert cached is not None
    tools["list_mcp_resources"].run({}, c)
    assert conn(m, "everything").resources is cached  # served from the cache

    text = tools["read_mcp_resource"].run(
        {"server": "everything", "uri": "demo://resource/static/document/architecture.md"}, c)
    assert not text.is_error and "saved to" not in text.content and len(text.content) > 100

    # a tool that adds a session resource: the server sends resources/list_changed
    res = tools["mcp__everything__gzip-file-as-resource"].run(
        {"name": "notes.gz", "data": "data:text/plain;base64,aGVsbG8gd29ybGQ=",
         "outputType": "resource"}, c)
    assert "saved to" in res.content and ".gz" in res.content  # embedded blob went to disk
    wait_until(lambda: conn(m, "everything").resources is None)
    listing = json.loads(tools["list_mcp_resources"].run({"server": "everything"}, c).content)
    assert "demo://resource/session/notes.gz" in [r["uri"] for r in listing]

    blob = tools["read_mcp_resource"].run(
        {"server": "everything", "uri": "demo://resource/session/notes.gz"}, c)
    path = Path(blob.content.split("saved to ", 1)[1].split(" (", 1)[0])
    assert path.suffix == ".gz" and path.parent == tmp_path / "spill" / "mcp"
    import gzip
    assert gzip.decompress(path.read_bytes()) == b"hello world"

    image = tools["mcp__everything__get-tiny-image"].run({}, c)
    png = Path(image.content.split("saved to ", 1)[1].split(" (", 1)[0])
    assert png.suffix == ".png" and png.read_bytes().startswith(b"\x89PNG")

    bad = tools["read_mcp_resource"].run({"server": "everything", "uri": "demo://nope"}, c)
    assert bad.is_error
    unknown = tools["read_mcp_resource"].run({"server": "nope", "uri": "x://y"}, c)
    assert unknown.is_error and "no MCP server named 'nope'" in unknown.content


def test_resource_cache_dropped_when_server_closes(manager_for: Callable[..., McpClientManager],
                                                   tmp_path: Path) -> None:
    _need_time()
    m = manager_for({"time": {"command": str(TIME)}})
    tools = by_name(m.tools())
    tools["list_mcp_resources"].run({}, ctx(tmp_path))
    assert conn(m, "time").resources == []
    m.close()
    assert conn(m, "time").resources is None
    res = tools["mcp__time__get_current_time"].run({"timezone": "UTC"}, ctx(tmp_path))
    assert res.is_error and "closed" in res.content


# --- the permission gate and the result size limit -------------------------------------


def test_mcp_tools_go_through_the_gate_and_spill(manager_for: Callable[..., McpClientManager],
                                                 tmp_path: Path) -> None:
    _need_everything()
    m = manager_for({"everything": {"command": str(EVERYTHING)}})
    c = ctx(tmp_path)
    gate = PermissionGate.from_rules(deny=["mcp__everything__get-sum"],
                                     allow=["mcp__everything__*"], root=tmp_path)
    toolset = Toolset([], gate, c, result_cap=1000)
    for tool in m.tools():
        toolset.add(tool)
    denied = toolset.call("mcp__everything__get-sum", {"a": 1, "b": 2})
    assert denied.is_error and "permission denied" in denied.content
    big = toolset.call("mcp__everything__echo", {"message": "y" * 5000})
    assert "result too large" in big.content
    spilled = Path(big.content.split("full text is in ", 1)[1].split(";", 1)[0])
    assert spilled.read_text() == "Echo: " + "y" * 5000


# --- streamable HTTP --------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    script = tmp_path / "http_server.py"
    script.write_text(HTTP_SERVER)
    proc = subprocess.Popen([sys.executable, str(script), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError("HTTP MCP server did not come up") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


def test_streamable_http_server_with_expanded_headers(
        manager_for: Callable[..., McpClientManager], http_server: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_MCP_TOKEN", "s3cret-token")
    m = manager_for({"remote": {"type": "http", "url": http_server,
                                "headers": {"Authorization": "Bearer ${TEST_MCP_TOKEN}"}},
                     "down": {"type": "http", "url": "http://127.0.0.1:9/mcp"}},
                    )
    tools = by_name(m.tools())
    res = tools["mcp__remote__whoami"].run({}, ctx(tmp_path))
    assert res.content == "Bearer s3cret-token"
    assert conn(m, "down").state == "failed"
