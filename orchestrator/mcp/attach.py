"""The agent backend's MCP extension: a teammate run's servers, tools and prompt text.

`orchestrator.backends.agent` calls ``attach(config, ctx, toolset)`` for every run.
Servers come from the main repository's ``.mcp.json`` and plugins (not the task's
worktree, so an agent cannot grant itself servers by editing its branch), start
in the task's worktree with the run's environment (secrets removed; a server's
own ``env`` entries, expanded from the real environment, are added), and stop
when the run ends. A server that fails is logged to the task and reported as an
``mcp_server_failed`` event; the run goes on without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from orchestrator.agent.toolset import Toolset
from orchestrator.config import Config
from orchestrator.events import McpServerFailed
from orchestrator.mcp.client import McpClientManager
from orchestrator.protocols import RunContext
from orchestrator.transcript import Mcp


@contextlib.contextmanager
def attach(config: Config, ctx: RunContext, toolset: Toolset) -> Iterator[str]:
    """Add the MCP tools to ``toolset``; yields the prompt's "MCP capabilities" text."""
    manager = McpClientManager.from_project(
        ctx.layout.root, cwd=ctx.workspace.path, env=toolset.ctx.env, config=config.mcp)
    try:
        for tool in manager.tools():
            toolset.add(tool)
        for row in manager.status():
            if row["state"] != "connected":
                ctx.log.write(Mcp(server=row["server"], state=row["state"],
                                  error=row["error"]))
                ctx.board.events.emit(McpServerFailed(server=row["server"], error=row["error"]),
                                      ctx.task.id, actor=ctx.teammate)
        for note in manager.naming_notes:
            ctx.log.write(Mcp(note=note))
        yield manager.capabilities_text()
    finally:
        manager.close()
