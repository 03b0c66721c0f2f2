"""``web_fetch`` against a real HTTP server on 127.0.0.1, gated by WebFetch(domain:…) rules."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.base import PermissionAsked, ToolContext
from orchestrator.agent.permissions import PermissionGate
from orchestrator.agent.tools.web import WebFetchTool, html_to_text
from orchestrator.agent.toolset import Toolset
from tests.loopback import LoopbackAPI, tool_use
from tests.test_backend_agent import ClaimFn, api, claim  # noqa: F401 (fixtures)

PAGE = """<!doctype html><html><head><title>Widget  docs</title>
<style>body { color: red }</style><script>track("visit")</script></head>
<body><nav><a href="/">Home</a></nav>
<h1>Widgets</h1><p>A widget is <b>small</b> and   <a href="/more.html">well documented</a>.</p>
<ul><li>turns</li><li>spins</li></ul>
<pre>widget.turn(3)
    .spin()</pre>
<p>Caf&eacute; &amp; co.</p></body></html>"""


class Site:
    """A small web site on 127.0.0.1 that counts what it served."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.release = threading.Event()
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                site.hits.append(f"{self.headers['Host'].split(':')[0]}{self.path}")
                site.route(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="web-site",
                                       kwargs={"poll_interval": 0.05})

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def route(self, h: BaseHTTPRequestHandler) -> None:
        routes: dict[str, tuple[int, str, bytes]] = {
            "/page.html": (200, "text/html; charset=utf-8", PAGE.encode()),
            "/notes.txt": (200, "text/plain", b"plain notes\n"),
            "/data.json": (200, "application/json", b'{"a": 1}'),
            "/logo.png": (200, "image/png", b"\x89PNG\r\n\x1a\n" + bytes(200)),
            "/big.txt": (200, "text/plain", b"x" * 50_000),
            "/latin1.html": (200, "text/html; charset=iso-8859-1",
                             "<p>gr\u00fc\u00dfe</p>".encode("latin-1")),
        }
        redirects = {"/old": "/page.html", "/away": self.url("/page.html", "localhost"),
                     "/loop": "/loop", "/ftp": "ftp://127.0.0.1/file"}
        if h.path in routes:
            status, kind, body = routes[h.path]
            h.send_response(status)
            h.send_header("Content-Type", kind)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
        elif h.path in redirects:
            h.send_response(302)
            h.send_header("Location", redirects[h.path])
            h.send_header("Content-Length", "0")
            h.end_headers()
        elif h.path == "/slow":
            self.release.wait(30)
        else:
            h.send_error(404, "Not Found")


@pytest.fixture
def site() -> Iterator[Site]:
    s = Site()
    s.thread.start()
    yield s
    s.release.set()
    s.server.shutdown()
    s.server.server_close()
    s.thread.join()


def toolset(tmp_path: Path, *, mode: str = "default", timeout: float = 10.0,
            max_bytes: int = 5_000_000, **rules: list[str]) -> Toolset:
    gate = PermissionGate.from_rules(mode=mode, root=tmp_path, **rules)
    return Toolset([WebFetchTool(timeout=timeout, max_bytes=max_bytes)], gate,
                   ToolContext(cwd=tmp_path, env={}))


LOCAL = {"allow": ["WebFetch(domain:127.0.0.1)"]}


def test_an_allowed_page_comes_back_as_readable_text_through_the_api(
        claim: ClaimFn, api: LoopbackAPI, site: Site) -> None:  # noqa: F811
    c = claim(agent={"model": "claude-sonnet-4-6", **LOCAL})
    api.reply(tool_use("web_fetch", {"url": site.url("/page.html")}, id="w1"))
    api.reply(tool_use("web_fetch", {"url": "http://example.com/"}, id="w2"))
    api.reply("Read the docs.")
    result = c.run("anthropic")
    assert result.ok, result.error
    page = api.requests[1]["messages"][-1]["content"][0]
    assert not page.get("is_error")
    text = page["content"]
    assert "Title: Widget docs" in text and "# Widgets" in text
    assert f"A widget is small and [well documented]({site.url('/more.html')})." in text
    assert "- turns\n- spins" in text and "widget.turn(3)\n    .spin()" in text
    assert "Café & co." in text
    assert "track(" not in text and "color: red" not in text
    refused = api.requests[2]["messages"][-1]["content"][0]
    assert refused["is_error"]
    assert "permission denied for web_fetch: web_fetch is off unless an allow rule" in (
        refused["content"])
    assert site.hits == ["127.0.0.1/page.html"]
    [called, denied] = [e for e in c.events("tool_called") if e["tool"] == "web_fetch"]
    assert called["decision"] == "allow" and called["rule"] == "WebFetch(domain:127.0.0.1)"
    assert denied["decision"] == "deny"


