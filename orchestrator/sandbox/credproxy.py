"""The credential proxy: the agent never holds the key.

A CLI backend (``claude-code``, ``command``, the presets) is given, instead of
the person's API key, a base URL on the host's loopback and a token made for
this run only::

    ANTHROPIC_BASE_URL=http://127.0.0.1:<port>   ANTHROPIC_API_KEY=orch-run-<random>

`CredentialProxy` listens there (one per run, in a thread of the teammate). A
request that carries the run's token (``x-api-key`` or ``Authorization: Bearer``)
is sent on to the one model endpoint the run was given (``ANTHROPIC_BASE_URL`` of
the teammate, else the Anthropic API) with the real key in its place; the response
streams back as it comes. Anything else — a wrong or missing token, a request for
another host (an absolute URL, ``CONNECT``), a path that climbs out of the
endpoint's — is refused. The key is in no environment of the run's processes, and
the token is worthless once the run ends (the proxy stops with it).

Without the network (``sandbox.network = false``) the sandbox cannot reach the host's
loopback: the proxy then also listens on a Unix socket bound into the sandbox, and
`FORWARDER`, started first inside, serves the same loopback URL there.

Which key: ``ANTHROPIC_API_KEY`` (sent as ``x-api-key``), else
``ANTHROPIC_AUTH_TOKEN`` (sent as ``Authorization: Bearer``). Without either there
is nothing to keep back, and no proxy (`for_environment` returns None).
"""

from __future__ import annotations

import contextlib
import hmac
import http.client
import secrets
import shutil
import socket
import socketserver
import sys
import threading
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.sandbox.scratch import scratch
from orchestrator.secrets import safe_env

if TYPE_CHECKING:
    from orchestrator.sandbox import Sandbox

DEFAULT_UPSTREAM = "https://api.anthropic.com"
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                        "te", "trailer", "transfer-encoding", "upgrade", "host",
                        "content-length", "x-api-key", "authorization"})
UPSTREAM_TIMEOUT = 600.0
CHUNK = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
"""A request body past this is refused (a model request is a few MB at most)."""
TOKEN_PREFIX = "orch-run-"
KEY_NAMES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")


class _UnixHTTPServer(socketserver.ThreadingUnixStreamServer):
    def get_request(self) -> tuple[Any, Any]:
        conn, _ = super().get_request()
        return conn, ("unix", 0)  # http.server formats the client as a (host, port) pair


class CredentialProxy:
    def __init__(self, upstream: str, key: str, *, bearer: bool = False) -> None:
        url = urllib.parse.urlsplit(upstream)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"the model endpoint must be an http(s) URL, not {upstream!r}")
        self.upstream = url
        self.key = key
        self.bearer = bearer
        self.token = TOKEN_PREFIX + secrets.token_urlsafe(24)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="credential-proxy", daemon=True)
        self._unix: _UnixHTTPServer | None = None

    @classmethod
    def for_environment(cls, environ: Mapping[str, str]) -> CredentialProxy | None:
        """The proxy for the key in ``environ`` (None when it holds none)."""
        upstream = environ.get("ANTHROPIC_BASE_URL") or DEFAULT_UPSTREAM
        if environ.get("ANTHROPIC_API_KEY"):
            return cls(upstream, environ["ANTHROPIC_API_KEY"])
        if environ.get("ANTHROPIC_AUTH_TOKEN"):
            return cls(upstream, environ["ANTHROPIC_AUTH_TOKEN"], bearer=True)
        return None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """What the run's environment gets in place of the key."""
        name = "ANTHROPIC_AUTH_TOKEN" if self.bearer else "ANTHROPIC_API_KEY"
        return {"ANTHROPIC_BASE_URL": self.url, name: self.token}

    def start(self) -> CredentialProxy:
        self._thread.start()
        return self

    def listen_unix(self, path: Path) -> None:
        """Also serve on a Unix socket at ``path`` (for a sandbox without the network)."""
        unix = _UnixHTTPServer(str(path), _handler(self))
        unix.daemon_threads = True
        self._unix = unix
        threading.Thread(target=unix.serve_forever, name="credential-proxy-unix",
                         daemon=True).start()

    def close(self) -> None:
        if self._unix is not None:
            unix, self._unix = self._unix, None
            stopper = threading.Thread(target=unix.shutdown)
            stopper.start()
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as wake:
                wake.settimeout(1)
                wake.connect(str(unix.server_address))
            stopper.join()
            unix.server_close()
        if self._thread.is_alive():
            stopper = threading.Thread(target=self._server.shutdown)
            stopper.start()
            with contextlib.suppress(OSError):  # wakes its wait at once (else up to 0.5 s)
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            stopper.join()
        self._server.server_close()

    def allows(self, headers: Mapping[str, str]) -> bool:
        given = headers.get("x-api-key") or ""
        auth = headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            given = given or auth[7:].strip()
        return hmac.compare_digest(given.encode(), self.token.encode())

    def target(self, path: str) -> str | None:
        """The upstream path for a request's target; None for one that is no plain path
        under the endpoint (an absolute URL, ``..``, a scheme-relative ``//host``)."""
        if not path.startswith("/") or path.startswith("//"):
            return None
        parts = urllib.parse.urlsplit(path)
        if parts.scheme or parts.netloc or ".." in parts.path.split("/") or "\\" in path:
            return None
        base = self.upstream.path.rstrip("/")
        return base + path


