"""Settings that apply while the team runs.

`LiveConfig` holds the configuration a running process uses and reloads it
when one of its files changed (orchestrator.toml, pyproject.toml, the user's
config file — compared by size, mtime and inode, so a check is three
``stat`` calls). A file that no longer loads is reported (`Change.error`) and
the last good configuration stays in force; a good one replaces it and the
`Change` lists every setting that differs, each marked ``live`` or not (the
registry's metadata: a non-live setting waits for a restart).

`ConfigWatcher` wakes the lead at once when one of those files is written
(watchdog on their folders, not recursive); the lead's periodic wake-up checks
too, so a lost file-system event only delays a change. Teammates check before
each claim: the settings a task runs with are those of the moment it starts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_core import to_jsonable_python
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from orchestrator.config import Config, user_config_file
from orchestrator.errors import ConfigError
from orchestrator.events import SettingChange
from orchestrator.settings.registry import PROJECT_FILE, Registry

Stamp = tuple[tuple[int, int, int] | None, ...]


@dataclass
class Change:
    changed: list[SettingChange] = field(default_factory=list)
    error: str | None = None
    """Why the files could not be loaded (the previous settings stay in force)."""

    def has(self, key: str) -> bool:
        return any(c.key == key for c in self.changed)


def config_files(root: Path, environ: Mapping[str, str] | None = None) -> list[Path]:
    return [root / PROJECT_FILE, root / "pyproject.toml", user_config_file(environ)]


class LiveConfig:
    def __init__(self, root: Path, config: Config,
                 overrides: dict[str, dict[str, Any]] | None = None) -> None:
        self.root = root
        self.config = config
        self.overrides = overrides or {}
        self.error: str | None = None
        self.files = config_files(root)
        self._stamp = self._stat()

    def _stat(self) -> Stamp:
        out: list[tuple[int, int, int] | None] = []
        for f in self.files:
            try:
                st = f.stat()
            except OSError:
                out.append(None)
                continue
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(out)

    def check(self) -> Change | None:
        """Reload when a file changed; None when nothing did."""
        stamp = self._stat()
        if stamp == self._stamp:
            return None
        self._stamp = stamp
        try:
            new = Config.load(self.root, overrides=self.overrides)
        except ConfigError as exc:
            self.error = str(exc)
            return Change(error=str(exc))
        change = Change(changed=diff(self.config, new))
        self.config = new
        self.error = None
        return change


def diff(old: Config, new: Config) -> list[SettingChange]:
    """Every setting whose value differs (and ``agents`` when profiles changed)."""
    reg = Registry()
    out = [SettingChange(key=s.key, old=to_jsonable_python(a),
                           new=to_jsonable_python(b), live=s.live) for s in reg
           if (a := reg.value(old, s.key)) != (b := reg.value(new, s.key))]
    if old.agents != new.agents:
        out.append(SettingChange(key="agents", old=sorted(old.agents), new=sorted(new.agents),
                                 live=True))
    return out


class ConfigWatcher:
    """Calls ``on_change`` (from watchdog's thread) when a configuration file is written."""

    def __init__(self, files: list[Path], on_change: Callable[[], None]) -> None:
        self.files = {f.name: f for f in files}
        self.paths = {str(f) for f in files}
        self.on_change = on_change
        self._observer: Any = None
        self._lock = threading.Lock()

    def start(self) -> ConfigWatcher:
        handler = _Handler(self)
        observer = Observer()
        folders = {f.parent for f in self.files.values() if f.parent.is_dir()}
        for folder in sorted(folders):
            observer.schedule(handler, str(folder), recursive=False)
        observer.daemon = True
        observer.start()
        self._observer = observer
        return self

    def stop(self) -> None:
        with self._lock:
            observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            observer.join()

    def __enter__(self) -> ConfigWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: ConfigWatcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        for p in (event.src_path, getattr(event, "dest_path", "")):
            if p and str(Path(str(p))) in self.watcher.paths:
                self.watcher.on_change()
                return


