"""The listening socket of the servers orchestrator runs (`orchestrator ui`,
`orchestrator mcp --http`): bound before the server starts, so a taken port or an
address that cannot be bound is one clear line, and port 0 picks a free one."""

from __future__ import annotations

import socket

from orchestrator.errors import UserError


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv6 when ``host`` has a colon);
    `UserError` when it cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    return sock
