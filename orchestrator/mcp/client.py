"""MCP client: one teammate's connections to its MCP servers.

The agent loop is synchronous, the MCP SDK is async. A `McpClientManager` runs
one asyncio event loop in one background thread; every server session lives on
it, owned by a task of its own (`ServerConnection`), and the synchronous methods
submit coroutines to it with a deadline.

Failure isolation: every server starts, fails and times out alone. A server that
cannot start, hangs at start-up (``start_timeout``), dies mid-session or hangs in
a call (``call_timeout``) is marked ``failed`` with its last error (and the tail
of its stderr); its tools stay listed and the next use reconnects it. `close()`
stops every server (stdin closed, then SIGTERM/SIGKILL of the process tree by
the SDK) and the thread, so nothing outlives the task.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import tempfile
import threading
from collections.abc import Coroutine, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import mcp
import mcp.types as mt
from mcp.client.sse import sse_client
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from orchestrator.config import McpConfig
from orchestrator.errors import OrchestratorError
from orchestrator.mcp.config import McpSetup, ServerSpec, load_setup

T = TypeVar("T")
State = Literal["stopped", "connected", "failed", "invalid"]
CLIENT_INFO = mt.Implementation(name="orchestrator", version="0.1.0")
STDERR_TAIL = 400
STOP_GRACE = 10.0
"""Seconds to wait for a server's own shutdown (the SDK bounds it at about 6 s)."""


class ServerUnavailable(OrchestratorError):
    """A server is not connected and could not be (re)started; the message says why."""


