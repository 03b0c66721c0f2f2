"""`AnthropicModel`: one Messages API call through the official SDK, streamed.

Retries: the SDK retries transport errors, 408/409/429/5xx (529 overloaded
included) with back-off, honouring ``retry-after``; on top of that a stream
that breaks after it started (connection dropped, an ``overloaded_error``
event mid-stream) is retried here, a bounded number of times. Everything the
SDK raises is translated at this boundary: ``prompt is too long`` becomes
`ContextOverflow` (the loop compacts), the rest `BackendError`.
"""

from __future__ import annotations

import os
import time
from typing import Any

import anthropic

from orchestrator.agent.base import ModelResponse
from orchestrator.agent.compact import ContextOverflow
from orchestrator.agent.pricing import priced
from orchestrator.errors import BackendError
from orchestrator.model import Usage

DEFAULT_SDK_RETRIES = 4
STREAM_RETRIES = 2
"""Extra attempts for a stream that broke after it started (the SDK cannot retry those)."""
RETRY_DELAY = 1.0
REQUEST_TIMEOUT = 600.0
RETRYABLE_TYPES = {"overloaded_error", "rate_limit_error", "api_error"}


def api_key_from_env(environ: dict[str, str] | None = None) -> tuple[str | None, str | None]:
    """(api key, auth token) from ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_AUTH_TOKEN``."""
    env = os.environ if environ is None else environ
    return env.get("ANTHROPIC_API_KEY") or None, env.get("ANTHROPIC_AUTH_TOKEN") or None


class AnthropicModel:
    """Implements `orchestrator.agent.base.Model` with ``anthropic.Anthropic``."""

    def __init__(self, name: str, *, api_key: str | None = None, auth_token: str | None = None,
                 base_url: str | None = None, stream: bool = True,
                 max_retries: int = DEFAULT_SDK_RETRIES, stream_retries: int = STREAM_RETRIES,
                 retry_delay: float = RETRY_DELAY, timeout: float = REQUEST_TIMEOUT) -> None:
        if api_key is None and auth_token is None:
            api_key, auth_token = api_key_from_env()
        if api_key is None and auth_token is None:
            raise BackendError("no Anthropic credentials: set ANTHROPIC_API_KEY "
                               "(or ANTHROPIC_AUTH_TOKEN for a gateway)")
        self.name = name
        self.stream = stream
        self.stream_retries = stream_retries
        self.retry_delay = retry_delay
        self.client = anthropic.Anthropic(
            api_key=api_key, auth_token=auth_token,
            base_url=base_url or os.environ.get("ANTHROPIC_BASE_URL") or None,
            max_retries=max_retries, timeout=timeout,
        )

    def query(self, *, system: list[dict[str, Any]], messages: list[dict[str, Any]],
              tools: list[dict[str, Any]], max_tokens: int) -> ModelResponse:
        params: dict[str, Any] = {"model": self.name, "system": system, "messages": messages,
                                  "max_tokens": max_tokens}
        if tools:
            params["tools"] = tools
        for attempt in range(self.stream_retries + 1):
            try:
                return self._call(params)
            except anthropic.APIError as exc:
                if not _retryable(exc) or attempt == self.stream_retries:
                    raise _translate(exc) from exc
            except _BrokenStream as exc:
                if attempt == self.stream_retries:
                    raise BackendError(f"the Anthropic API stream broke: {exc}") from exc
            time.sleep(self.retry_delay * 2 ** attempt)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.client.close()

    def _call(self, params: dict[str, Any]) -> ModelResponse:
        if self.stream:
            with self.client.messages.stream(**params) as stream:
                message = stream.get_final_message()
        else:
            message = self.client.messages.create(**params)
        if message.stop_reason is None:
            raise _BrokenStream("the response ended before message_stop")
        u = message.usage
        usage = Usage(input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                      cache_read_tokens=u.cache_read_input_tokens or 0,
                      cache_write_tokens=u.cache_creation_input_tokens or 0)
        return ModelResponse(
            content=[b.model_dump(mode="json", exclude_none=True) for b in message.content],
            stop_reason=message.stop_reason,
            usage=priced(message.model or self.name, usage), model=message.model,
        )


class _BrokenStream(Exception):
    """The stream ended without its final events (a connection cut mid-stream)."""


def _retryable(exc: anthropic.APIError) -> bool:
    """Worth another attempt here: a broken stream or an error event in a stream."""
    if isinstance(exc, anthropic.APIConnectionError):
        return True
    if isinstance(exc, anthropic.RateLimitError | anthropic.InternalServerError):
        return True
    return isinstance(exc, anthropic.APIStatusError) and _error_type(exc) in RETRYABLE_TYPES


def _error_type(exc: anthropic.APIError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error") if isinstance(body.get("error"), dict) else body
    return str(err.get("type", "")) if isinstance(err, dict) else ""


def _translate(exc: anthropic.APIError) -> BackendError:
    if isinstance(exc, anthropic.BadRequestError) and "prompt is too long" in str(exc):
        return ContextOverflow(str(exc))
    if isinstance(exc, anthropic.AuthenticationError | anthropic.PermissionDeniedError):
        return BackendError(f"the Anthropic API refused the credentials: {exc}", retry=False)
    if isinstance(exc, anthropic.APIConnectionError):
        return BackendError(f"cannot reach the Anthropic API: {exc}")
    return BackendError(f"Anthropic API error: {exc}")
