"""``orchestrator mcp`` on the wire (issue 16, also found): the handshake is answered before
the SDK is imported and matches the SDK's own answer, a line that is not JSON gets
-32700 (and one that is not JSON-RPC -32600) while the server goes on, and a boolean
argument given as the string "true" is refused."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from orchestrator.board import open_board
from orchestrator.layout import Layout
from orchestrator.mcp.handshake import HANDSHAKE_VERSIONS, initialize_result
from orchestrator.model import Status
from tests.helpers import git
from tests.test_mcp_server import SERVE, TOOLS, _kept_for_review, call, text

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}}


def raw_session(repo: Path, lines: list[bytes], answers: int) -> list[dict[str, Any]]:
    """Write ``lines`` to a fresh server and read ``answers`` JSON lines back."""
    proc = subprocess.Popen(SERVE, cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(b"".join(lines))
        proc.stdin.flush()
        got = [json.loads(proc.stdout.readline()) for _ in range(answers)]
        proc.stdin.close()
        assert proc.wait(timeout=120) == 0
        assert proc.stdout.read() == b""  # nothing more: the SDK's own answer was dropped
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()
    return got


def line(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg).encode() + b"\n"


def test_bad_lines_get_json_rpc_errors_and_the_server_goes_on(repo: Path) -> None:
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    got = raw_session(repo, [line(INIT), b"not json {\n", line(initialized),
                             b'{"hello": "world"}\n', b"\xff\xfe\n", line(listing)], 5)
    assert got[0]["id"] == 1 and got[0]["result"]["protocolVersion"] == "2025-06-18"
    errors = [g["error"]["code"] for g in got[1:4]]
    assert errors == [-32700, -32600, -32700] and all(g["id"] is None for g in got[1:4])
    assert got[4]["id"] == 2 and {t["name"] for t in got[4]["result"]["tools"]} == TOOLS


def test_a_bad_first_line_is_answered_too(repo: Path) -> None:
    got = raw_session(repo, [b"{{{\n", line(INIT)], 2)
    assert got[0]["error"]["code"] == -32700 and got[1]["id"] == 1


def test_the_early_handshake_is_what_the_sdk_answers(repo: Path) -> None:
    assert HANDSHAKE_VERSIONS == HANDSHAKE_PROTOCOL_VERSIONS

    async def main() -> Any:
        params = StdioServerParameters(command=SERVE[0], args=SERVE[1:], cwd=repo)
        async with stdio_client(params) as (r, w), ClientSession(r, w) as session:
            return await session.initialize()

    sdk = anyio.run(main).model_dump(mode="json", by_alias=True, exclude_none=True)
    ours = initialize_result({"protocolVersion": sdk["protocolVersion"]})
    assert ours["instructions"] == sdk["instructions"]
    assert ours["capabilities"] == {k: v for k, v in sdk["capabilities"].items() if v}
    assert ours["serverInfo"]["name"] == sdk["serverInfo"]["name"]
    assert initialize_result({"protocolVersion": "1999-01-01"})["protocolVersion"] == \
        HANDSHAKE_PROTOCOL_VERSIONS[-1]


def test_a_string_is_not_a_boolean(repo: Path) -> None:
    a = _kept_for_review(repo, "Keep me", {"keep.txt": "keep\n"})
    _, res = call(repo, [("discard", {"id": a, "force": "true"}),
                         ("diff", {"id": a, "stat": "yes"}),
                         ("diff", {"id": a, "stat": True})])
    assert res[0].is_error and "invalid arguments" in text(res[0]) and "force" in text(res[0])
    assert res[1].is_error and "stat" in text(res[1])
    assert not res[2].is_error and "keep.txt" in text(res[2])
    with open_board(Layout.at(repo)) as board:
        assert board.get(a).status is Status.REVIEW
    assert git(repo, "branch", "--list", f"task/{a}")


def test_list_tasks_says_which_drops_it_rejected(repo: Path) -> None:
    import os

    from orchestrator.board import init_repo

    layout = init_repo(repo)
    bad = layout.inbox / "bad.json"
    bad.write_text("{ nope")
    os.utime(bad, (1, 1))
    _, [res] = call(repo, [("list_tasks", {})])
    assert json.loads(text(res)) == {"tasks": [], "rejected": [".tasks/rejected/bad.json"]}