@contextlib.contextmanager
def proxied(environ: dict[str, str]) -> Iterator[tuple[dict[str, str], CredentialProxy | None]]:
    """``environ`` with the key replaced by a running proxy's URL and token (and every
    other secret left as the caller left it), and the proxy; unchanged and None when it
    holds no key."""
    proxy = CredentialProxy.for_environment(environ)
    if proxy is None:
        yield environ, None
        return
    proxy.start()
    try:
        out = {k: v for k, v in environ.items() if k not in KEY_NAMES}
        yield {**out, **proxy.env()}, proxy
    finally:
        proxy.close()


@contextlib.contextmanager
def run_env(environ: dict[str, str], pass_env: Iterable[str] = (), *,
            sandbox: Sandbox | None) -> Iterator[tuple[dict[str, str], Sandbox | None]]:
    """The environment and sandbox of a CLI backend's run. In an enabled sandbox: the
    key replaced by a proxy's URL and token (for the run's length), every other secret
    dropped (`safe_env`, but for ``pass_env``); without the network, the proxy is also
    reached through a Unix socket bound into the sandbox, which a small forwarder
    inside (`FORWARDER`, on the same loopback port) connects to. On the host
    (``sandbox.backends`` off, or no sandbox): ``environ`` as it is."""
    if sandbox is None or not sandbox.enabled:
        yield environ, sandbox
        return
    with proxied(environ) as (env, proxy):
        keep = [*pass_env, *(KEY_NAMES if proxy is not None else ())]
        if proxy is None or sandbox.host_network or sandbox.container is not None:
            yield safe_env(env, keep), sandbox
            return
        folder = scratch("proxy")
        try:
            path = folder / "proxy.sock"
            proxy.listen_unix(path)
            yield safe_env(env, keep), sandbox.with_(writable=[str(folder)], launcher=[
                sys.executable, "-c", FORWARDER, str(proxy.port), str(path)])
        finally:
            proxy.close()  # before its folder goes
            shutil.rmtree(folder, ignore_errors=True)


FORWARDER = """
import socket, subprocess, sys, threading
port, path, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[4:]
srv = socket.socket()
srv.bind(("127.0.0.1", port))
srv.listen(64)
def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
def serve():
    while True:
        c = srv.accept()[0]
        u = socket.socket(socket.AF_UNIX)
        try:
            u.connect(path)
        except OSError:
            c.close()
            continue
        threading.Thread(target=pipe, args=(c, u), daemon=True).start()
        threading.Thread(target=pipe, args=(u, c), daemon=True).start()
threading.Thread(target=serve, daemon=True).start()
rc = subprocess.call(cmd)
sys.exit(rc if rc >= 0 else 128 - rc)
"""
"""Runs first in a sandbox without the network: the proxy's loopback port, inside, leads
to its Unix socket; then the command (the sandbox ends when it does)."""


def is_proxied(env: Mapping[str, str]) -> bool:
    """Whether ``env`` holds a proxy's token in place of a key."""
    return any(env.get(k, "").startswith(TOKEN_PREFIX) for k in KEY_NAMES)


def _handler(proxy: CredentialProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # the response ends when the connection closes

        def log_message(self, format: str, *args: object) -> None:
            return  # never log a request line (it may carry anything)

        def _refuse(self, code: int, why: str) -> None:
            body = ('{"type":"error","error":{"type":"permission_error","message":"'
                    f'credential proxy: {why}"}}}}').encode()
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _forward(self) -> None:
            if not proxy.allows({k.lower(): v for k, v in self.headers.items()}):
                self._refuse(401, "this run's token is required")
                return
            path = proxy.target(self.path)
            if path is None:
                self._refuse(403, "only the run's model endpoint can be reached")
                return
            try:
                length = int(self.headers.get("content-length") or 0)
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY:
                self._refuse(413, "bad or too large a request body")
                return
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            if proxy.bearer:
                headers["authorization"] = f"Bearer {proxy.key}"
            else:
                headers["x-api-key"] = proxy.key
            up = proxy.upstream
            conn_type = http.client.HTTPSConnection if up.scheme == "https" \
                else http.client.HTTPConnection
            conn = conn_type(up.hostname or "", up.port, timeout=UPSTREAM_TIMEOUT)
            try:
                conn.request(self.command, path, body=body, headers=headers)
                resp = conn.getresponse()
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP_BY_HOP:
                        self.send_header(k, v)
                self.end_headers()
                while chunk := resp.read1(CHUNK):
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (OSError, http.client.HTTPException) as exc:
                with contextlib.suppress(OSError):
                    self._refuse(502, f"the model endpoint failed: {type(exc).__name__}")
            finally:
                conn.close()

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _forward

        def do_CONNECT(self) -> None:
            self._refuse(403, "only the run's model endpoint can be reached")

    return Handler
