"""``orchestrator ui``: the web board (`orchestrator.ui`)."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.cli.app import RepoOpt, app, open_repo
from orchestrator.cli.output import echo


@app.command("ui")
def ui(
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="Port to listen on (0: any free port).")] = 8765,
    host: Annotated[str, typer.Option(
        "--host", help="Address to listen on; not a loopback address: the printed URL's "
                       "token is needed for every request.")] = "127.0.0.1",
    open_: Annotated[bool, typer.Option("--open", help="Open it in the browser.")] = False,
    allow_control: Annotated[bool, typer.Option(
        "--allow-control", help="Allow starting and stopping the team from the page.")
    ] = False,
    repo: RepoOpt = None,
) -> None:
    """Serve the board in the browser: live columns, review, what needs you (Ctrl-C ends)."""
    from orchestrator.ui import serve

    r = open_repo(repo)
    serve(r.layout, r.config, host=host, port=port, open_browser=open_,
          allow_control=allow_control, echo=echo)
