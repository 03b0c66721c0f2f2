"""Who may talk to the web board: the session token, the Host and the Origin.

- Every process start makes a new random token.
- **Host**: a request must name the address the board listens on (``127.0.0.1:PORT``,
  ``localhost:PORT`` … for a loopback bind), so a page on another site whose DNS name
  is re-pointed at 127.0.0.1 (DNS rebinding) is refused before it can read anything.
- **Changes** (any method but GET/HEAD): the token in the ``X-Orch-Token`` header and an
  ``Origin`` equal to the board's own; browsers do not let another site's page set that
  header or forge the Origin, so no cross-site request forgery. The page gets the token
  in a ``<meta>`` tag, which only a same-origin script can read.
- **Not loopback** (``--host 0.0.0.0`` …): every request needs the token — from the
  printed URL's ``?token=`` once (it becomes an HttpOnly, SameSite=Strict cookie and the
  URL is cleaned), then the cookie or the header.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE = "orch_ui_token"
HEADER = "x-orch-token"
SAFE_METHODS = frozenset({"GET", "HEAD"})
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
PAGE_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; frame-ancestors 'none'; "
                                 b"base-uri 'none'; form-action 'self'"),
    (b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer")]
"""On every answer: only the board's own scripts and styles, never inside another site's
frame (no clickjacking of the buttons), no token in a Referer."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class Guard:
    """The rules above for one running board."""

    host: str
    port: int
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def hosts(self) -> set[str] | None:
        """The Host header values accepted; None: any (a wildcard bind, the token decides)."""
        if self.host in ("0.0.0.0", "::", ""):
            return None
        names = list(LOOPBACK_NAMES) if self.loopback else [self.host]
        if ":" in self.host and not self.host.startswith("["):
            names.append(f"[{self.host}]")
        return {f"{n}:{self.port}".lower() for n in names}

    def url(self, shown_host: str | None = None) -> str:
        """The URL to print: with the token when the bind is not loopback."""
        host = shown_host or self.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        base = f"http://{host}:{self.port}/"
        return base if self.loopback else f"{base}?{urlencode({'token': self.token})}"

    def valid(self, candidate: str | None) -> bool:
        return bool(candidate) and hmac.compare_digest(str(candidate), self.token)


def middleware(app: ASGIApp, guard: Guard) -> ASGIApp:
    """Wrap ``app`` (an ASGI app) with the guard's checks."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        host = headers.get("host", "").lower()
        allowed = guard.hosts()
        if allowed is not None and host not in allowed:
            await _refuse(send, 421, f"this board answers to {sorted(allowed)[0]}, not {host!r}")
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:
            cookie = SimpleCookie()
        from_cookie = cookie[COOKIE].value if COOKIE in cookie else None
        method = scope["method"].upper()
        if method in SAFE_METHODS and "token" in query and guard.valid(query["token"]):
            rest = urlencode([(k, v) for k, v in parse_qsl(
                scope.get("query_string", b"").decode("latin-1")) if k != "token"])
            location = scope["path"] + (f"?{rest}" if rest else "")
            await _redirect_with_cookie(send, location, guard.token)
            return
        presented = headers.get(HEADER) or from_cookie
        if not guard.loopback and not guard.valid(presented):
            await _refuse(send, 401, "this board needs its token: open the URL that "
                                     "`orchestrator ui` printed")
            return
        if method not in SAFE_METHODS:
            origin = headers.get("origin")
            if origin is None or origin.lower() != f"http://{host}":
                await _refuse(send, 403, "refused: a change must come from the board's own "
                                         f"page (origin {origin or 'missing'})")
                return
            if headers.get("sec-fetch-site", "same-origin") != "same-origin":
                await _refuse(send, 403, "refused: a cross-site request")
                return
            if not guard.valid(headers.get(HEADER)):
                await _refuse(send, 403, "refused: the session token is missing or wrong "
                                         "(reload the page)")
                return
        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *PAGE_HEADERS]
            await send(message)

        await app(scope, receive, send_with_headers)

    return guarded


async def _refuse(send: Send, status: int, message: str) -> None:
    body = (message + "\n").encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _redirect_with_cookie(send: Send, location: str, token: str) -> None:
    cookie = f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
    await send({"type": "http.response.start", "status": 303, "headers": [
        (b"location", location.encode("latin-1")), (b"set-cookie", cookie.encode()),
        (b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})
