"""The forge's webhooks, taken by ``orchestrator ui`` at ``/forge/webhook``.

A delivery is only a hint that something changed: its signature (``X-Hub-Signature-256``,
HMAC-SHA256 of the body with ``[forge] webhook_secret_file``'s secret) is checked, then a
``forge_webhook`` event is written and the lead's forge thread runs a pass at once, reading
what changed from the API as it does when it polls. Nothing in the body is acted on, so a
delivery cannot say more than "look now". The route sits outside the web board's token and
same-origin checks (GitHub is neither); without a secret configured it does not exist.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool

from orchestrator.config import ForgeConfig
from orchestrator.errors import ConfigError

PATH = "/forge/webhook"
MAX_BODY = 25 * 1024 * 1024
"""GitHub caps a delivery at 25 MB."""
EVENT_RE = re.compile(r"[a-z_]{1,40}")

ASGIApp = Callable[..., Any]


def read_secret(config: ForgeConfig, root: Path) -> bytes | None:
    if config.kind == "none" or not config.webhook_secret_file:
        return None
    path = Path(config.webhook_secret_file).expanduser()
    path = path if path.is_absolute() else root / path
    try:
        secret = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"forge.webhook_secret_file {path}: {exc.strerror}") from None
    if len(secret) < 16:
        raise ConfigError(f"forge.webhook_secret_file {path}: the secret is shorter than 16 "
                          "characters")
    return secret


def signed(secret: bytes, body: bytes, signature: str) -> bool:
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


def with_webhooks(app: ASGIApp, secret: bytes | None, emit: Callable[[str], object]) -> ASGIApp:
    """``app`` with ``POST /forge/webhook`` in front of it (``emit`` writes the event)."""
    if secret is None:
        return app

    async def routed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != PATH:
            await app(scope, receive, send)
            return
        if scope["method"].upper() != "POST":
            await _answer(send, 405, b"POST only")
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > MAX_BODY:
                await _answer(send, 413, b"too large")
                return
            if not message.get("more_body"):
                break
        if not signed(secret, bytes(body), headers.get("x-hub-signature-256", "")):
            await _answer(send, 401, b"bad signature")
            return
        event = headers.get("x-github-event", "")
        await run_in_threadpool(emit, event if EVENT_RE.fullmatch(event) else "other")
        await _answer(send, 204, b"")

    return routed


async def _answer(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8")]})
    await send({"type": "http.response.body", "body": body})
