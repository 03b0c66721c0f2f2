"""Team commands: up, down, status, send, logs."""

from __future__ import annotations

import threading
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.backend_names import BACKENDS
from orchestrator.board import open_board
from orchestrator.cli.app import JsonOpt, RepoOpt, app, open_repo, print_json, require_commit
from orchestrator.cli.output import echo
from orchestrator.errors import InvalidInput, NotFound
from orchestrator.model import normalize_task_id
from orchestrator.team import status
from orchestrator.team.mailbox import check_name
from orchestrator.transcript import render


def _overrides(**team: Any) -> dict[str, dict[str, Any]]:
    return {"team": {k: v for k, v in team.items() if v is not None}}


@app.command()
def up(
    teammates: Annotated[int | None, typer.Option("-n", "--teammates",
                                                  help="How many teammates.")] = None,
    backend: Annotated[str | None, typer.Option(
        "--backend", help=f"Agent backend: {', '.join(BACKENDS)} (default: team.backend, "
                          "command).")] = None,
    command: Annotated[str | None, typer.Option(
        "--command", help="Shell command for the command backend.")] = None,
    verify: Annotated[str | None, typer.Option(
        "--verify", help="Verification command run after each task.")] = None,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Run in the background.")] = False,
    burst: Annotated[bool, typer.Option(
        "--burst", help="Exit when no claimable work is left (1 if a task failed).")] = False,
    land: Annotated[bool, typer.Option(
        "--land", help="Land each task once it reaches review (see `orchestrator land`).")
    ] = False,
    repo: RepoOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Start the lead and its teammates (Ctrl-C once: warm stop, twice: stop now)."""
    r = open_repo(repo)
    require_commit(r.layout.root)
    overrides = _overrides(backend=backend, command=command, verify=verify,
                           land=True if land else None)
    from orchestrator.config import Config

    config = Config.load(r.layout.root, overrides=overrides)  # bad values fail here, not later
    if teammates is not None and not 1 <= teammates <= 64:
        raise InvalidInput(f"-n must be between 1 and 64, not {teammates}")
    from orchestrator.team import daemon  # the whole runtime: only `up` and `down` need it

    daemon.check_team(config)
    if config.team.backend == "command" and config.team.command:
        from orchestrator.backends.command import locate_command

        start = Path.cwd() if command else r.layout.root
        located, note = locate_command(config.team.command, start, r.layout.root)
        if note:
            echo(f"note: {note}", err=True)
            overrides["team"]["command"] = located
            config = Config.load(r.layout.root, overrides=overrides)
    if detach:
        pid = daemon.up_detached(r.layout, teammates=teammates, overrides=overrides, burst=burst)
        if json_out:
            print_json({"pid": pid, "log": status.log_file(r.layout), "detached": True})
        else:
            echo(f"orchestrator running in the background (pid {pid}); "
                       f"log: {status.log_file(r.layout)}")
        return
    code = daemon.up(r.layout, config, teammates=teammates, overrides=overrides, burst=burst)
    if json_out:  # the log went to stderr; the outcome, for scripts
        from orchestrator.board import open_board

        with open_board(r.layout, r.board, actor="cli") as board:
            print_json({"exit_code": code, "board": status.board_counts(board.list()),
                        "failed": [{"id": t.id, "error": t.error}
                                   for t in board.list() if t.status == "failed"]})
    raise typer.Exit(code)


@app.command()
def down(
    now: Annotated[bool, typer.Option("--now", help="Cold stop: kill running work.")] = False,
    all_machines: Annotated[bool, typer.Option(
        "--all", help="With a board shared across machines: ask every machine's team to "
                      "stop too (a warm stop), not only this machine's.")] = False,
    repo: RepoOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Stop this machine's running daemon (warm: running tasks finish their step and are
    released); `--all` asks every other machine's team on the shared board to stop too."""
    r = open_repo(repo, lenient=True)
    from orchestrator.team import daemon

    others = _stop_other_machines(r) if all_machines else []
    pid = daemon.down(r.layout, now=now)
    if json_out:
        print_json({"stopped": pid is not None, "pid": pid, "mode": "cold" if now else "warm",
                    **({"other_machines": others} if all_machines else {})})
        return
    line = "orchestrator is not running" if pid is None else f"stopped (pid {pid})"
    if all_machines:
        line += (f"; asked the teams of {len(others)} other machine"
                 f"{'s' if len(others) != 1 else ''} to stop: {', '.join(others)}" if others
                 else "; no other machine's team is on the board")
    echo(line)


def _stop_other_machines(r: Any) -> list[str]:
    """Send a shutdown request to the lead of every other machine whose teammates the
    shared board knows (their leads stop warm on reading it); the machines asked."""
    with open_board(r.layout, r.board, actor="cli") as board:
        here = getattr(board, "machine", None)
        if here is None:
            return []  # a file board is one machine's
        machines = sorted({st.host for st in board.team.all()
                           if st.host is not None and st.host != here})
        for m in machines:
            board.mailboxes.send("lead", "cli", "down --all", kind="shutdown_request",
                                 request_id=_rid(), machine=m)
    return machines


@app.command("status")
def status_cmd(json_out: JsonOpt = False, repo: RepoOpt = None) -> None:
    """The daemon, what each teammate is doing, and the board counts."""
    from orchestrator.cli import tasks

    tasks.status(json_out=json_out, repo=repo)


class SendKind(StrEnum):
    """What `orchestrator send` may send (the other kinds are the team's own)."""

    MESSAGE = "message"
    SHUTDOWN_REQUEST = "shutdown_request"


@app.command()
def send(
    name: Annotated[str, typer.Argument(help="Teammate name, `lead`, or `all`.")],
    message: Annotated[str, typer.Argument(help="The message.")],
    kind: Annotated[SendKind, typer.Option(
        "--kind", help="message: delivered to the agent; shutdown_request: the teammate "
                       "finishes its step and stops.")] = SendKind.MESSAGE,
    machine: Annotated[str | None, typer.Option(
        "--machine", help="With a board shared across machines: the machine whose "
                          "teammate (or lead) gets it (default: this one).")] = None,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
) -> None:
    """Put a message in a teammate's mailbox (`shutdown_request` asks it to stop); this
    machine's teammate unless `--machine` names another."""
    r = open_repo(repo, lenient=True)
    with open_board(r.layout, r.board, actor="cli") as board:
        mates = status.team_status(r.layout, board)["teammates"]
        known, where = _teammates_on(mates, machine, getattr(board, "machine", None))
        names = _recipients(name, known, r.config.team.names)
        extra = {"request_id": _rid()} if kind.endswith("_request") else {}
        sent = [board.mailboxes.send(n, "cli", message, kind=str(kind), **where, **extra)
                for n in names]
    if json_out:
        print_json([m.to_dict() for m in sent])
    else:
        for m in sent:
            echo(f"sent {m.kind} {m.id} to {m.to}"
                       + (f" on {machine}" if where else ""))


def _teammates_on(mates: list[dict[str, Any]], machine: str | None, here: str | None
                  ) -> tuple[list[str], dict[str, str]]:
    """The teammates of ``machine`` (this one when None), and where a message to them
    goes."""
    if machine is None or machine == here:
        return [m["name"] for m in mates if not m.get("host")], {}
    machines = sorted({m["host"] for m in mates if m.get("host")})
    if here is None or machine not in machines:
        raise NotFound(f"no machine {machine!r} on this board" + (
            f" (choose from: {', '.join(machines)})" if machines else ""))
    return [m["name"] for m in mates if m.get("host") == machine], {"machine": machine}


def _recipients(name: str, known: list[str], configured: list[str]) -> list[str]:
    """Who ``name`` sends to: every ``known`` teammate for ``all``, else the one named
    (a known or configured teammate, or the lead)."""
    if name == "all":
        if not known:
            raise NotFound("no teammates known yet (start the team with `orchestrator up`)")
        return known
    check_name(name)
    valid = ["lead", *dict.fromkeys([*known, *configured])]
    if name not in valid:
        raise NotFound(f"no teammate {name!r} (choose from: all, {', '.join(valid)})")
    return [name]


def _rid() -> str:
    import uuid

    return uuid.uuid4().hex[:12]


@app.command()
def logs(
    task_id: Annotated[str, typer.Argument(help="The task, e.g. task_001 or 1.")],
    follow: Annotated[bool, typer.Option(
        "-f", "--follow", help="Keep printing new lines until the task's run ends.")] = False,
    raw: Annotated[bool, typer.Option(
        "--raw", help="Every record, fields as they are (model requests, stream messages).")]
    = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
) -> None:
    """A task's transcript: the agent's text, tool calls and results, output, checks,
    commits and costs."""
    r = open_repo(repo, lenient=True)
    tid = normalize_task_id(task_id)
    with open_board(r.layout, r.board, actor="cli") as board:
        if not follow and not board.logs.exists(tid):
            try:
                board.get(tid)
            except NotFound:
                raise NotFound(f"no task {tid} and no log for it") from None
        records = board.logs.follow(tid, stop=_run_ended(r, tid)) if follow else \
            board.logs.read(tid)
        for record in records:
            rec = record.to_dict()
            if json_out:
                print_json(rec)  # JSON as it is: a reader decodes it
                continue
            line = format_log(rec) if raw else render(rec)
            if line is not None:  # what an agent wrote: its control characters written out
                echo(line)


def _run_ended(r: Any, task_id: str, grace: float = 0.6) -> threading.Event:
    """Set once the task is neither pending nor running (its last lines are written before
    its status changes; ``grace`` lets the follower read them)."""
    from orchestrator.model import Status

    ended = threading.Event()

    def watch() -> None:
        board = open_board(r.layout, r.board, actor="cli")
        try:
            while True:
                try:
                    st = board.get(task_id).status
                except NotFound:
                    st = None
                if st not in (Status.PENDING, Status.IN_PROGRESS, None):
                    time.sleep(grace)
                    ended.set()
                    return
                time.sleep(0.3)
        finally:
            board.close()

    threading.Thread(target=watch, name="logs-follow", daemon=True).start()
    return ended


def format_log(rec: dict[str, Any]) -> str:
    """One readable line (or block, for output) per log record."""
    ts = str(rec.get("ts", ""))[11:19]
    who = f" {rec['actor']}" if rec.get("actor") else ""
    kind = rec.get("kind", "?")
    if kind in ("output", "verify_output") and "text" in rec:
        return str(rec["text"]).rstrip("\n")
    rest = {k: v for k, v in rec.items() if k not in ("ts", "kind", "actor")}
    fields = " ".join(f"{k}={v}" for k, v in rest.items())
    return f"[{ts}{who}] {kind} {fields}".rstrip()

