"""The web board's routes (Starlette), over `orchestrator.ui.pages` and the library.

Pages (GET): ``/`` the board, ``/task/ID``, ``/task/ID/review``, ``/needs``, ``/team``;
fragments and feeds: ``/column/NAME``, ``/stream`` (the board's live feed),
``/task/ID/stream`` (a task's transcript as it grows).
Actions (POST, JSON in and out): ``/api/tasks`` add; ``/api/task/ID/cancel|retry|merge|
discard``; ``/api/requests/ID/approve|deny``; ``/api/team/start|stop`` (``--allow-control``).
Each action is one call of the function the CLI command calls; its refusal (a
`UserError`) comes back as ``{"error": "…"}`` with 400/404/409, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from orchestrator.adding import add_task
from orchestrator.agent import permission_flow
from orchestrator.board import open_board
from orchestrator.budget import money
from orchestrator.config import Config
from orchestrator.errors import Conflict, InvalidInput, NotFound, OrchestratorError, UserError
from orchestrator.events import (
    ForgeWebhook,
    TeammateStarted,
    TeammateStopped,
    names,
    redact,
    secret_values,
)
from orchestrator.layout import Layout
from orchestrator.review import STRATEGIES, discard_task, merge_task, retry_task
from orchestrator.review.resuming import resume_task
from orchestrator.ui import cards, diffview, live, pages, transcript
from orchestrator.ui.security import Guard, middleware

ACTOR = "ui"
MAX_BODY = 256 * 1024
KEEPALIVE_SECONDS = 15.0
TEAM_EVENTS = names(TeammateStarted, TeammateStopped)
"""Events after which the team panel is drawn again."""


class Ui:
    """One running web board: its board, its templates, its live feed."""

    def __init__(self, layout: Layout, config: Config, guard: Guard, *,
                 allow_control: bool = False) -> None:
        self.guard = guard
        self.allow_control = allow_control
        board = open_board(layout, config.board, actor=ACTOR)
        self.ctx = pages.Context(layout, config, board, threading.RLock())
        self.secrets = secret_values()
        self.jinja = Environment(loader=PackageLoader("orchestrator.ui", "templates"),
                                 autoescape=select_autoescape(default=True),
                                 finalize=self._finalize, trim_blocks=True, lstrip_blocks=True)
        self.jinja.filters["money"] = money
        self.jinja.globals.update(all_columns=cards.COLUMNS, strategies=STRATEGIES,
                                  allow_control=allow_control, token=guard.token)
        self.diff_css = diffview.css()
        self.hub = live.Hub(live.EventSource(board.events).read, self._render_events)
        self.sent: dict[str, str] = {}
        """The card last sent for each task (a second look sends only a changed one)."""
        # Read the whole board and compile the templates now, not on the first page load.
        view = pages.board_view(self.ctx, cards.Filters())
        self.render("board.html", **view, page=cards.PAGE, needs_count=view["needs"])
        for name in self.jinja.list_templates():
            self.jinja.get_template(name)

    def _finalize(self, value: Any) -> Any:
        """Every value a template prints passes here: secrets never reach the page."""
        if value is None:
            return ""
        if isinstance(value, str):
            return redact(value, self.secrets)
        return value

    def render(self, name: str, **context: Any) -> str:
        return str(self.jinja.get_template(name).render(**context))

    def page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        """A full page; the needs-you count for its title is counted here unless given."""
        if "needs_count" not in context:
            context["needs_count"] = pages.needs_count(self.ctx)
        return HTMLResponse(self.render(name, **context), status_code=status)

    async def _render_events(self, batch: list[dict[str, Any]]) -> list[live.Message]:
        """The messages for a batch of events: each named task's card (a second look only
        when the card changed since it was sent), the counts, a team refresh."""
        ids = [str(e["task"]) for e in batch if isinstance(e.get("task"), str)]
        second = {str(e["task"]) for e in batch if e.get("event") == live.RECHECK}
        team = any(e.get("event") in TEAM_EVENTS for e in batch)
        upd = await run_in_threadpool(pages.card_updates, self.ctx, ids)
        out: list[live.Message] = []
        for c in upd["cards"]:
            html = self.render("_card.html", c=c)
            if c["id"] in second and self.sent.get(c["id"]) == html:
                continue
            self.sent[c["id"]] = html
            out.append({"type": "card", "id": c["id"], "column": c["column"],
                        "owner": c["owner"], "labels": c["labels"],
                        "text": f"{c['id']} {c['subject']}".lower(), "html": html})
        if out or len(second) < len(set(ids)):
            out.append({"type": "counts", "counts": upd["counts"], "needs": upd["needs"]})
        if team:
            out.append({"type": "team"})
        return [json.loads(redact(json.dumps(m), self.secrets)) for m in out]

    def close(self) -> None:
        self.ctx.board.close()


def create_app(layout: Layout, config: Config, guard: Guard, *,
               allow_control: bool = False) -> Any:
    """The ASGI application (wrapped in the guard's checks)."""
    ui = Ui(layout, config, guard, allow_control=allow_control)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        ui.hub.start()
        try:
            yield
        finally:
            await ui.hub.stop()
            ui.close()

    routes = [
        Route("/", _board(ui)),
        Route("/diff.css", _diff_css(ui)),
        Route("/favicon.ico", _no_icon),
        Route("/column/{name}", _column(ui)),
        Route("/stream", _stream(ui)),
        Route("/task/{ident}", _task(ui)),
        Route("/task/{ident}/review", _review(ui)),
        Route("/task/{ident}/stream", _task_stream(ui)),
        Route("/needs", _needs(ui)),
        Route("/team", _team(ui)),
        Route("/api/tasks", _add(ui), methods=["POST"]),
        Route("/api/task/{ident}/{action}", _act(ui), methods=["POST"]),
        Route("/api/requests/{ident}/{verdict}", _answer(ui), methods=["POST"]),
        Route("/api/team/{action}", _control(ui), methods=["POST"]),
        Mount("/static", StaticFiles(directory=Path(__file__).parent / "static"),
              name="static"),
    ]
    handlers: dict[Any, Callable[..., Any]] = {
        404: _not_found(ui), 405: _plain(405, "method not allowed"),
        Exception: _crash(ui)}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
    from orchestrator.forge.webhook import read_secret, with_webhooks

    return with_webhooks(middleware(app, guard), read_secret(config.forge, layout.root),
                         lambda hook: ui.ctx.board.events.emit(ForgeWebhook(hook=hook), None,
                                                               actor="forge"))


Endpoint = Callable[[Request], Any]


def _error_status(exc: OrchestratorError) -> int:
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, Conflict):
        return 409
    return 400 if isinstance(exc, UserError) else 500


