"""A fake Anthropic Messages API on 127.0.0.1, driven by the real SDK in tests.

`LoopbackAPI` serves ``POST /v1/messages``, streaming (SSE) or not, from a
queue of scripted replies, records every request body, injects failures
(429, 529, ``prompt is too long``, a dropped connection before or during a
stream) and does prompt-cache accounting the way the issue's Proof describes:

    every request is cut into blocks (each tool, each system block, each message
    content block); a prefix that ends at most 20 blocks before a ``cache_control``
    breakpoint and was written at a breakpoint by an earlier request is read from
    the cache; the rest up to the last breakpoint is a cache write; tokens ≈ bytes / 4.

Use it through the ``loopback`` fixture (`tests/test_model_anthropic.py`) or as
a context manager: ``with LoopbackAPI() as api: ...``.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOOKBACK_BLOCKS = 20
BYTES_PER_TOKEN = 4


@dataclass
class Reply:
    content: list[dict[str, Any]]
    stop_reason: str = "end_turn"
    output_tokens: int | None = None


@dataclass
class Failure:
    status: int
    error_type: str
    message: str
    retry_after_ms: int = 1


@dataclass
class Drop:
    """Close the connection: before any response, or (``mid_stream``) after message_start."""

    mid_stream: bool = False


Item = Reply | Failure | Drop
Responder = Callable[[dict[str, Any]], Item]


def text(s: str) -> dict[str, Any]:
    return {"type": "text", "text": s}


def tool_use(name: str, args: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": id or f"toolu_{uuid.uuid4().hex[:16]}", "name": name,
            "input": args}


def tokens(obj: Any) -> int:
    return max(1, len(json.dumps(obj, separators=(",", ":"))) // BYTES_PER_TOKEN)


@dataclass
class CacheUsage:
    input_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int


@dataclass
class PromptCache:
    """The cache accounting rule of the Proof (see the module docstring)."""

    written: set[str] = field(default_factory=set)

    def account(self, body: dict[str, Any]) -> CacheUsage:
        blocks = _blocks(body)
        sizes, hashes, marks = [], [], []
        h = hashlib.sha256()
        for i, (block, marked) in enumerate(blocks):
            h.update(json.dumps(block, sort_keys=True).encode())
            hashes.append(h.hexdigest())
            sizes.append(tokens(block))
            if marked:
                marks.append(i)
        total = sum(sizes)
        read_end = 0
        for m in marks:
            for j in range(m, max(-1, m - LOOKBACK_BLOCKS - 1), -1):
                if hashes[j] in self.written:
                    read_end = max(read_end, j + 1)
                    break
        read = sum(sizes[:read_end])
        write_end = marks[-1] + 1 if marks else 0
        written = sum(sizes[read_end:write_end]) if write_end > read_end else 0
        self.written.update(hashes[m] for m in marks)
        return CacheUsage(total - read - written, read, written)


def _blocks(body: dict[str, Any]) -> list[tuple[dict[str, Any], bool]]:
    """(block without cache_control, carries a breakpoint) in the API's prefix order."""
    out: list[tuple[dict[str, Any], bool]] = []

    def add(block: dict[str, Any], role: str) -> None:
        clean = {k: v for k, v in block.items() if k != "cache_control"}
        out.append(({"role": role, **clean}, "cache_control" in block))

    for t in body.get("tools") or []:
        add(t, "tools")
    system = body.get("system") or []
    for b in [text(system)] if isinstance(system, str) else system:
        add(b, "system")
    for msg in body.get("messages", []):
        content = msg["content"]
        for b in [text(content)] if isinstance(content, str) else content:
            add(b, msg["role"])
    return out


class LoopbackAPI:
    """The fake server. Queue replies with `reply`/`fail`/`drop`, or set `responder`."""

    def __init__(self, model: str = "claude-sonnet-4-6") -> None:
        self.model = model
        self.queue: deque[Item] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.sizes: list[int] = []
        """Bytes of each request body as sent."""
        self.usages: list[CacheUsage] = []
        self.responder: Responder | None = None
        self.cache = PromptCache()
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- scripting -------------------------------------------------------------
    def reply(self, *content: dict[str, Any] | str, stop_reason: str | None = None,
              output_tokens: int | None = None) -> None:
        blocks = [text(c) if isinstance(c, str) else c for c in content]
        stop = stop_reason or ("tool_use" if any(b["type"] == "tool_use" for b in blocks)
                               else "end_turn")
        self.queue.append(Reply(blocks, stop, output_tokens))

    def fail(self, status: int, error_type: str = "api_error", message: str = "failure") -> None:
        self.queue.append(Failure(status, error_type, message))

    def overloaded(self) -> None:
        self.fail(529, "overloaded_error", "Overloaded")

    def rate_limited(self) -> None:
        self.fail(429, "rate_limit_error", "Number of request tokens has exceeded your limit")

    def too_long(self) -> None:
        self.fail(400, "invalid_request_error",
                  "prompt is too long: 210000 tokens > 200000 maximum")

    def drop(self, *, mid_stream: bool = False) -> None:
        self.queue.append(Drop(mid_stream))

    # --- lifecycle -------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None, "LoopbackAPI is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> LoopbackAPI:
        api = self

        class Handler(_Handler):
            pass

        Handler.api = api
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = False  # server_close joins every request thread
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="loopback-api", kwargs={"poll_interval": 0.05})
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> LoopbackAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- serving ---------------------------------------------------------------
    def next_item(self, body: dict[str, Any]) -> Item | None:
        with self._lock:
            self.requests.append(body)
            if self.queue:
                return self.queue.popleft()
        if self.responder is not None:
            return self.responder(body)
        return None

    def account(self, body: dict[str, Any]) -> CacheUsage:
        with self._lock:
            usage = self.cache.account(body)
            self.usages.append(usage)
            return usage


