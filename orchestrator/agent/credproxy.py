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

Which key: ``ANTHROPIC_API_KEY`` (sent as ``x-api-key``), else
``ANTHROPIC_AUTH_TOKEN`` (sent as ``Authorization: Bearer``). Without either there
is nothing to keep back, and no proxy (`for_environment` returns None).
"""

from __future__ import annotations

import contextlib
import hmac
import http.client
import secrets
import socket
import threading
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from orchestrator.secrets import safe_env

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

    def close(self) -> None:
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
def proxied(environ: dict[str, str]) -> Iterator[dict[str, str]]:
    """``environ`` with the key replaced by a running proxy's URL and token (and every
    other secret left as the caller left it); unchanged when it holds no key."""
    proxy = CredentialProxy.for_environment(environ)
    if proxy is None:
        yield environ
        return
    proxy.start()
    try:
        out = {k: v for k, v in environ.items() if k not in KEY_NAMES}
        yield {**out, **proxy.env()}
    finally:
        proxy.close()


@contextlib.contextmanager
def run_env(environ: dict[str, str], pass_env: Iterable[str] = (), *,
            sandboxed: bool) -> Iterator[dict[str, str]]:
    """The environment of a CLI backend's run: in the sandbox, the key replaced by a
    proxy's URL and token (for the run's length) and every other secret dropped
    (`safe_env`, but for ``pass_env``); on the host (``sandbox.backends`` off, or no
    sandbox), ``environ`` as it is."""
    if not sandboxed:
        yield environ
        return
    with proxied(environ) as env:
        keep = [*pass_env, *(KEY_NAMES if env is not environ else ())]
        yield safe_env(env, keep)


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
