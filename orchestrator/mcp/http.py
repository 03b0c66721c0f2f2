"""``orchestrator mcp --http HOST:PORT``: the board's MCP tools over streamable HTTP.

A lead on another machine, or any MCP client (``claude mcp add --transport http
orchestrator http://HOST:PORT/mcp --header "Authorization: Bearer …"``), drives the
shared board over the network with the same tools as the stdio server.

- Every request must carry ``Authorization: Bearer <token>`` when a token is set; a token
  is required when the address is not loopback (``--token-file FILE``, the first line of
  the file). The token is compared in constant time and never logged or echoed.
- On a loopback address without a token, DNS-rebinding protection is on for every
  loopback address, not only the three the SDK knows: the Host header must name the
  address it is bound to (``127.0.0.2:PORT`` for ``127.0.0.2``; ``localhost``,
  ``127.0.0.1`` and ``[::1]`` for one of those), and an Origin, when sent, the same;
  with a token it is the token that guards, so any Host is accepted.
- Port 0 picks a free port; the line ``serving MCP on http://HOST:PORT/mcp`` (stderr)
  says which.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError, InvalidInput

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
PATH = "/mcp"


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8766`` for IPv6) -> (host, port)."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidInput(f"not an address: {address!r} (expected HOST:PORT, e.g. "
                           "127.0.0.1:8766)")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(path: Path | None, host: str) -> str | None:
    """The bearer token from ``path``; a non-loopback address without one is refused."""
    if path is None:
        if not is_loopback(host):
            raise ConfigError(f"{host} is not a loopback address: anyone who reaches it could "
                              "drive the board; give a bearer token with --token-file FILE")
        return None
    try:
        lines = path.read_text().strip().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read the token file {path}: {exc.strerror}") from None
    token = lines[0].strip() if lines else ""
    if len(token) < 16:
        raise ConfigError(f"the token in {path} is too short (at least 16 characters)")
    return token


class BearerAuth:
    """ASGI middleware: HTTP requests without the right bearer token get 401."""

    def __init__(self, app: App, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            got = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(got, self.expected):
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="orchestrator"')]})
                await send({"type": "http.response.body",
                            "body": b'{"error": "a valid bearer token is required"}'})
                return
        await self.app(scope, receive, send)


LOCAL_NAMES = ("127.0.0.1", "localhost", "::1")


def loopback_security(host: str) -> Any:
    """Host and Origin checks for a server without a token on the loopback ``host``: only
    names of that address pass (a page that rebinds its own name to 127.0.0.2 does not)."""
    from mcp.server.transport_security import TransportSecuritySettings

    names = set(LOCAL_NAMES) if host in LOCAL_NAMES else {host}
    hosts = [f"[{n}]" if ":" in n else n for n in sorted(names)]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*hosts, *(f"{h}:*" for h in hosts)],
        allowed_origins=[f"http://{h}{port}" for h in hosts for port in ("", ":*")])


def build_app(server: Any, host: str, token: str | None) -> App:
    from mcp.server.transport_security import TransportSecuritySettings

    security = loopback_security(host) if token is None else TransportSecuritySettings(
        enable_dns_rebinding_protection=False)
    app: App = server.streamable_http_app(streamable_http_path=PATH, host=host,
                                          transport_security=security)
    return BearerAuth(app, token) if token is not None else app


def serve_http(server: Any, address: str, token_file: Path | None) -> None:
    """Serve ``server`` (an `MCPServer`) on ``address`` until interrupted."""
    import uvicorn

    from orchestrator.listen import bind

    host, port = parse_address(address)
    token = read_token(token_file, host)
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
    sys.stderr.write(f"serving MCP on http://{shown}:{bound}{PATH}"
                     f"{' (bearer token required)' if token else ''}\n")
    sys.stderr.flush()
    config = uvicorn.Config(build_app(server, host, token), log_level="warning",
                            access_log=False, lifespan="on")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