def _guarded_page(ui: Ui, fn: Callable[[Request], Any]) -> Endpoint:
    """A page whose user errors become an error page with the message (404 for a bad id)."""
    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request)  # type: ignore[no-any-return]
        except OrchestratorError as exc:
            return ui.page("error.html", status=_error_status(exc), message=str(exc))
    return endpoint


def _board(ui: Ui) -> Endpoint:
    async def board(request: Request) -> Response:
        filters = cards.Filters.from_query(request.query_params)
        view = await run_in_threadpool(pages.board_view, ui.ctx, filters)
        return ui.page("board.html", **view, page=cards.PAGE, needs_count=view["needs"])
    return _guarded_page(ui, board)


def _diff_css(ui: Ui) -> Endpoint:
    async def css(_request: Request) -> Response:
        return Response(ui.diff_css, media_type="text/css",
                        headers={"Cache-Control": "max-age=3600"})
    return css


async def _no_icon(_request: Request) -> Response:
    return Response(status_code=204)


def _column(ui: Ui) -> Endpoint:
    async def column(request: Request) -> Response:
        filters = cards.Filters.from_query(request.query_params)
        offset = _int(request.query_params.get("offset"), 0, 0, 10**7)
        limit = _int(request.query_params.get("limit"), cards.PAGE, 1, 1000)
        found = await run_in_threadpool(pages.column_page, ui.ctx, request.path_params["name"],
                                        filters, offset, limit)
        return HTMLResponse("".join(ui.render("_card.html", c=c) for c in found))
    return _guarded_page(ui, column)


def _int(value: str | None, default: int, lo: int, hi: int) -> int:
    try:
        return max(lo, min(hi, int(value))) if value is not None else default
    except ValueError:
        return default


def _stream(ui: Ui) -> Endpoint:
    async def stream(request: Request) -> Response:
        q = ui.hub.subscribe()

        async def events() -> AsyncIterator[str]:
            try:
                yield "retry: 1000\nevent: hello\ndata: {}\n\n"
                while True:
                    try:
                        msg = await asyncio.wait_for(q.get(), KEEPALIVE_SECONDS)
                    except TimeoutError:
                        yield ": keepalive\n\n"
                        continue
                    yield live.sse(msg)
            finally:
                ui.hub.unsubscribe(q)

        return _sse(events())
    return stream


