"""``orchestrator ui``: the web board, a thin layer over the library the CLI uses.

    serve(layout, config, host="127.0.0.1", port=8765)   run until Ctrl-C

Modules: `security` (token, Host and Origin checks), `live` (following the event log
and transcripts), `cards` (columns and cards), `pages` (the data of each page),
`diffview` (a diff cut into files and highlighted lines), `transcript`, `app` (routes).
Templates are Jinja2, the client is one small vanilla script; nothing is loaded from
the network, so the page works offline.
"""

from __future__ import annotations

import socket
import threading
import webbrowser
from collections.abc import Callable

from orchestrator.config import Config
from orchestrator.layout import Layout

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (``port`` 0: any free port); `UserError` when it is taken."""
    from orchestrator import listen

    sock = listen.bind(host, port)
    sock.set_inheritable(True)
    return sock


def serve(layout: Layout, config: Config, *, host: str = DEFAULT_HOST,
          port: int = DEFAULT_PORT, open_browser: bool = False, allow_control: bool = False,
          echo: Callable[[str], None] = print) -> None:
    """Serve the board of ``layout`` until interrupted."""
    import uvicorn

    from orchestrator.ui.app import create_app
    from orchestrator.ui.security import Guard

    sock = bind(host, port)
    guard = Guard(host=host, port=sock.getsockname()[1])
    app = create_app(layout, config, guard, allow_control=allow_control)
    url = guard.url()
    echo(f"orchestrator ui: {url}")
    if not guard.loopback:
        echo("the token in this URL is needed for every request; keep it to yourself")
    server = uvicorn.Server(uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on",
        timeout_graceful_shutdown=1, ws="none"))
    if open_browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
