"""The registry of agent backends, by name.

Backends are imported lazily (``module:Class``) so a teammate that runs the
``command`` backend never imports the SDK. Every class is built as
``Class(config, layout)`` and implements `orchestrator.protocols.Backend`.
"""

from __future__ import annotations

import importlib

from orchestrator.config import Config
from orchestrator.errors import ConfigError
from orchestrator.layout import Layout
from orchestrator.protocols import Backend

BACKENDS: dict[str, str] = {
    "command": "orchestrator.team.command:CommandBackend",
    "anthropic": "orchestrator.agent.backend:AnthropicBackend",
    "scripted": "orchestrator.agent.backend:ScriptedBackend",
    "claude-code": "orchestrator.agent.claude_code:ClaudeCodeBackend",
    "aider": "orchestrator.agent.cli_presets:AiderBackend",
    "codex": "orchestrator.agent.cli_presets:CodexBackend",
    "gemini": "orchestrator.agent.cli_presets:GeminiBackend",
    "cli": "orchestrator.agent.cli_presets:PresetBackend",
}


def check_backend(name: str) -> str:
    """``name`` if it is a backend; else a `ConfigError` listing the ones there are."""
    if name not in BACKENDS:
        raise ConfigError(f"unknown backend {name!r} (choose from: {', '.join(BACKENDS)})")
    return name


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
