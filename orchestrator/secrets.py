"""Secrets: which values are secret, masking them, and keeping them from tool processes.

A value is secret when it is the value of an environment variable whose name
says so (``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ``*PASSWD*``,
``*PASSPHRASE*``, ``*CREDENTIAL*``, ``*AUTH*`` but not ``*AUTHOR*``, and every
``ANTHROPIC_*`` but the base URL, model names and log level), or a URL with a
password in any variable (``DATABASE_URL=postgres://u:pw@h/db``: the whole URL,
its ``u:pw@`` and the password itself when it has 6 characters or more). Values
shorter than 8 characters are not masked on their own (too many false hits).

- `redact` masks them in text (events, logs, task logs, mailboxes, tool results, the
  MCP server's answers); `StreamMasker` in output read in pieces (a value split across
  two reads is still masked);
- `safe_env` drops such variables from the environment given to tools;
- `commit_leaks` finds them in what a commit would add (contents, link targets, file
  names) and `text_leaks` in commit messages;
- `protect_process` keeps them out of ``/proc/<pid>/environ`` of the processes that
  hold them (lead, spawner, teammates), which are ancestors of every tool process:
  the process is made non-dumpable (other users' processes cannot read its
  environ or memory, which is all it does for root) and the values are
  overwritten in its initial environment block — the block the kernel shows in
  ``/proc/<pid>/environ`` whatever ``os.environ`` says now — after copying them to
  the heap, so the process and its children still see them.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

SECRET_NAME_RE = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH)",
                            re.I)
PUBLIC_ANTHROPIC_RE = re.compile(r"ANTHROPIC_(BASE_URL|LOG|BETAS?|(\w+_)?MODEL)")
URL_PASSWORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^\s/@:]*):([^\s/@]+)@")
MIN_SECRET_LEN = 8
MIN_PASSWORD_LEN = 6
MASK = "***"
PR_SET_DUMPABLE = 4

_remembered: dict[str, str] = {}
"""Secret values this process was started with (value -> variable name)."""


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    if upper.startswith("ANTHROPIC_"):
        return PUBLIC_ANTHROPIC_RE.fullmatch(upper) is None
    return SECRET_NAME_RE.search(upper.replace("AUTHOR", "")) is not None


def secrets_of(name: str, value: str) -> list[str]:
    """The strings to mask for one variable (none when it is no secret)."""
    found = [value] if is_secret_name(name) and len(value) >= MIN_SECRET_LEN else []
    for m in URL_PASSWORD_RE.finditer(value):
        found += [value] if len(value) >= MIN_SECRET_LEN else []
        userinfo = m.group(0).split("://", 1)[1]  # user:password@
        if len(userinfo) >= MIN_PASSWORD_LEN:
            found.append(userinfo)
        if len(m.group(2)) >= MIN_PASSWORD_LEN:
            found.append(m.group(2))
    return found


def remember(value: str, name: str) -> str:
    """Mask ``value`` from now on in this process, as if an environment variable ``name``
    held it (a token read from a file or another program); returns ``value``."""
    if len(value) >= MIN_SECRET_LEN:
        _remembered.setdefault(value, name)
    return value


def secret_names(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every secret string (see the module docstring) -> the variable it comes from;
    by default this process's environment and what `protect_process` remembered."""
    env = os.environ if environ is None else environ
    out = dict(_remembered) if environ is None else {}
    for name, value in env.items():
        for s in secrets_of(name, value):
            out.setdefault(s, name)
    return out


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The secret strings, longest first (so a URL is masked before its password)."""
    return sorted(secret_names(environ), key=len, reverse=True)


def redact(text: str, secrets: list[str] | None = None) -> str:
    for s in secret_values() if secrets is None else secrets:
        if s in text:
            text = text.replace(s, MASK)
    return text


class StreamMasker:
    """Masks secrets in output read in pieces. What it has seen is masked whole; an end
    that is the start of a secret (at most the longest secret - 1 bytes) is held back
    until more comes (or `flush`), since the next piece may complete it. Output that
    ends in no such start is passed on at once."""

    def __init__(self, secrets: Iterable[str] | None = None) -> None:
        values = secret_values() if secrets is None else sorted(secrets, key=len, reverse=True)
        self.needles = [s.encode() for s in values if s]
        self.keep = max((len(n) for n in self.needles), default=1) - 1
        self.held = b""

    def feed(self, data: bytes) -> bytes:
        """What of ``held + data`` can be passed on now, masked."""
        buf = self._mask(self.held + data)
        cut = len(buf) - self._started(buf)
        self.held = buf[cut:]
        return buf[:cut]

    def _started(self, buf: bytes) -> int:
        """The length of the longest end of ``buf`` that begins a secret."""
        for k in range(min(self.keep, len(buf)), 0, -1):
            end = buf[-k:]
            if any(n.startswith(end) for n in self.needles):
                return k
        return 0

    def flush(self) -> bytes:
        out, self.held = self._mask(self.held), b""
        return out

    def _mask(self, data: bytes) -> bytes:
        for needle in self.needles:
            if needle in data:
                data = data.replace(needle, MASK.encode())
        return data


def safe_env(environ: Mapping[str, str], pass_env: Iterable[str] = ()) -> dict[str, str]:
    """``environ`` without the variables that hold secrets, except those named in
    ``pass_env``."""
    keep = set(pass_env)
    return {k: v for k, v in environ.items()
            if k in keep or not (is_secret_name(k) or URL_PASSWORD_RE.search(v))}


def commit_leaks(worktree: Path, paths: Iterable[str],
                 secrets: Mapping[str, str] | None = None) -> list[str]:
    """``"<path> holds the value of $NAME"`` for each file of ``paths`` (relative to
    ``worktree``) whose content holds a known secret; links are checked by their
    target text, unreadable files are skipped. A path whose *name* holds one is a leak
    too (the name is in the commit)."""
    known = secret_names() if secrets is None else secrets
    needles = sorted(((s.encode(), n) for s, n in known.items()), key=lambda x: -len(x[0]))
    leaks = []
    for rel in paths:
        named = text_leaks("a file name", rel, known)
        if named:
            leaks += named
            continue
        path = worktree / rel
        try:
            data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        except OSError:
            continue
        for needle, name in needles:
            if needle and needle in data:
                leaks.append(f"{rel} holds the value of ${name}")
                break
    return leaks


def text_leaks(what: str, text: str, secrets: Mapping[str, str] | None = None) -> list[str]:
    """``"<what> holds the value of $NAME"`` when ``text`` holds a known secret."""
    known = secret_names() if secrets is None else secrets
    for value in sorted(known, key=len, reverse=True):
        if value and value in text:
            return [f"{what} holds the value of ${known[value]}"]
    return []


def protect_process() -> list[str]:
    """Keep this process's secrets out of ``/proc/<pid>/environ`` (see the module
    docstring). Returns the names of the variables whose values were overwritten."""
    import ctypes

    for value, name in secret_names().items():
        _remembered.setdefault(value, name)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    return _scrub_environ_block()


def _scrub_environ_block() -> list[str]:
    import ctypes

    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (proc(5): 50, 51)
    except (OSError, IndexError, ValueError):
        return []
    if not 0 < start < end:
        return []
    block = ctypes.string_at(start, end - start)
    scrubbed = []
    offset = 0
    for entry in block.split(b"\0"):
        name, eq, value = entry.partition(b"=")
        text_name = name.decode("utf-8", "surrogateescape")
        if eq and value and secrets_of(text_name, value.decode("utf-8", "surrogateescape")):
            current = os.environ.get(text_name)
            if current is not None:
                os.putenv(text_name, current)  # libc copies it: children still get it
            ctypes.memset(start + offset + len(name) + 1, ord("*"), len(value))
            scrubbed.append(text_name)
        offset += len(entry) + 1
    return scrubbed
