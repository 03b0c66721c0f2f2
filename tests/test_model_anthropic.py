"""AnthropicModel through the real SDK against the loopback Messages API."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestrator.agent.anthropic_model import AnthropicModel
from orchestrator.agent.compact import ContextOverflow
from orchestrator.errors import BackendError
from tests.loopback import LoopbackAPI, PromptCache, tool_use

SYSTEM = [{"type": "text", "text": "You are a test.", "cache_control": {"type": "ephemeral"}}]
TOOLS = [{"name": "read", "description": "Read a file.",
          "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}]
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def api() -> Iterator[LoopbackAPI]:
    with LoopbackAPI() as server:
        yield server


def model(api: LoopbackAPI, **kw: object) -> AnthropicModel:
    return AnthropicModel("claude-sonnet-4-6", api_key="sk-test-key", base_url=api.url,
                          retry_delay=0.01, **kw)  # type: ignore[arg-type]


def credential(headers: dict[str, str]) -> str:
    """The SDK sends the key as x-api-key or as a bearer token, depending on its version."""
    return headers.get("x-api-key") or headers.get("authorization", "")


def ask(m: AnthropicModel, messages: list[dict] | None = None):  # type: ignore[type-arg]
    try:
        return m.query(system=SYSTEM, messages=messages or HELLO, tools=TOOLS, max_tokens=256)
    finally:
        m.close()


@pytest.mark.parametrize("stream", [True, False])
def test_text_and_tool_use_come_back_as_api_blocks(api: LoopbackAPI, stream: bool) -> None:
    call = tool_use("read", {"file_path": "src/app.py", "nested": {"k": [1, 2]}}, id="toolu_1")
    api.reply("Let me look at the file first, it is long enough to be split.", call)
    r = ask(model(api, stream=stream))
    assert r.stop_reason == "tool_use"
    assert r.content == [
        {"type": "text", "text": "Let me look at the file first, it is long enough to be split."},
        {"type": "tool_use", "id": "toolu_1", "name": "read",
         "input": {"file_path": "src/app.py", "nested": {"k": [1, 2]}}},
    ]
    body = api.requests[0]
    assert body.get("stream", False) is stream
    assert body["system"] == SYSTEM and body["tools"] == TOOLS and body["max_tokens"] == 256
    assert "sk-test-key" in credential(api.headers[0])
    assert r.usage.output_tokens > 0 and r.usage.cost_usd > 0


def test_usage_reports_cache_reads_on_the_second_turn(api: LoopbackAPI) -> None:
    api.reply("one")
    api.reply("two")
    first = ask(model(api))
    again = ask(model(api))
    assert first.usage.cache_write_tokens > 0 and first.usage.cache_read_tokens == 0
    assert again.usage.cache_read_tokens == first.usage.cache_write_tokens
    assert again.usage.cost_usd < first.usage.cost_usd


@pytest.mark.parametrize("failure", ["rate_limited", "overloaded"])
def test_429_and_529_are_retried_then_succeed(api: LoopbackAPI, failure: str) -> None:
    getattr(api, failure)()
    getattr(api, failure)()
    api.reply("finally")
    r = ask(model(api))
    assert r.content == [{"type": "text", "text": "finally"}]
    assert len(api.requests) == 3


@pytest.mark.parametrize("mid_stream", [False, True])
def test_a_dropped_connection_is_retried(api: LoopbackAPI, mid_stream: bool) -> None:
    api.drop(mid_stream=mid_stream)
    api.reply("after the drop")
    assert ask(model(api)).content == [{"type": "text", "text": "after the drop"}]
    assert len(api.requests) == 2


def test_retries_are_bounded_and_end_in_a_backend_error(api: LoopbackAPI) -> None:
    for _ in range(6):
        api.overloaded()
    with pytest.raises(BackendError, match="Overloaded"):
        ask(model(api, max_retries=1, stream_retries=1))
    assert len(api.requests) == 4  # (1 + 1 SDK retry) x (1 + 1 stream retry)


def test_prompt_too_long_becomes_context_overflow_without_retrying(api: LoopbackAPI) -> None:
    api.too_long()
    with pytest.raises(ContextOverflow, match="prompt is too long"):
        ask(model(api))
    assert len(api.requests) == 1


def test_bad_request_is_a_backend_error_not_retried(api: LoopbackAPI) -> None:
    with pytest.raises(BackendError, match="no scripted reply"):
        ask(model(api))
    assert len(api.requests) == 1


def test_base_url_comes_from_the_environment(api: LoopbackAPI,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-from-env-123")
    api.reply("via env")
    m = AnthropicModel("claude-sonnet-4-6")
    assert ask(m).content[0]["text"] == "via env"
    assert "sk-from-env-123" in credential(api.headers[0])


def test_missing_credentials_are_a_clear_error() -> None:
    with pytest.raises(BackendError, match="ANTHROPIC_API_KEY"):
        AnthropicModel("claude-sonnet-4-6")


def test_cache_rule_reads_prefixes_within_twenty_blocks_of_a_breakpoint() -> None:
    cache = PromptCache()
    mark = {"type": "ephemeral"}

    def body(n: int, at: int) -> dict:  # type: ignore[type-arg]
        blocks = [{"type": "text", "text": f"block {i} " * 10} for i in range(n)]
        blocks[at] = {**blocks[at], "cache_control": mark}
        return {"messages": [{"role": "user", "content": blocks}]}

    first = cache.account(body(10, 9))
    assert first.cache_read_input_tokens == 0 and first.input_tokens == 0
    near = cache.account(body(30, 29))  # the cached prefix ends 20 blocks before: read
    assert near.cache_read_input_tokens == first.cache_creation_input_tokens
    far = cache.account(body(60, 59))  # the nearest cached prefix is 30 blocks back: miss
    assert far.cache_read_input_tokens == 0
    tail = cache.account(body(61, 59))  # one block after the last breakpoint: plain input
    assert tail.cache_read_input_tokens > 0 and tail.input_tokens > 0


def test_pricing_by_name_then_family() -> None:
    from orchestrator.agent.pricing import cost_usd, price_of
    from orchestrator.model import Usage

    assert price_of("claude-haiku-4-5-20251001") == price_of("claude-haiku-4-5")
    assert price_of("claude-opus-9") == price_of("claude-opus-4-1")  # unknown: its family
    assert price_of("some-gateway-model") == price_of("claude-sonnet-4-5")
    million = Usage(input_tokens=1_000_000, output_tokens=1_000_000,
                    cache_write_tokens=1_000_000, cache_read_tokens=1_000_000)
    assert cost_usd("claude-sonnet-4-5", million) == 3 + 15 + 3.75 + 0.3
