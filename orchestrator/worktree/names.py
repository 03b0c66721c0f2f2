"""Validation of every name that becomes a path or a ref.

A name component is ``[A-Za-z0-9._-]``, at most `MAX_COMPONENT` characters, not
``.`` or ``..``, and does not start with ``-`` or ``.`` (git would read an option
or refuse the ref). Anything else is an `InvalidInput` saying what was wrong.
"""

from __future__ import annotations

import re

from orchestrator.errors import InvalidInput

COMPONENT_RE = re.compile(r"^[A-Za-z0-9._-]+$")
MAX_COMPONENT = 100
MAX_BRANCH = 200


def check_component(value: str, what: str) -> str:
    if not value:
        raise InvalidInput(f"{what} is empty")
    if len(value) > MAX_COMPONENT:
        raise InvalidInput(f"{what} is longer than {MAX_COMPONENT} characters: {value[:40]!r}…")
    if value in (".", ".."):
        raise InvalidInput(f"{what} may not be {value!r}")
    if "/" in value or "\\" in value:
        raise InvalidInput(f"{what} may not contain a path separator: {value!r}")
    if not COMPONENT_RE.match(value):
        bad = "".join(sorted({c for c in value if not COMPONENT_RE.match(c)}))
        raise InvalidInput(f"{what} has characters outside [A-Za-z0-9._-] ({bad!r}): {value!r}")
    if value[0] in "-." or value.endswith((".", ".lock")) or ".." in value:
        raise InvalidInput(f"{what} is not a valid git name: {value!r}")
    return value


def check_branch(value: str, what: str = "branch name") -> str:
    """A branch: components separated by ``/``, each a valid component, bounded in length."""
    if value.startswith("/"):
        raise InvalidInput(f"{what} may not be an absolute path: {value!r}")
    if len(value) > MAX_BRANCH:
        raise InvalidInput(f"{what} is longer than {MAX_BRANCH} characters: {value[:40]!r}…")
    for part in value.split("/"):
        check_component(part, what)
    return value


def check_prefix(prefix: str) -> str:
    """A branch prefix such as ``task/`` or ``agents-`` (may be empty)."""
    if prefix:
        check_branch(prefix.rstrip("/") or "/", "branch prefix")
        if "//" in prefix:
            raise InvalidInput(f"branch prefix has an empty component: {prefix!r}")
    return prefix


def branch_name(prefix: str, task_id: str, slug: str) -> str:
    check_component(task_id, "task id")
    return check_branch(f"{check_prefix(prefix)}{task_id}-{slug}")
