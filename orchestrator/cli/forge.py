"""``orchestrator forge check|sync``: the team's forge (``[forge]``, docs/forge.md)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

import typer

from orchestrator.cli.app import JsonOpt, Repo, RepoOpt, app, open_repo, print_json
from orchestrator.cli.output import echo
from orchestrator.errors import ConfigError

if TYPE_CHECKING:
    from orchestrator.forge import Forge

forge_app = typer.Typer(help="The forge where the team reviews in pull requests: `forge check` "
                             "says what works, `forge sync` runs one pass.",
                        no_args_is_help=True)
app.add_typer(forge_app, name="forge")


def _forge(r: Repo) -> Forge:
    from orchestrator.forge import open_forge

    forge = open_forge(r.config.forge, r.layout.root)
    if forge is None:
        raise ConfigError("no forge: set [forge] kind = \"github\" and repo = \"owner/name\" "
                          "(orchestrator config set forge.kind github)")
    return forge


@forge_app.command("check")
def check_cmd(repo: RepoOpt = None, json_: JsonOpt = False) -> None:
    """One line for each thing the team needs of the forge (token, repository, push rights,
    checks readable) and what to fix; exit 1 when one fails."""
    r = open_repo(repo)
    forge = _forge(r)
    try:
        lines = forge.check()
    finally:
        forge.close()
    if json_:
        print_json([asdict(line) for line in lines])
    else:
        for line in lines:
            echo(f"{'ok ' if line.ok else 'FAIL'} {line.what}: {line.detail}")
    if not all(line.ok for line in lines) or len(lines) < 4:
        raise typer.Exit(1)


@forge_app.command("sync")
def sync_cmd(repo: RepoOpt = None, json_: JsonOpt = False) -> None:
    """One pass of what the lead does with the forge: open or update pull requests, send CI
    failures and review comments back, take merged pull requests and labelled issues."""
    from orchestrator.board import open_board
    from orchestrator.forge.sync import ForgeSync

    r = open_repo(repo)
    forge = _forge(r)
    try:
        with open_board(r.layout, r.board, actor="forge") as board:
            out = ForgeSync(r.layout, r.config, board, forge).run()
    finally:
        forge.close()
    if json_:
        print_json(asdict(out))
        return
    for what in ("opened", "sent_back", "merged", "created", "cancelled", "closed"):
        ids = getattr(out, what)
        if ids:
            echo(f"{what.replace('_', ' ')}: {', '.join(ids)}")
    for note in out.notes:
        echo(f"note: {note}")
    if not out.changed and not out.notes:
        echo("nothing to do")
