"""Settings: the registry over the config models, and live reload in a running daemon.

    registry.py   Setting, Registry: list/get/set with validation (`orchestrator config`)
    tomlfile.py   set one key of a TOML file without touching the rest
    live.py       LiveConfig: reload orchestrator.toml when it changes, keep the last good
"""

from typing import Literal

Scope = Literal["project", "user"]
"""Where a setting is written: the project's orchestrator.toml or the user's file."""
