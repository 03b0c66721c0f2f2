"""MCP commands: ``mcp`` serves the board over stdio, ``mcp-status`` checks the servers
the teammates will get."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.app import JsonOpt, RepoOpt, app, open_repo, print_json
from orchestrator.cli.output import echo


@app.command("mcp")
def mcp_serve(
    repo: RepoOpt = None,
    http: Annotated[str | None, typer.Option(
        "--http", metavar="HOST:PORT",
        help="Serve over MCP's streamable HTTP transport at http://HOST:PORT/mcp instead of "
             "stdio (a remote lead; claude mcp add --transport http …).")] = None,
    token_file: Annotated[Path | None, typer.Option(
        "--token-file", help="With --http: every request must carry 'Authorization: Bearer "
                             "<the file's first line>'. Required off loopback.")] = None,
) -> None:
    """Serve the board over MCP on stdio (claude mcp add orchestrator -- orchestrator mcp),
    or over HTTP with --http."""
    r = open_repo(repo)
    first = None
    if http is None:
        from orchestrator.mcp.handshake import first_line

        first = first_line()  # before the SDK is imported: the client waits on this
    from orchestrator.mcp.server import serve

    serve(r, first, http=http, token_file=token_file)


@app.command("mcp-status")
def mcp_status(
    repo: RepoOpt = None,
    json_: JsonOpt = False,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", min=0.1, help="Seconds each server may take to start (default 10).")
    ] = None,
) -> None:
    """Connect to each MCP server (.mcp.json, plugins) and show plugin → server → tool,
    with each server's state, tools, resources and last error."""
    from orchestrator.mcp.status import collect, render

    r = open_repo(repo)
    report = collect(r.layout.root, r.config.mcp, timeout=timeout)
    if json_:
        print_json(report)
    else:
        echo(render(report))
