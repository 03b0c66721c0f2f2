"""``orchestrator mcp-status``: connect to every configured server once and report
the plugin → server → tool hierarchy with each server's state, tools, resources and
last error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.config import McpConfig
from orchestrator.mcp.client import McpClientManager, describe
from orchestrator.mcp.config import load_setup

PROJECT = "(project .mcp.json)"
STATUS_START_TIMEOUT = 10.0


def collect(root: Path, config: McpConfig | None = None, *,
            timeout: float | None = None) -> dict[str, Any]:
    """The report as data (what ``--json`` prints). Each server gets ``timeout`` seconds to
    start (default: 10, or less when ``[mcp] start_timeout`` is set lower)."""
    cfg = config or McpConfig()
    user_dir = Path(cfg.user_plugin_dir).expanduser() if cfg.user_plugin_dir else None
    setup = load_setup(root, user_dir)
    if timeout is None:
        timeout = min(STATUS_START_TIMEOUT, cfg.start_timeout)
    with McpClientManager(setup, cwd=root, start_timeout=timeout,
                          call_timeout=timeout) as manager:
        tools = manager.tools()
        names = {(t.server, t.tool): t.name for t in tools if hasattr(t, "server")}
        listing: dict[str, Any] = {}
        if any(c.has_resources for c in manager.servers):
            try:
                listing = manager.list_resources()
            except Exception as exc:  # a report must come out whatever one server does
                listing = {c.spec.key: describe(exc) for c in manager.servers}
        plugins: dict[str, list[dict[str, Any]]] = {}
        for conn in manager.servers:
            row = conn.status()
            row["tools"] = [{"name": t.name, "as": names.get((conn.spec.key, t.name)),
                             "description": (t.description or "").strip().split("\n")[0]}
                            for t in conn.tools]
            res = listing.get(conn.spec.key)
            row["resources"] = [{"uri": r.uri, "name": r.name, "mimeType": r.mime_type}
                                for r in res] if isinstance(res, list) else []
            if isinstance(res, str):
                row["resources_error"] = res
            plugins.setdefault(conn.spec.plugin or PROJECT, []).append(row)
        return {
            "plugins": [{"plugin": p, "servers": s} for p, s in plugins.items()],
            "problems": setup.problems,
            "naming": manager.naming_notes,
        }


def render(report: dict[str, Any]) -> str:
    """The report as text for people."""
    lines: list[str] = []
    if not report["plugins"] and not report["problems"]:
        return ("no MCP servers configured (add .mcp.json or a plugin; "
                "see orchestrator mcp-status --help)")
    for group in report["plugins"]:
        lines.append(group["plugin"] if group["plugin"] == PROJECT
                     else f"plugin {group['plugin']}")
        for s in group["servers"]:
            info = f"  {s['server_info']}" if s["server_info"] else ""
            lines.append(f"  {s['server']}  [{s['state']}]  {s['transport']}: {s['target']}{info}")
            if s["renamed"]:
                lines.append(f"    note: {s['renamed']}")
            if s["error"]:
                lines.append(f"    error: {s['error']}")
            for t in s["tools"]:
                lines.append(f"    tool {t['as'] or t['name']}  {t['description'][:70]}".rstrip())
            if s["has_resources"]:
                lines.append(f"    resources: {len(s['resources'])}")
                lines += [f"      {r['uri']}" for r in s["resources"][:20]]
                if len(s["resources"]) > 20:
                    lines.append(f"      … {len(s['resources']) - 20} more")
            if s.get("resources_error"):
                lines.append(f"    resources error: {s['resources_error']}")
    lines += [f"note: {n}" for n in report["naming"]]
    lines += [f"problem: {p}" for p in report["problems"]]
    return "\n".join(lines)
