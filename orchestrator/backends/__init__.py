"""The agent backends, and their registry by name.

One module (or package) per backend:

    backends/agent.py          ``anthropic``, ``scripted``: the built-in agent loop
                               (`orchestrator.agent`) in the task's worktree
    backends/claude_code/      ``claude-code``: the Claude Code CLI, headless
        stream.py              its stream-json output parsed into events, usage, cost
        process.py             finding and running the CLI, one session's turns
        config.py              permission arguments, MCP config, CLAUDE_CONFIG_DIR, budget
    backends/command.py        ``command``: any shell command
    backends/presets.py        ``aider``, ``codex``, ``gemini``, ``cli``: CLI agents as presets

What they share lives outside: the task's prompt and environment in
`orchestrator.prompting`, running a process (process group, streaming to the task
log, timeout, warm stop) in `orchestrator.process`.

Backends are imported lazily (``module:Class``) so a teammate that runs the
``command`` backend never imports the SDK. Every class is built as
``Class(config, layout)`` and implements `orchestrator.protocols.Backend`: a
``name`` and ``run(ctx: RunContext) -> RunResult``.

Adding a backend is one new module here plus one line in
`orchestrator.backend_names.BACKENDS` (names as data, below every layer)::

    # orchestrator/backends/mine.py
    class MineBackend:
        name = "mine"
        def __init__(self, config: Config, layout: Layout) -> None: ...
        def run(self, ctx: RunContext) -> RunResult: ...

    # orchestrator/backend_names.py
    BACKENDS = {..., "mine": "orchestrator.backends.mine:MineBackend"}

``--backend``, ``team.backend``, the teammate and the spawner's preload all go by
the registry; nothing else needs to know the new name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from orchestrator.backend_names import BACKENDS, check_backend
from orchestrator.errors import ConfigError

if TYPE_CHECKING:  # the registry itself is read by `add --backend` with nothing heavy
    from orchestrator.config import Config
    from orchestrator.layout import Layout
    from orchestrator.protocols import Backend

def backend_module(name: str) -> str:
    """The module a backend lives in ("" for an unknown name)."""
    return BACKENDS.get(name, "").partition(":")[0]


def load_backend(name: str, config: Config, layout: Layout) -> Backend:
    target = BACKENDS[check_backend(name)]
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise ConfigError(f"backend {name!r} is not available in this version") from exc
    backend: Backend = getattr(module, attr)(config, layout)
    return backend
