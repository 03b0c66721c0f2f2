"""Scratch folders of sandboxed runs (a private object store, a proxy's socket).

Each is named after the process that made it (``orch-<kind>-<pid>-…``) and removed by
that process when the run ends; the first one a process makes of a kind also removes
those that a killed process (``kill -9``, a crash) left behind: this user's folders
whose process is gone.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
from pathlib import Path

from orchestrator.procutil import pid_alive


def scratch(kind: str) -> Path:
    """A new private folder for this process (in ``/dev/shm`` where it can)."""
    _sweep(kind)
    return Path(tempfile.mkdtemp(prefix=f"orch-{kind}-{os.getpid()}-", dir=_root()))


def _root() -> str | None:
    """``/dev/shm`` where it is usable (a memory file system: creating and removing the
    scratch folders costs nothing there, while on a busy disk each rmdir can take ms)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


@functools.lru_cache(maxsize=8)
def _sweep(kind: str) -> None:
    pattern = re.compile(rf"orch-{re.escape(kind)}-(\d+)-")
    root = Path(_root() or tempfile.gettempdir())
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        m = pattern.match(entry.name)
        try:
            if m is None or entry.stat(follow_symlinks=False).st_uid != os.getuid() or \
                    not entry.is_dir(follow_symlinks=False) or pid_alive(int(m.group(1))):
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
