"""``orchestrator enter ID [-- CMD …]``: a shell, or one command, in a task's workspace."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from orchestrator.board import open_board
from orchestrator.cli.app import JsonOpt, RepoOpt, app, open_repo, print_json
from orchestrator.cli.output import echo
from orchestrator.errors import InvalidInput
from orchestrator.events import WorktreeEntered
from orchestrator.model import normalize_task_id


@app.command("enter")
def enter(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    command: Annotated[list[str] | None, typer.Argument(
        metavar="[-- CMD...]", help="Run this command there instead of a shell.")] = None,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Open your shell in a task's worktree with the task's environment (ORCH_TASK_ID,
    ORCH_PORT_BASE…); exit it to come back. `enter ID -- CMD` runs one command there and
    exits with its status. The task itself is not touched."""
    from orchestrator.worktree import open_isolation
    from orchestrator.worktree.enter import run_in, user_shell, workspace_of

    r = open_repo(repo)
    task_id = normalize_task_id(task_id)
    with open_board(r.layout, r.board, actor="cli") as board:
        path, env = workspace_of(open_isolation(r.layout, r.config.worktree, board), board,
                                 task_id)
        board.events.emit(WorktreeEntered(path=str(path), command=command or None), task_id,
                          actor="cli")
    argv = command or [user_shell()]
    if json_ and not command:
        raise InvalidInput("--json needs a command: orchestrator enter ID --json -- CMD")
    if not command:
        echo(f"entering {task_id} in {path} (exit the shell to come back)", err=True)
    last = b"\n"

    def relay(chunk: bytes) -> None:  # the command's output first, as it comes
        nonlocal last
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        last = chunk[-1:]

    try:
        code = run_in(path, env, argv, relay if json_ else None)
    except (FileNotFoundError, PermissionError) as exc:
        echo(f"error: cannot run {argv[0]}: {exc.strerror}", err=True)
        raise typer.Exit(127 if isinstance(exc, FileNotFoundError) else 126) from exc
    if json_:  # then the JSON, on a line of its own (the last line) even after `printf x`
        if last != b"\n":
            sys.stdout.buffer.write(b"\n")
        print_json({"task": task_id, "worktree": path, "command": argv, "exit_code": code})
    raise typer.Exit(code)
