"""MCP tools as the agent's `Tool`s, and what their results look like to the model.

Every tool of every connected server becomes ``mcp__<server>__<tool>`` (characters
outside ``[A-Za-z0-9_-]`` replaced, at most 64 characters). Two tools that end up
with the same name get ``_2``, ``_3`` … in the order of their original names, so
the result does not depend on the order a server lists them; every rename is
reported (`McpClientManager.status`, the capabilities text).

``list_mcp_resources`` and ``read_mcp_resource`` are added only when some server
declares the resources capability. Text comes back inline; binary content (blob
resources, images, audio) is written to a file named with an extension from its
MIME type, and the model gets the path. The `Toolset` spills large results.
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mcp.types as mt
from mcp.shared.exceptions import MCPError

from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.mcp.config import MAX_TOOL_NAME, sanitize, unique

if TYPE_CHECKING:
    from orchestrator.mcp.client import McpClientManager

LIST_RESOURCES = "list_mcp_resources"
READ_RESOURCE = "read_mcp_resource"
EXTRA_EXTENSIONS = {
    "application/gzip": ".gz", "application/x-gzip": ".gz", "text/markdown": ".md",
    "application/octet-stream": ".bin", "image/webp": ".webp", "audio/wav": ".wav",
    "audio/mpeg": ".mp3", "application/x-ndjson": ".jsonl",
}
DESCRIPTION_LIMIT = 2000


@dataclass
class McpTool:
    """One tool of one MCP server, called through the manager."""

    name: str
    description: str
    input_schema: dict[str, Any]
    manager: McpClientManager = field(repr=False)
    server: str
    tool: str
    read_only: bool = False
    """MCP's ``readOnlyHint`` is the server's claim, not ours to trust: never read-only."""

    def permission_subject(self, args: dict[str, Any]) -> str | None:
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        from orchestrator.mcp.client import ServerUnavailable

        try:
            result = self.manager.call_tool(self.server, self.tool, args)
        except ServerUnavailable as exc:
            return ToolResult(f"MCP server unavailable: {exc}", is_error=True)
        except MCPError as exc:
            return ToolResult(f"{self.name}: {exc.message}", is_error=True)
        text = render_result(result, out_dir(self.manager, ctx), self.server)
        return ToolResult(text, is_error=bool(result.is_error))


@dataclass
class ListResourcesTool:
    manager: McpClientManager = field(repr=False)
    name: str = LIST_RESOURCES
    description: str = (
        "List the resources (files, documents, data) that MCP servers offer. "
        "Read one with read_mcp_resource(server, uri).")
    input_schema: dict[str, Any] = field(default_factory=lambda: {
        "type": "object",
        "properties": {"server": {"type": "string",
                                  "description": "Only this server (default: all)."}},
    })
    read_only: bool = True

    def permission_subject(self, args: dict[str, Any]) -> str | None:
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        from orchestrator.mcp.client import ServerUnavailable

        try:
            listing = self.manager.list_resources(args.get("server") or None)
        except ServerUnavailable as exc:
            return ToolResult(str(exc), is_error=True)
        out: list[dict[str, Any]] = []
        for server, resources in listing.items():
            if isinstance(resources, str):
                out.append({"server": server, "error": resources})
                continue
            out.extend({"server": server, "uri": r.uri, "name": r.name,
                        **({"mimeType": r.mime_type} if r.mime_type else {}),
                        **({"description": r.description} if r.description else {})}
                       for r in resources)
        return ToolResult(json.dumps(out, indent=1, ensure_ascii=False))


@dataclass
class ReadResourceTool:
    manager: McpClientManager = field(repr=False)
    name: str = READ_RESOURCE
    description: str = (
        "Read one MCP resource by server and URI. Text is returned inline; binary "
        "content is saved to a file and its path is returned.")
    input_schema: dict[str, Any] = field(default_factory=lambda: {
        "type": "object",
        "properties": {
            "server": {"type": "string", "description": "The server (as in list_mcp_resources)."},
            "uri": {"type": "string", "description": "The resource URI."},
        },
        "required": ["server", "uri"],
    })
    read_only: bool = True

    def permission_subject(self, args: dict[str, Any]) -> str | None:
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        from orchestrator.mcp.client import ServerUnavailable

        try:
            result = self.manager.read_resource(args["server"], args["uri"])
        except ServerUnavailable as exc:
            return ToolResult(str(exc), is_error=True)
        except MCPError as exc:
            return ToolResult(f"cannot read {args['uri']}: {exc.message}", is_error=True)
        where = out_dir(self.manager, ctx)
        parts = [render_resource(c, where, args["server"]) for c in result.contents]
        return ToolResult("\n\n".join(parts) or "(empty resource)")


def out_dir(manager: McpClientManager, ctx: ToolContext) -> Path:
    """Binary results go beside spilled results (readable by read-only tools), else to the
    manager's own folder. Never into the worktree, where they would be committed."""
    return ctx.spill_dir / "mcp" if ctx.spill_dir else manager.output_dir


