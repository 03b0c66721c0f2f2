"""GitHub's official OpenAPI description (npm ``@octokit/openapi``), pruned to the
operations orchestrator uses, checking requests and answers with ``openapi-core``.

The full description is 13 MB; `pruned` keeps the operations in `OPERATIONS` and the
components they reach (a few hundred kB), cached by the source's hash. The stand-in
(`orchestrator.forge.standin`) hands each exchange to a `Validator`: every request it
is sent and every answer it gives is checked, and what does not match is collected in
``problems`` (the tests fail on any). Only for tests: ``openapi-core`` is in the
``test`` extra.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

OPERATIONS: tuple[tuple[str, str], ...] = (
    ("get", "/user"),
    ("get", "/repos/{owner}/{repo}"),
    ("get", "/repos/{owner}/{repo}/pulls"),
    ("post", "/repos/{owner}/{repo}/pulls"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}"),
    ("patch", "/repos/{owner}/{repo}/pulls/{pull_number}"),
    ("put", "/repos/{owner}/{repo}/pulls/{pull_number}/merge"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews"),
    ("post", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/comments"),
    ("post", "/repos/{owner}/{repo}/pulls/{pull_number}/comments"),
    ("post", "/repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies"),
    ("get", "/repos/{owner}/{repo}/issues"),
    ("post", "/repos/{owner}/{repo}/issues"),
    ("patch", "/repos/{owner}/{repo}/issues/{issue_number}"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("post", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("get", "/repos/{owner}/{repo}/commits/{ref}/check-runs"),
    ("get", "/repos/{owner}/{repo}/commits/{ref}/status"),
    ("post", "/repos/{owner}/{repo}/check-runs"),
    ("patch", "/repos/{owner}/{repo}/check-runs/{check_run_id}"),
    ("get", "/repos/{owner}/{repo}/check-runs/{check_run_id}/annotations"),
    ("post", "/repos/{owner}/{repo}/statuses/{sha}"),
    ("get", "/repos/{owner}/{repo}/collaborators/{username}/permission"),
)
ANY_OPERATION = frozenset({401, 403, 429, 502, 503})
"""Answers any operation may get (a refused token, a rate limit, an outage) that the
description leaves out of most operations; their body is checked as ``basic-error``."""
NOT_IN_THE_DESCRIPTION = ("/graphql",)
"""GitHub's GraphQL endpoint (draft -> ready) is not part of the REST description."""


def description_file() -> Path | None:
    """``api.github.com.json`` of ``@octokit/openapi`` (``scripts/test-deps`` installs it
    into ``.venv/npm``; ``ORCH_GITHUB_OPENAPI`` names another copy), or None."""
    named = os.environ.get("ORCH_GITHUB_OPENAPI")
    if named:
        return Path(named)
    here = Path(__file__).resolve().parents[2] / ".venv" / "npm" / "node_modules" / \
        "@octokit" / "openapi" / "generated" / "api.github.com.json"
    return here if here.is_file() else None


def pruned(source: Path, cache_dir: Path) -> dict[str, Any]:
    """The description with only `OPERATIONS` and what they reference (cached)."""
    raw = source.read_bytes()
    key = hashlib.sha256(raw + repr(OPERATIONS).encode()).hexdigest()[:16]
    cached = cache_dir / f"github-openapi-{key}.json"
    if cached.is_file():
        return dict(json.loads(cached.read_bytes()))
    full = json.loads(raw)
    paths: dict[str, Any] = {}
    for method, path in OPERATIONS:
        item = full["paths"][path]
        paths.setdefault(path, {k: v for k, v in item.items() if k == "parameters"})
        paths[path][method] = item[method]
    spec = {"openapi": full["openapi"], "info": full["info"],
            "servers": [{"url": "/"}], "paths": paths, "components": {}}
    todo = list(_refs(paths))
    seen: set[str] = set()
    while todo:
        ref = todo.pop()
        if ref in seen:
            continue
        seen.add(ref)
        _, _, kind, name = ref.split("/", 3)
        node = full["components"][kind][name]
        spec["components"].setdefault(kind, {})[name] = node
        todo += _refs(node)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(spec))
    tmp.replace(cached)
    return spec


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


class _Request:
    """A request as openapi-core reads one."""

    def __init__(self, method: str, path: str, query: list[tuple[str, str]],
                 headers: Mapping[str, str], body: bytes) -> None:
        from openapi_core.datatypes import RequestParameters
        from werkzeug.datastructures import Headers, ImmutableMultiDict

        self.host_url = ""
        self.path = path
        self.method = method.lower()
        self.body = body or None
        self.content_type = headers.get("content-type", "application/json")
        self.parameters = RequestParameters(query=ImmutableMultiDict(query),
                                            header=Headers(list(headers.items())),
                                            cookie=ImmutableMultiDict())


class _Response:
    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status_code = status
        self.content_type = headers.get("content-type", "application/json")
        self.headers = headers
        self.data = body or None


class Validator:
    """Checks requests and answers against the description; each mismatch is one line in
    ``problems`` (method, path, what is wrong). The stand-in calls it for every exchange,
    whoever the client is (a test, ``orchestrator up`` in another process)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from openapi_core import OpenAPI

        self.openapi = OpenAPI.from_dict(spec)
        self.problems: list[str] = []
        self.checked = 0

    def check(self, method: str, path: str, query: list[tuple[str, str]],
              headers: Mapping[str, str], body: bytes, status: int,
              answer_headers: Mapping[str, str], answer: bytes) -> list[str]:
        """What is wrong with this exchange (nothing: an empty list); also kept."""
        if path in NOT_IN_THE_DESCRIPTION:
            return []
        req, out = _Request(method, path, query, headers, body), []
        where = f"{method} {path}"
        try:
            self.openapi.validate_request(req)
        except Exception as exc:
            out.append(f"request {where}: {_why(exc)}")
        if status in ANY_OPERATION:
            if not _basic_error(answer):
                out.append(f"answer {status} to {where}: not a basic-error body")
        elif status != 304:  # no body: GitHub describes 304 for the GETs that may answer it
            try:
                self.openapi.validate_response(req, _Response(status, answer_headers, answer))
            except Exception as exc:
                out.append(f"answer {status} to {where}: {_why(exc)}")
        self.checked += 1
        self.problems += out
        return out


def _basic_error(answer: bytes) -> bool:
    """GitHub's ``basic-error``: an object with a string ``message``."""
    try:
        body = json.loads(answer)
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("message"), str)


def _why(exc: BaseException) -> str:
    causes = [str(exc)[:300]]
    for e in (getattr(exc, "schema_errors", None) or [])[:5]:
        causes.append(f"{'/'.join(str(p) for p in e.path)}: {e.message}"[:300])
    cause = exc.__cause__
    for e in (getattr(cause, "schema_errors", None) or [])[:5]:
        causes.append(f"{'/'.join(str(p) for p in e.path)}: {e.message}"[:300])
    if cause is not None and not getattr(cause, "schema_errors", None):
        causes.append(str(cause)[:300])
    return "; ".join(causes)