class ServerConnection:
    """One server's session. All methods run on the manager's event loop."""

    def __init__(self, spec: ServerSpec, *, cwd: Path, env: Mapping[str, str],
                 start_timeout: float, call_timeout: float, log_dir: Path) -> None:
        self.spec = spec
        self.cwd = cwd
        self.env = dict(env)
        self.start_timeout = start_timeout
        self.call_timeout = call_timeout
        self.stderr_path = log_dir / f"{spec.key}.stderr.log"
        self.state: State = "invalid" if spec.error else "stopped"
        self.error: str | None = spec.error
        self.session: mcp.ClientSession | None = None
        self.init: mt.InitializeResult | None = None
        self.tools: list[mt.Tool] = []
        self.tools_stale = False
        self.resources: list[mt.Resource] | None = None
        """The cached listing; None until listed, and again after ``list_changed`` or close."""
        self.starts = 0
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None

    # --- lifecycle --------------------------------------------------------------

    @property
    def has_resources(self) -> bool:
        return bool(self.init and self.init.capabilities.resources)

    async def ensure(self) -> mcp.ClientSession:
        """The live session, (re)connecting first when needed."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.session is None or self.state != "connected":
                await self._connect()
            assert self.session is not None
            return self.session

    async def _connect(self) -> None:
        if self.spec.error:
            raise ServerUnavailable(f"{self.spec.key}: {self.spec.error}")
        await self._teardown()
        self.starts += 1
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._stop = asyncio.Event()
        self._task = loop.create_task(self._serve(ready, self._stop), name=f"mcp:{self.spec.key}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.start_timeout)
        except TimeoutError:
            await self._teardown(graceful=False)
            self._fail(f"did not start within {self.start_timeout:g}s")
            raise ServerUnavailable(f"{self.spec.key}: {self.error}") from None
        except Exception as exc:
            await self._teardown()
            self._fail(f"failed to start: {describe(exc)}")
            raise ServerUnavailable(f"{self.spec.key}: {self.error}") from exc
        self.state, self.error = "connected", None

    async def _serve(self, ready: asyncio.Future[None], stop: asyncio.Event) -> None:
        """Owns the transport and session contexts: entered and exited in this one task."""
        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(stack))
                session = await stack.enter_async_context(mcp.ClientSession(
                    read, write, message_handler=self._on_message, client_info=CLIENT_INFO))
                self.init = await session.initialize()
                self.tools = await _list_tools(session)
                self.tools_stale = False
                self.resources = None
                self.session = session
                ready.set_result(None)
                await stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(_leaf(exc))
            elif not stop.is_set():
                self._fail(f"connection lost: {describe(exc)}")
        finally:
            self.session = None
            self.resources = None

    def _transport(self, stack: AsyncExitStack) -> contextlib.AbstractAsyncContextManager[Any]:
        spec = self.spec
        if spec.transport == "stdio":
            assert spec.command is not None
            cwd = Path(spec.cwd) if spec.cwd else self.cwd
            errlog = stack.enter_context(self.stderr_path.open("a", encoding="utf-8"))
            params = mcp.StdioServerParameters(
                command=spec.command, args=spec.args, env={**self.env, **spec.env},
                cwd=cwd if cwd.is_absolute() else self.cwd / cwd)
            return mcp.stdio_client(params, errlog=errlog)
        assert spec.url is not None
        if spec.transport == "sse":
            return sse_client(spec.url, headers=spec.headers or None)
        return _http_transport(spec.url, spec.headers)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            self.tools_stale = True
        elif isinstance(message, mt.ResourceListChangedNotification):
            self.resources = None

    def _fail(self, why: str) -> None:
        self.state = "failed"
        tail = self.stderr_tail()
        self.error = f"{why}; stderr: {tail}" if tail else why

    def stderr_tail(self) -> str:
        try:
            text = self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        return " | ".join(lines[-3:])[-STDERR_TAIL:]

    async def _teardown(self, *, graceful: bool = True) -> None:
        """End the session task: ask it to leave its contexts (graceful), or cancel it
        (a server hung before it was ready). The SDK bounds the process shutdown."""
        task, stop = self._task, self._stop
        self._task = self._stop = None
        self.session = None
        self.resources = None
        if task is None:
            return
        if stop is not None:
            stop.set()
        if graceful:
            with contextlib.suppress(TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(task), STOP_GRACE)
        if not task.done():
            task.cancel()
        with contextlib.suppress(BaseException):  # its own failure is already recorded
            await task

    async def close(self) -> None:
        await self._teardown()
        if self.state == "connected":
            self.state = "stopped"

    # --- requests --------------------------------------------------------------

    async def request(self, what: str, call: Any) -> Any:
        """Run ``call(session)`` with the call timeout; a dead or hung server is torn down
        and marked failed so that the next use reconnects it."""
        session = await self.ensure()
        try:
            return await asyncio.wait_for(call(session), self.call_timeout)
        except TimeoutError:
            await self._teardown()
            self._fail(f"{what} timed out after {self.call_timeout:g}s (restarted on next use)")
            raise ServerUnavailable(f"{self.spec.key}: {self.error}") from None
        except MCPError as exc:
            if exc.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                await self._teardown()
                self._fail(f"{what}: {exc.message} (restarted on next use)")
                raise ServerUnavailable(f"{self.spec.key}: {self.error}") from exc
            raise
        except Exception as exc:  # transport failures (HTTP, pipes, a malformed reply)
            await self._teardown()
            self._fail(f"{what}: {describe(exc)} (restarted on next use)")
            raise ServerUnavailable(f"{self.spec.key}: {self.error}") from exc

    async def refresh_tools(self) -> None:
        if self.tools_stale and self.session is not None:
            self.tools = await self.request("tools/list", _list_tools)
            self.tools_stale = False

    async def list_resources(self) -> list[mt.Resource]:
        if self.resources is None:
            self.resources = await self.request("resources/list", _list_resources)
        return self.resources

    def status(self) -> dict[str, Any]:
        spec = self.spec
        info = self.init.server_info if self.init else None
        return {
            "server": spec.key, "name": spec.name, "plugin": spec.plugin,
            "source": str(spec.source), "transport": spec.transport,
            "target": spec.url if spec.transport != "stdio"
            else " ".join([spec.command or "", *spec.args]).strip(),
            "state": self.state, "error": self.error, "renamed": spec.renamed,
            "server_info": f"{info.name} {info.version}".strip() if info else None,
            "tools": [t.name for t in self.tools],
            "resources": None if self.resources is None else [r.uri for r in self.resources],
            "has_resources": self.has_resources,
        }


def _http_transport(
    url: str, headers: dict[str, str]
) -> contextlib.AbstractAsyncContextManager[Any]:
    @contextlib.asynccontextmanager
    async def cm() -> Any:
        async with create_mcp_http_client(headers=headers or None) as client:
            async with streamable_http_client(url, http_client=client) as streams:
                yield streams
    return cm()


async def _paginate(fetch: Any, field: str) -> list[Any]:
    """Every item of a paginated listing (``fetch(params)`` → a page with ``next_cursor``)."""
    items: list[Any] = []
    cursor: str | None = None
    while True:
        page = await fetch(params=mt.PaginatedRequestParams(cursor=cursor) if cursor else None)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if not cursor:
            return items


async def _list_tools(session: mcp.ClientSession) -> list[mt.Tool]:
    return await _paginate(session.list_tools, "tools")


async def _list_resources(session: mcp.ClientSession) -> list[mt.Resource]:
    return await _paginate(session.list_resources, "resources")


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    exc = _leaf(exc)
    if isinstance(exc, MCPError):
        return exc.message
    text = str(exc).strip()
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"command not found: {exc.filename}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class McpClientManager:
    """The MCP servers of one teammate run, started in the task's worktree.

    Use ``with McpClientManager.from_project(root, cwd=worktree) as mcp: mcp.tools()``.
    """

    def __init__(self, setup: McpSetup, *, cwd: Path, env: Mapping[str, str] | None = None,
                 start_timeout: float = 30.0, call_timeout: float = 300.0,
                 output_dir: Path | None = None) -> None:
        self.setup = setup
        self.cwd = Path(cwd)
        self._own_dir = tempfile.TemporaryDirectory(prefix="orch-mcp-")
        self.output_dir = output_dir or Path(self._own_dir.name) / "out"
        """Where binary content (images, blobs) is written when no spill folder is given."""
        log_dir = Path(self._own_dir.name)
        base_env = get_default_environment() | dict(env or {})
        self.servers = [
            ServerConnection(spec, cwd=self.cwd, env=base_env, start_timeout=start_timeout,
                             call_timeout=call_timeout, log_dir=log_dir)
            for spec in setup.servers
        ]
        self.call_timeout = call_timeout
        self.start_timeout = start_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self.naming_notes: list[str] = []
        """Tools renamed to stay unique (set by `tools()`)."""

    @classmethod
    def from_project(cls, root: Path, user_plugin_dir: Path | None = None, *,
                     cwd: Path | None = None, env: Mapping[str, str] | None = None,
                     config: McpConfig | None = None, output_dir: Path | None = None,
                     ) -> McpClientManager:
        """Servers of ``root``'s ``.mcp.json`` and plugins, to be run in ``cwd`` (the worktree)."""
        cfg = config or McpConfig()
        if user_plugin_dir is None and cfg.user_plugin_dir:
            user_plugin_dir = Path(cfg.user_plugin_dir).expanduser()
        setup = load_setup(Path(root), user_plugin_dir)
        return cls(setup, cwd=Path(cwd or root), env=env, start_timeout=cfg.start_timeout,
                   call_timeout=cfg.call_timeout, output_dir=output_dir)

    def __enter__(self) -> McpClientManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the event loop thread -------------------------------------------------

    def _submit(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        if self._closed:
            coro.close()
            raise ServerUnavailable("MCP client is closed")
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever,
                                            name="mcp-client", daemon=True)
            self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise ServerUnavailable(f"MCP request did not finish within {timeout:g}s") from None

    @property
    def _deadline(self) -> float:
        """A backstop over the per-server timeouts (start, then call, then stop)."""
        return self.start_timeout + self.call_timeout + 2 * STOP_GRACE

    # --- what the backend uses -----------------------------------------------------

    def start(self) -> None:
        """Connect every server at once; failures are recorded, never raised."""
        todo = [s for s in self.servers if s.state in ("stopped", "failed")]
        if todo:
            self._submit(self._start_all(todo), self._deadline)

    async def _start_all(self, servers: list[ServerConnection]) -> None:
        await asyncio.gather(*(s.ensure() for s in servers), return_exceptions=True)
        await asyncio.gather(*(s.refresh_tools() for s in self.servers if s.session),
                             return_exceptions=True)

    def tools(self) -> list[Any]:
        """The tools to give the model: one per MCP tool, plus the resource tools when some
        server declares resources. Servers not yet started (or failed) are (re)tried first."""
        from orchestrator.mcp.tools import build_tools

        self.start()
        return build_tools(self)

    def connections(self, key: str | None = None) -> list[ServerConnection]:
        if key is None:
            return list(self.servers)
        found = [s for s in self.servers if s.spec.key == key]
        if not found:
            known = ", ".join(s.spec.key for s in self.servers) or "none"
            raise ServerUnavailable(f"no MCP server named {key!r} (servers: {known})")
        return found

    def call_tool(self, key: str, tool: str, args: dict[str, Any]) -> mt.CallToolResult:
        conn = self.connections(key)[0]
        result = self._submit(
            conn.request(f"tool {tool}", lambda s: s.call_tool(tool, args)), self._deadline)
        return cast(mt.CallToolResult, result)

    def list_resources(self, key: str | None = None) -> dict[str, list[mt.Resource] | str]:
        """Resources per server (cached until ``list_changed``); a failing server maps to
        its error text instead of taking the listing down."""
        conns = [c for c in self.connections(key) if c.has_resources or key]
        return self._submit(self._list_all(conns), self._deadline)

    async def _list_all(self, conns: list[ServerConnection]) -> dict[str, list[mt.Resource] | str]:
        out: dict[str, list[mt.Resource] | str] = {}
        results = await asyncio.gather(*(c.list_resources() for c in conns),
                                       return_exceptions=True)
        for conn, res in zip(conns, results, strict=True):
            out[conn.spec.key] = res if isinstance(res, list) else describe(res)
        return out

    def read_resource(self, key: str, uri: str) -> mt.ReadResourceResult:
        conn = self.connections(key)[0]
        result = self._submit(
            conn.request(f"read {uri}", lambda s: s.read_resource(uri)), self._deadline)
        return cast(mt.ReadResourceResult, result)

    def status(self) -> list[dict[str, Any]]:
        return [s.status() for s in self.servers]

    def capabilities_text(self) -> str:
        """The "MCP capabilities" section of the system prompt (empty without servers)."""
        from orchestrator.mcp.tools import capabilities_text

        return capabilities_text(self)

    def close(self) -> None:
        """Stop every server and the event loop thread. Safe to call twice."""
        if self._closed:
            return
        try:
            if self._loop is not None:
                with contextlib.suppress(Exception):
                    fut = asyncio.run_coroutine_threadsafe(self._close_all(), self._loop)
                    fut.result(STOP_GRACE * 2)
                self._loop.call_soon_threadsafe(self._loop.stop)
                if self._thread is not None:
                    self._thread.join(STOP_GRACE)
                self._loop.close()
        finally:
            self._closed = True
            self._own_dir.cleanup()

    async def _close_all(self) -> None:
        await asyncio.gather(*(s.close() for s in self.servers), return_exceptions=True)