def build_tools(manager: McpClientManager) -> list[Any]:
    """Tools for every connected server, deterministically named (see the module docstring)."""
    tools: list[Any] = []
    taken: set[str] = {LIST_RESOURCES, READ_RESOURCE}
    manager.naming_notes = []
    for conn in manager.servers:
        for tool in sorted(conn.tools, key=lambda t: t.name):
            wanted = f"mcp__{conn.spec.key}__{sanitize(tool.name)}"
            name = unique(wanted, taken, MAX_TOOL_NAME)
            if name != wanted:
                manager.naming_notes.append(f"{conn.spec.key}: tool {tool.name!r} is {name} "
                                            f"({wanted} was taken or too long)")
            schema = dict(tool.input_schema or {})
            schema.setdefault("type", "object")
            desc = (tool.description or tool.title or f"{tool.name} ({conn.spec.key})").strip()
            tools.append(McpTool(name=name, description=desc[:DESCRIPTION_LIMIT],
                                 input_schema=schema, manager=manager,
                                 server=conn.spec.key, tool=tool.name))
    if any(c.has_resources for c in manager.servers):
        tools += [ListResourcesTool(manager), ReadResourceTool(manager)]
    return tools


def capabilities_text(manager: McpClientManager) -> str:
    """One paragraph per server for the system prompt; failed servers are named too."""
    if not manager.servers:
        return ""
    lines: list[str] = []
    for conn in manager.servers:
        key = conn.spec.key
        where = f" (plugin {conn.spec.plugin})" if conn.spec.plugin else ""
        if conn.state != "connected":
            lines.append(f"- {key}{where}: unavailable ({conn.error or conn.state})")
            continue
        tools = f"{len(conn.tools)} tool(s) named mcp__{key}__*"
        res = ("; resources: use list_mcp_resources / read_mcp_resource"
               if conn.has_resources else "")
        lines.append(f"- {key}{where}: {tools}{res}")
        instructions = conn.init.instructions if conn.init else None
        if instructions:
            lines.append("  " + " ".join(instructions.split())[:600])
    lines += [f"- note: {n}" for n in manager.naming_notes]
    return "\n".join(lines)


# --- results --------------------------------------------------------------------


def render_result(result: mt.CallToolResult, where: Path, server: str) -> str:
    parts = [render_block(b, where, server) for b in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts) if parts else "(no content)"


def render_block(block: Any, where: Path, server: str) -> str:
    if isinstance(block, mt.TextContent):
        return block.text
    if isinstance(block, mt.ImageContent | mt.AudioContent):
        kind = "image" if isinstance(block, mt.ImageContent) else "audio"
        return save_binary(block.data, block.mime_type, where, f"{server}-{kind}", kind)
    if isinstance(block, mt.EmbeddedResource):
        return render_resource(block.resource, where, server)
    if isinstance(block, mt.ResourceLink):
        mime = f", {block.mime_type}" if block.mime_type else ""
        return (f"[resource link: {block.uri} ({block.name}{mime}); "
                f"read it with read_mcp_resource(server={server!r}, uri={block.uri!r})]")
    return json.dumps(block.model_dump(mode="json", exclude_none=True), ensure_ascii=False)


def render_resource(contents: Any, where: Path, server: str) -> str:
    if isinstance(contents, mt.TextResourceContents):
        return f"[{contents.uri}]\n{contents.text}"
    if isinstance(contents, mt.BlobResourceContents):
        stem = str(contents.uri).rstrip("/").rsplit("/", 1)[-1].split("?")[0]
        stem = stem.rsplit(".", 1)[0] if "." in stem else stem
        path_note = save_binary(contents.blob, contents.mime_type, where,
                                f"{server}-{sanitize(stem)[:40]}", "resource")
        return f"[{contents.uri}] {path_note}"
    return str(contents)


def extension_for(mime: str | None) -> str:
    """``.png`` for ``image/png``, ``.gz`` for ``application/gzip`` …, ``.bin`` when unknown."""
    if not mime:
        return ".bin"
    base = mime.split(";")[0].strip().lower()
    return EXTRA_EXTENSIONS.get(base) or mimetypes.guess_extension(base) or ".bin"


def save_binary(data_b64: str, mime: str | None, where: Path, stem: str, kind: str) -> str:
    try:
        data = base64.b64decode(data_b64, validate=False)
    except (binascii.Error, ValueError):
        return f"[{kind} content with invalid base64 ({mime or 'unknown type'})]"
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{stem}-{uuid.uuid4().hex[:6]}{extension_for(mime)}"
    path.write_bytes(data)
    return f"[{kind} saved to {path} ({mime or 'unknown type'}, {len(data)} bytes)]"
