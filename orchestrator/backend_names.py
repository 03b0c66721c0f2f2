"""The agent backends by name: data, below every layer, so that ``add --backend``,
``config set team.backend`` and the CLI's help check or list a name without importing
a backend, or pydantic (`orchestrator.backends.load_backend` imports the one a run
uses)."""

from __future__ import annotations

from orchestrator.errors import ConfigError

BACKENDS: dict[str, str] = {
    "command": "orchestrator.backends.command:CommandBackend",
    "anthropic": "orchestrator.backends.agent:AnthropicBackend",
    "scripted": "orchestrator.backends.agent:ScriptedBackend",
    "claude-code": "orchestrator.backends.claude_code:ClaudeCodeBackend",
    "aider": "orchestrator.backends.presets:AiderBackend",
    "codex": "orchestrator.backends.presets:CodexBackend",
    "gemini": "orchestrator.backends.presets:GeminiBackend",
    "cli": "orchestrator.backends.presets:PresetBackend",
}
"""Each backend's ``module:Class``."""


def check_backend(name: str) -> str:
    """``name`` if it is a backend; else a `ConfigError` listing the ones there are."""
    if name not in BACKENDS:
        raise ConfigError(f"unknown backend {name!r} (choose from: {', '.join(BACKENDS)})")
    return name