def _sse(body: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _task(ui: Ui) -> Endpoint:
    async def task(request: Request) -> Response:
        view = await run_in_threadpool(pages.task_view, ui.ctx, request.path_params["ident"])
        return ui.page("task.html", **view)
    return _guarded_page(ui, task)


def _task_stream(ui: Ui) -> Endpoint:
    async def stream(request: Request) -> Response:
        task = await run_in_threadpool(ui.ctx.task, request.path_params["ident"])
        offset = _int(request.query_params.get("offset"), 0, 0, 1 << 40)

        async def events() -> AsyncIterator[str]:
            loop = asyncio.get_running_loop()
            q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
            stop = threading.Event()

            def pump() -> None:  # the transcript after what the page shows, as it grows
                follow = ui.ctx.board.logs.follow(task.id, stop=stop, poll=live.POLL_SECONDS)
                for i, rec in enumerate(follow):
                    if i >= offset:
                        loop.call_soon_threadsafe(q.put_nowait, rec.to_dict())

            threading.Thread(target=pump, name=f"ui-log-{task.id}", daemon=True).start()
            try:
                while True:
                    try:
                        rec = await asyncio.wait_for(q.get(), KEEPALIVE_SECONDS)
                    except TimeoutError:
                        yield ": keepalive\n\n"
                        continue
                    html = ui.render("_entry.html", e=transcript.entry(rec))
                    yield live.sse({"type": "entry", "html": html})
            finally:
                stop.set()

        return _sse(events())
    return _guarded_page(ui, stream)


def _review(ui: Ui) -> Endpoint:
    async def review(request: Request) -> Response:
        view = await run_in_threadpool(pages.review_view, ui.ctx, request.path_params["ident"])
        split = request.query_params.get("view") == "split"
        return ui.page("review.html", **view, split=split)
    return _guarded_page(ui, review)


def _needs(ui: Ui) -> Endpoint:
    async def needs(request: Request) -> Response:
        view = await run_in_threadpool(pages.needs_view, ui.ctx)
        return ui.page("needs.html", **view, needs_count=view["count"])
    return _guarded_page(ui, needs)


def _team(ui: Ui) -> Endpoint:
    async def team(request: Request) -> Response:
        view = await run_in_threadpool(pages.team_view, ui.ctx)
        return ui.page("team.html", team=view)
    return _guarded_page(ui, team)


# --- actions ---------------------------------------------------------------------------

async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise InvalidInput(f"the request is larger than {MAX_BODY // 1024} KiB")
    try:
        data = json.loads(raw or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidInput("the request body is not JSON") from None
    if not isinstance(data, dict):
        raise InvalidInput("the request body must be a JSON object")
    return data


def _action(ui: Ui, fn: Callable[[Request, dict[str, Any]], Any]) -> Endpoint:
    """A POST endpoint: JSON body in, ``fn``'s result (a dict) out, run in a thread;
    a `UserError` comes back as ``{"error": message}`` with its status."""
    async def endpoint(request: Request) -> Response:
        try:
            body = await _json_body(request)
            result = await run_in_threadpool(fn, request, body)
        except OrchestratorError as exc:
            return JSONResponse({"error": redact(str(exc), ui.secrets)},
                                status_code=_error_status(exc))
        return JSONResponse(json.loads(redact(json.dumps(result, default=str), ui.secrets)))
    return endpoint


def _str(body: dict[str, Any], key: str, default: str = "", limit: int = 100_000) -> str:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise InvalidInput(f"{key} must be text")
    if len(value) > limit:
        raise InvalidInput(f"{key} is longer than {limit} characters")
    return value


def _words(value: str) -> list[str]:
    return [w for w in value.replace(",", " ").split() if w]


def _add(ui: Ui) -> Endpoint:
    def add(_request: Request, body: dict[str, Any]) -> dict[str, Any]:
        subject = _str(body, "subject", limit=500).strip()
        if not subject:
            raise InvalidInput("the subject is empty")
        try:
            priority = int(_str(body, "priority", "0", 12) or 0)
        except ValueError:
            raise InvalidInput("the priority must be a whole number") from None
        agent = _str(body, "agent", limit=100).strip() or None
        with ui.ctx.lock:
            task = add_task(ui.ctx.layout, ui.ctx.config, ui.ctx.board, subject,
                            description=_str(body, "description"),
                            blocked_by=_words(_str(body, "blocked_by", limit=2000)),
                            priority=priority, agent=agent,
                            plan_first=bool(body.get("plan_first")),
                            labels=_words(_str(body, "labels", limit=2000)), actor=ACTOR)
        return {"id": task.id, "subject": task.subject}
    return _action(ui, add)


def _act(ui: Ui) -> Endpoint:
    def act(request: Request, body: dict[str, Any]) -> dict[str, Any]:
        action = request.path_params["action"]
        task = ui.ctx.task(request.path_params["ident"])
        c = ui.ctx
        with c.lock:
            if action == "cancel":
                done = c.board.cancel(task.id, actor=ACTOR)
                return {"id": done.id, "status": str(done.status)}
            if action == "retry":
                feedback = _str(body, "feedback").strip() or None
                done = retry_task(c.layout, c.config, task.id, feedback, actor=ACTOR,
                                  board=c.board)
                return {"id": done.id, "status": str(done.status)}
            if action in ("resume", "resume_review"):  # a budget or no-progress wait
                usd = _str(body, "budget_usd", limit=40).strip() or None
                done = resume_task(c.layout, c.config, task.id, usd=usd,
                                   review=action == "resume_review",
                                   feedback=_str(body, "message").strip() or None,
                                   actor=ACTOR, board=c.board)
                return {"id": done.id, "status": str(done.status)}
            if action == "merge":
                res = merge_task(c.layout, c.config, task.id, _str(body, "strategy", "merge"),
                                 _str(body, "into", limit=250).strip() or None, actor=ACTOR,
                                 board=c.board, with_blockers=bool(body.get("with_blockers")))
                return {"id": task.id, "status": str(res.task.status), "into": res.into,
                        "commit": res.commit, "snapshot": res.snapshot, "note": res.note,
                        "blockers": res.blockers}
            if action == "discard":
                dres = discard_task(c.layout, c.config, task.id, bool(body.get("force")),
                                    actor=ACTOR, board=c.board)
                return {"id": task.id, "status": str(dres.task.status),
                        "snapshot": dres.snapshot}
        raise NotFound(f"no action {action[:40]!r}")
    return _action(ui, act)


def _answer(ui: Ui) -> Endpoint:
    def answer(request: Request, body: dict[str, Any]) -> dict[str, Any]:
        verdict = request.path_params["verdict"]
        if verdict not in ("approve", "deny"):
            raise NotFound(f"no answer {verdict[:20]!r} (approve or deny)")
        req = permission_flow.answer(ui.ctx.board, request.path_params["ident"],
                                     approved=verdict == "approve",
                                     message=_str(body, "message", limit=20_000), actor=ACTOR)
        return {"request_id": req["request_id"], "task": req.get("task"),
                "approved": verdict == "approve"}
    return _action(ui, answer)


def _control(ui: Ui) -> Endpoint:
    def control(request: Request, body: dict[str, Any]) -> dict[str, Any]:
        from orchestrator.team import daemon

        if not ui.allow_control:
            raise Conflict("starting and stopping the team is off: run "
                           "`orchestrator ui --allow-control` to allow it")
        action = request.path_params["action"]
        if action == "start":
            n = body.get("teammates")
            if n is not None and (not isinstance(n, int) or not 1 <= n <= 64):
                raise InvalidInput("teammates must be a number between 1 and 64")
            daemon.check_team(Config.load(ui.ctx.layout.root))  # as `up` does, from the file
            pid = daemon.up_detached(ui.ctx.layout, teammates=n)
            return {"started": pid}
        if action == "stop":
            return {"stopped": daemon.down(ui.ctx.layout, wait=30)}
        raise NotFound(f"no team action {action[:20]!r}")
    return _action(ui, control)


# --- errors ------------------------------------------------------------------------------

def _not_found(ui: Ui) -> Callable[[Request, Exception], Any]:
    async def handler(request: Request, exc: Exception) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": "no such endpoint"}, status_code=404)
        return ui.page("error.html", status=404, message=f"nothing at {request.url.path[:200]}")
    return handler


def _plain(status: int, message: str) -> Callable[[Request, Exception], Any]:
    async def handler(request: Request, exc: Exception) -> Response:
        return Response(message + "\n", status_code=status, media_type="text/plain")
    return handler


def _crash(ui: Ui) -> Callable[[Request, Exception], Any]:
    async def handler(request: Request, exc: Exception) -> Response:
        import logging

        logging.getLogger("orchestrator.ui").exception("error serving %s", request.url.path)
        message = redact(f"internal error: {type(exc).__name__}: {exc}", ui.secrets)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": message}, status_code=500)
        return ui.page("error.html", status=500, message=message)
    return handler