class _Handler(BaseHTTPRequestHandler):
    api: LoopbackAPI
    protocol_version = "HTTP/1.0"  # one request per connection: server_close never waits on idle

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        if self.path.split("?")[0] != "/v1/messages":
            self._json(404, _error("not_found_error", f"no route {self.path}"))
            return
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        self.api.sizes.append(len(raw))
        body = json.loads(raw)
        self.api.headers.append({k.lower(): v for k, v in self.headers.items()})
        item = self.api.next_item(body)
        if item is None:
            self.api.errors.append("unexpected request: nothing scripted")
            self._json(400, _error("invalid_request_error", "loopback: no scripted reply"),
                       {"x-should-retry": "false"})
        elif isinstance(item, Failure):
            self._json(item.status, _error(item.error_type, item.message),
                       {"retry-after-ms": str(item.retry_after_ms)})
        elif isinstance(item, Drop) and not item.mid_stream:
            self.close_connection = True
            self.connection.close()
        else:
            self._answer(body, item)

    def _answer(self, body: dict[str, Any], item: Reply | Drop) -> None:
        usage = self.api.account(body)
        message = {
            "id": f"msg_{uuid.uuid4().hex[:16]}", "type": "message", "role": "assistant",
            "model": body.get("model", self.api.model), "stop_sequence": None,
            "content": item.content if isinstance(item, Reply) else [],
            "stop_reason": item.stop_reason if isinstance(item, Reply) else None,
            "usage": {"input_tokens": usage.input_tokens,
                      "cache_read_input_tokens": usage.cache_read_input_tokens,
                      "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                      "output_tokens": 0},
        }
        out_tokens = (item.output_tokens if isinstance(item, Reply) else None) or (
            tokens(message["content"]))
        if not body.get("stream"):
            message["usage"]["output_tokens"] = out_tokens
            self._json(200, message)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        self._sse("message_start", {"message": {**message, "content": [], "stop_reason": None}})
        if isinstance(item, Drop):
            self.wfile.flush()
            self.close_connection = True
            self.connection.close()
            return
        for i, block in enumerate(item.content):
            self._stream_block(i, block)
        self._sse("message_delta", {"delta": {"stop_reason": item.stop_reason,
                                              "stop_sequence": None},
                                    "usage": {"output_tokens": out_tokens}})
        self._sse("message_stop", {})

    def _stream_block(self, i: int, block: dict[str, Any]) -> None:
        if block["type"] == "text":
            self._sse("content_block_start", {"index": i, "content_block": {"type": "text",
                                                                            "text": ""}})
            s = block["text"]
            for k in range(0, max(len(s), 1), 16):
                self._sse("content_block_delta",
                          {"index": i, "delta": {"type": "text_delta", "text": s[k:k + 16]}})
        else:
            start = {k: v for k, v in block.items() if k != "input"} | {"input": {}}
            self._sse("content_block_start", {"index": i, "content_block": start})
            raw = json.dumps(block.get("input", {}))
            for k in range(0, len(raw), 24):
                self._sse("content_block_delta", {"index": i, "delta": {
                    "type": "input_json_delta", "partial_json": raw[k:k + 24]}})
        self._sse("content_block_stop", {"index": i})

    def _sse(self, event: str, data: dict[str, Any]) -> None:
        payload = json.dumps({"type": event, **data})
        self.wfile.write(f"event: {event}\ndata: {payload}\n\n".encode())

    def _json(self, status: int, obj: dict[str, Any], headers: dict[str, str] | None = None
              ) -> None:
        raw = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def check_pairing(messages: list[dict[str, Any]]) -> None:
    """Every tool_use is answered by a tool_result in the next message, and every
    tool_result answers a tool_use of the message before (AssertionError if not)."""
    for i, msg in enumerate(messages):
        blocks = msg["content"] if isinstance(msg["content"], list) else []
        calls = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        if results:
            before = messages[i - 1]["content"] if i else []
            asked = [b["id"] for b in before if isinstance(b, dict) and b.get("type") == "tool_use"]
            assert sorted(results) == sorted(asked), f"message {i}: results {results} != {asked}"
        if calls:
            assert i + 1 < len(messages) or msg is messages[-1], f"message {i}: unanswered"
            if i + 1 < len(messages):
                after = messages[i + 1]["content"]
                answered = [b["tool_use_id"] for b in after
                            if isinstance(b, dict) and b.get("type") == "tool_result"]
                assert sorted(answered) == sorted(calls), f"message {i}: {calls} != {answered}"