@pytest.mark.parametrize("mode", ["default", "acceptEdits", "plan"])
def test_off_by_default_in_every_mode(tmp_path: Path, site: Site, mode: str) -> None:
    result = toolset(tmp_path, mode=mode).call("web_fetch", {"url": site.url("/notes.txt")})
    assert result.is_error and "off unless an allow rule matches" in result.content
    assert site.hits == []


def test_rules_and_modes_that_open_it(tmp_path: Path, site: Site) -> None:
    url = site.url("/notes.txt")
    assert "plain notes" in toolset(tmp_path, mode="plan", **LOCAL).call(
        "web_fetch", {"url": url}).content
    assert "plain notes" in toolset(tmp_path, mode="bypassPermissions").call(
        "web_fetch", {"url": url}).content
    with pytest.raises(PermissionAsked):
        toolset(tmp_path, ask=["WebFetch"]).call("web_fetch", {"url": url})
    denied = toolset(tmp_path, mode="bypassPermissions", deny=["WebFetch(domain:127.0.0.1)"])
    assert denied.call("web_fetch", {"url": url}).is_error
    other = toolset(tmp_path, allow=["WebFetch(domain:example.org)"])
    assert other.call("web_fetch", {"url": url}).is_error
    assert site.hits == ["127.0.0.1/notes.txt"] * 2


def test_redirects_are_checked_against_the_rules(tmp_path: Path, site: Site) -> None:
    ts = toolset(tmp_path, **LOCAL)
    ok = ts.call("web_fetch", {"url": site.url("/old")})
    assert not ok.is_error and f"URL: {site.url('/page.html')}" in ok.content
    away = ts.call("web_fetch", {"url": site.url("/away")})
    assert away.is_error and "redirects to http://localhost:" in away.content
    assert "WebFetch(domain:localhost)" in away.content
    assert not any(h.startswith("localhost") for h in site.hits)
    loop = ts.call("web_fetch", {"url": site.url("/loop")})
    assert loop.is_error and "more than 5 redirects" in loop.content
    ftp = ts.call("web_fetch", {"url": site.url("/ftp")})
    assert ftp.is_error and "not an http(s) URL" in ftp.content


def test_text_types_binary_and_http_errors(tmp_path: Path, site: Site) -> None:
    ts = toolset(tmp_path, **LOCAL)
    assert '{"a": 1}' in ts.call("web_fetch", {"url": site.url("/data.json")}).content
    assert "grüße" in ts.call("web_fetch", {"url": site.url("/latin1.html")}).content
    png = ts.call("web_fetch", {"url": site.url("/logo.png")})
    assert png.is_error and "image/png" in png.content and "not text" in png.content
    missing = ts.call("web_fetch", {"url": site.url("/nope")})
    assert missing.is_error and "HTTP 404" in missing.content


def test_size_caps(tmp_path: Path, site: Site) -> None:
    capped = toolset(tmp_path, max_bytes=1000, **LOCAL).call(
        "web_fetch", {"url": site.url("/big.txt")})
    assert not capped.is_error and "[download stopped at 1000 bytes]" in capped.content
    assert capped.content.count("x") <= 1000 + 10
    cut = toolset(tmp_path, **LOCAL).call("web_fetch", {"url": site.url("/big.txt"),
                                                        "max_chars": 200})
    assert "[text cut at 200 of 50000 characters]" in cut.content


def test_timeouts_and_unreachable_hosts_are_clear_errors(tmp_path: Path, site: Site) -> None:
    slow = toolset(tmp_path, timeout=0.3, **LOCAL).call("web_fetch", {"url": site.url("/slow")})
    assert slow.is_error and "timed out after 0.3 s" in slow.content
    site.release.set()
    closed = toolset(tmp_path, **LOCAL).call("web_fetch", {"url": "http://127.0.0.1:9/"})
    assert closed.is_error and "cannot fetch http://127.0.0.1:9/" in closed.content


@pytest.mark.parametrize("url", ["file:///etc/passwd", "not a url", "http://"])
def test_bad_urls_are_refused(tmp_path: Path, url: str) -> None:
    result = toolset(tmp_path, mode="bypassPermissions").call("web_fetch", {"url": url})
    assert result.is_error and "not an http(s) URL" in result.content


def test_html_to_text_keeps_structure() -> None:
    text = html_to_text("<h2>A</h2><p>one<br>two</p><table><tr><td>x</td><td>y</td></tr></table>"
                        "<a href='#top'>top</a>")
    assert text == "## A\n\none\ntwo\n\nx y\ntop"
