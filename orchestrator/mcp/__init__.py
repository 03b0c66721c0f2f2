"""MCP both ways: servers for teammates (client) and the board served over MCP (server).

    config.py   `.mcp.json` and plugin manifests → `ServerSpec`s (``${VAR}`` expansion, unique keys)
    client.py   `McpClientManager`: one teammate's sessions on a background event loop
    tools.py    MCP tools as agent `Tool`s (``mcp__<server>__<tool>``), resource tools, results
    status.py   ``orchestrator mcp-status``: plugin → server → tool, state, last error
    server.py   ``orchestrator mcp``: the board over stdio for any MCP client

Inside this package the SDK is always imported absolutely (``import mcp``).
"""
