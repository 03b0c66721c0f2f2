"""`.mcp.json`, plugin manifests, ``${VAR}`` expansion and unique server names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.mcp.config import default_user_plugin_dir, expand, load_setup, unique


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_expand_forms() -> None:
    env = {"A": "1", "EMPTY": ""}
    assert expand("x-${A}-y", env) == "x-1-y"
    assert expand("${MISSING:-dflt}", env) == "dflt"
    assert expand("${EMPTY:-dflt}", env) == "dflt"  # as in the shell, :- covers empty too
    assert expand("${EMPTY}", env) == ""
    assert expand("${A:-}${MISSING:-}", env) == "1"
    assert expand("$A and ${ not a var }", env) == "$A and ${ not a var }"
    with pytest.raises(ValueError, match="MISSING is not set"):
        expand("${MISSING}", env)


def test_mcp_json_stdio_and_http_with_expansion(tmp_path: Path) -> None:
    write(tmp_path / ".mcp.json", {"mcpServers": {
        "files": {"command": "${TOOLS:-npx}", "args": ["-y", "srv", "${ROOT_ARG}"],
                  "env": {"KEY": "${API_KEY}", "N": 3}},
        "api": {"type": "http", "url": "https://${HOST}/mcp",
                "headers": {"Authorization": "Bearer ${API_KEY}"}},
        "legacy": {"url": "http://127.0.0.1:1/sse", "type": "sse"},
        "guess": {"url": "http://127.0.0.1:1/mcp"},
        "unset": {"command": "x", "env": {"T": "${NOT_SET_ANYWHERE}"}},
        "nocmd": {"args": []},
        "weird": {"type": "carrier-pigeon", "url": "x"},
        "notobj": ["x"],
    }})
    env = {"ROOT_ARG": "/r", "API_KEY": "k-123", "HOST": "example.test"}
    setup = load_setup(tmp_path, tmp_path / "none", env)
    s = {x.name: x for x in setup.servers}
    assert (s["files"].command, s["files"].args, s["files"].env) == \
        ("npx", ["-y", "srv", "/r"], {"KEY": "k-123", "N": "3"})
    assert s["files"].transport == "stdio" and s["files"].plugin is None
    assert (s["api"].transport, s["api"].url, s["api"].headers) == \
        ("http", "https://example.test/mcp", {"Authorization": "Bearer k-123"})
    assert s["legacy"].transport == "sse" and s["guess"].transport == "http"
    assert "NOT_SET_ANYWHERE is not set" in (s["unset"].error or "")
    assert "needs \"command\"" in (s["nocmd"].error or "")
    assert "unknown type 'carrier-pigeon'" in (s["weird"].error or "")
    assert s["notobj"].error
    assert all(s[n].error is None for n in ("files", "api", "legacy", "guess"))
    assert setup.problems == []


def test_bad_files_are_problems_not_crashes(tmp_path: Path) -> None:
    write(tmp_path / ".mcp.json", "{not json")
    plugins = tmp_path / "plugins"
    write(plugins / "broken" / ".claude-plugin" / "plugin.json", "[1, 2]")
    write(plugins / "missing" / ".claude-plugin" / "plugin.json",
          {"name": "missing", "mcpServers": "./nope.json"})
    write(plugins / "ok" / ".claude-plugin" / "plugin.json",
          {"name": "ok", "mcpServers": {"s": {"command": "true"}}})
    setup = load_setup(tmp_path, plugins, {})
    text = "\n".join(setup.problems)
    assert "invalid JSON" in text and "expected a JSON object" in text
    assert "mcpServers file not found: ./nope.json" in text
    assert [(x.plugin, x.name) for x in setup.servers] == [("ok", "s")]


def test_plugins_project_and_user_with_hierarchy_and_collisions(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write(root / ".mcp.json",
          {"mcpServers": {"time": {"command": "t"}, "git.hub": {"command": "g"}}})
    # the project's plugin points at the project's own .mcp.json (loaded once) and one more file
    write(root / ".claude-plugin" / "plugin.json",
          {"name": "proj-plugin", "mcpServers": ["./.mcp.json", "./more.json"]})
    write(root / "more.json", {"git_hub": {"command": "${CLAUDE_PLUGIN_ROOT}/bin/srv"}})
    user = tmp_path / "user-plugins"
    # no mcpServers key: the plugin's own .mcp.json is used
    write(user / "b-plugin" / ".claude-plugin" / "plugin.json", {"name": "beta"})
    write(user / "b-plugin" / ".mcp.json", {"mcpServers": {"time": {"command": "t2"}}})
    write(user / "a-plugin" / ".claude-plugin" / "plugin.json",
          {"name": "alpha", "mcpServers": {"time": {"command": "t3"}}})
    write(user / "not-a-plugin" / "readme.txt", "x")

    setup = load_setup(root, user, {})
    rows = [(x.plugin, x.name, x.key) for x in setup.servers]
    assert rows == [
        (None, "time", "time"),
        (None, "git.hub", "git_hub"),
        ("proj-plugin", "git_hub", "git_hub_2"),
        ("alpha", "time", "time_2"),
        ("beta", "time", "time_3"),
    ]
    assert setup.servers[2].command == f"{root}/bin/srv"
    assert "already taken" in (setup.servers[2].renamed or "")
    assert setup.servers[0].renamed is None
    # the same input always gives the same names
    assert [x.key for x in load_setup(root, user, {}).servers] == [r[2] for r in rows]


def test_user_plugin_dir_default(tmp_path: Path) -> None:
    assert default_user_plugin_dir({"HOME": "/h"}) == Path("/h/.config/orchestrator/plugins")
    assert default_user_plugin_dir({"XDG_CONFIG_HOME": "/x"}) == Path("/x/orchestrator/plugins")


def test_unique_is_bounded_and_deterministic() -> None:
    taken: set[str] = set()
    assert unique("a", taken) == "a" and unique("a", taken) == "a_2" and unique("a", taken) == "a_3"
    long1, long2 = "m" * 70 + "1", "m" * 70 + "2"
    n1, n2 = unique(long1, taken, 64), unique(long2, taken, 64)
    assert len(n1) == len(n2) == 64 and n1 != n2
    assert unique(long1, set(), 64) == n1
