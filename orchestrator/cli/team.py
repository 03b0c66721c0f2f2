"""Team commands: up, down, status, send, logs."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

# orchestrator.board first: `import orchestrator.events` on its own hits an import cycle
from orchestrator.board.model import normalize_task_id
from orchestrator.cli.app import JsonOpt, RepoOpt, app, open_repo, print_json
from orchestrator.config import Config
from orchestrator.errors import ConfigError, InvalidInput, NotFound
from orchestrator.events import EventLog
from orchestrator.tasklog import read_jsonl
from orchestrator.team import status
from orchestrator.team.mailbox import Mailbox, check_name


def _overrides(**team: Any) -> dict[str, dict[str, Any]]:
    return {"team": {k: v for k, v in team.items() if v is not None}}


@app.command()
def up(
    teammates: Annotated[int | None, typer.Option("-n", "--teammates",
                                                  help="How many teammates.")] = None,
    backend: Annotated[str | None, typer.Option("--backend", help="Agent backend.")] = None,
    command: Annotated[str | None, typer.Option(
        "--command", help="Shell command for the command backend.")] = None,
    verify: Annotated[str | None, typer.Option(
        "--verify", help="Verification command run after each task.")] = None,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Run in the background.")] = False,
    burst: Annotated[bool, typer.Option(
        "--burst", help="Exit when no claimable work is left (1 if a task failed).")] = False,
    repo: RepoOpt = None,
) -> None:
    """Start the lead and its teammates (Ctrl-C once: warm stop, twice: stop now)."""
    r = open_repo(repo)
    overrides = _overrides(backend=backend, command=command, verify=verify)
    config = Config.load(r.layout.root, overrides=overrides)  # bad values fail here, not later
    if teammates is not None and not 1 <= teammates <= 64:
        raise InvalidInput(f"-n must be between 1 and 64, not {teammates}")
    check_team(config)
    from orchestrator.team import daemon  # the whole runtime: only `up` and `down` need it

    if detach:
        pid = daemon.up_detached(r.layout, teammates=teammates, overrides=overrides, burst=burst)
        typer.echo(f"orchestrator running in the background (pid {pid}); "
                   f"log: {status.log_file(r.layout)}")
        return
    code = daemon.up(r.layout, config, teammates=teammates, overrides=overrides, burst=burst)
    raise typer.Exit(code)


def check_team(config: Config) -> None:
    """Refuse a team that could only fail: an unknown backend, a command backend without one."""
    from orchestrator.backends import BACKENDS

    if config.team.backend not in BACKENDS:
        raise ConfigError(f"unknown backend {config.team.backend!r} "
                          f"(choose from: {', '.join(sorted(BACKENDS))})")
    if config.team.backend == "command" and not config.team.command:
        raise ConfigError("the command backend needs a command: --command 'CMD' "
                          "or team.command in orchestrator.toml")


@app.command()
def down(
    now: Annotated[bool, typer.Option("--now", help="Cold stop: kill running work.")] = False,
    repo: RepoOpt = None,
) -> None:
    """Stop the running daemon (warm: running tasks finish their step and are released)."""
    from orchestrator.team import daemon

    r = open_repo(repo)
    pid = daemon.down(r.layout, now=now)
    typer.echo("orchestrator is not running" if pid is None else f"stopped (pid {pid})")


@app.command("status")
def status_cmd(json_out: JsonOpt = False, repo: RepoOpt = None) -> None:
    """The daemon, what each teammate is doing, and the board counts."""
    r = open_repo(repo)
    st = status.team_status(r.layout, _counts(r))
    if json_out:
        print_json(st)
    else:
        typer.echo(status.format_status(st))


def _counts(r: Any) -> dict[str, int]:
    """The board's counts by status, without building every task (see `count_statuses`)."""
    from orchestrator.board.index import count_statuses

    return count_statuses(r.layout.tasks)


@app.command()
def send(
    name: Annotated[str, typer.Argument(help="Teammate name, `lead`, or `all`.")],
    message: Annotated[str, typer.Argument(help="The message.")],
    kind: Annotated[str, typer.Option("--kind", help="Message kind.")] = "message",
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
) -> None:
    """Put a message in a teammate's mailbox (`shutdown_request` asks it to stop)."""
    r = open_repo(repo)
    if name == "all":
        names = [m["name"] for m in status.team_status(r.layout)["teammates"]]
        if not names:
            raise NotFound("no teammates known yet (start the team with `orchestrator up`)")
    else:
        names = [check_name(name)]
    extra = {"request_id": _rid()} if kind.endswith("_request") else {}
    sent = [Mailbox(r.layout, n).send("cli", message, kind=kind, **extra) for n in names]
    if json_out:
        print_json(sent)
    else:
        for m in sent:
            typer.echo(f"sent {m['kind']} {m['id']} to {m['to']}")


def _rid() -> str:
    import uuid

    return uuid.uuid4().hex[:12]


@app.command()
def logs(
    task_id: Annotated[str, typer.Argument(help="The task, e.g. task_001 or 1.")],
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing new lines.")]
    = False,
    json_out: JsonOpt = False,
    repo: RepoOpt = None,
) -> None:
    """Print a task's log (backend output, checks, commits)."""
    r = open_repo(repo)
    tid = normalize_task_id(task_id)
    path = r.layout.logs / f"{tid}.jsonl"
    if not path.exists() and not r.layout.task_file(tid).exists() and not follow:
        raise NotFound(f"no task {tid} and no log for it")
    records = EventLog(path).follow() if follow else read_jsonl(path)
    for rec in records:
        typer.echo(json.dumps(rec, ensure_ascii=False) if json_out else format_log(rec))


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

