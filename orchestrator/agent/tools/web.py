"""``web_fetch``: fetch a URL and return it as readable text.

Off unless allowed: the tool sets ``needs_allow_rule``, so the permission gate
denies it in every mode unless a ``WebFetch(domain:…)`` allow rule matches the
URL's host (or an ``ask`` rule makes it ask a person, or the mode is
``bypassPermissions``). Redirects are followed by hand, at most
`MAX_REDIRECTS`, and every hop is checked against the same rules: a redirect
to a host the rules do not allow ends the fetch with an error naming it.

HTML is turned into text with the standard library's ``html.parser``: scripts,
styles and the head are dropped, headings become ``#`` lines, list items ``-``
lines, links ``[text](url)``, ``<pre>`` keeps its spacing. Other text types
(plain, JSON, XML, JavaScript) come back as they are; binary content is
refused. Downloads stop at `MAX_BYTES`, the text is cut at ``max_chars``.
HTTP(S) proxies from the environment are honoured, as ``urllib`` does.

Web *search* is not built in: add a search MCP server (its tools appear as
``mcp__<server>__<tool>``).
"""

from __future__ import annotations

import re
import socket
import urllib.error
import urllib.request
from email.message import Message
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit

from orchestrator import __version__
from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.agent.tools.common import obj, prop

MAX_REDIRECTS = 5
MAX_BYTES = 5_000_000
DEFAULT_MAX_CHARS = 100_000
DEFAULT_TIMEOUT = 30.0
USER_AGENT = f"orchestrator/{__version__} (web_fetch)"
REDIRECTS = {301, 302, 303, 307, 308}
TEXT_TYPES = ("application/json", "application/xml", "application/javascript",
              "application/x-javascript", "application/xhtml+xml", "application/x-yaml",
              "application/yaml", "application/toml", "image/svg+xml")


class FetchError(Exception):
    """The fetch cannot give text; the message is what the model sees."""


class WebFetchTool:
    name = "web_fetch"
    read_only = True
    needs_allow_rule = True
    """The gate denies this tool unless an allow rule matches (or a person is asked)."""
    description = (
        "Fetch a web page or file over HTTP(S) and return its content as text (HTML turned "
        "into readable text, long pages cut). Only hosts the project allows with "
        "WebFetch(domain:…) rules can be fetched."
    )
    input_schema = obj(
        ["url"],
        url=prop("string", "The http:// or https:// URL to fetch."),
        max_chars=prop("integer", f"Cut the text after this many characters (default "
                                  f"{DEFAULT_MAX_CHARS}).", minimum=100),
    )

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, max_bytes: int = MAX_BYTES) -> None:
        self.timeout = timeout
        self.max_bytes = max_bytes
        # Redirects are followed by hand (each hop is checked against the rules).
        self._opener = urllib.request.build_opener(_NoRedirect())

    def permission_subject(self, args: dict[str, Any]) -> str | None:
        url = args.get("url")
        return url if isinstance(url, str) else None

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            url, status, headers, body, cut = self.fetch(args["url"], ctx)
            text = to_text(body, headers, url)
        except FetchError as exc:
            return ToolResult(f"{self.name}: {exc}", is_error=True)
        max_chars = args.get("max_chars", DEFAULT_MAX_CHARS)
        notes = []
        if cut:
            notes.append(f"[download stopped at {self.max_bytes} bytes]")
        if len(text) > max_chars:
            notes.append(f"[text cut at {max_chars} of {len(text)} characters]")
            text = text[:max_chars]
        head = f"URL: {url}\nStatus: {status}\nContent-Type: {headers.get_content_type()}\n\n"
        return ToolResult(head + text + ("\n\n" + "\n".join(notes) if notes else ""))

    def fetch(self, url: str, ctx: ToolContext) -> tuple[str, int, Message, bytes, bool]:
        """(final url, status, headers, body, cut) after following allowed redirects."""
        _check_url(url)
        for _ in range(MAX_REDIRECTS + 1):
            request = urllib.request.Request(url, headers={
                "User-Agent": USER_AGENT, "Accept": "text/html, text/*;q=0.9, */*;q=0.5"})
            try:
                with self._opener.open(request, timeout=self.timeout) as resp:
                    body = resp.read(self.max_bytes + 1)
                    return (url, resp.status, resp.headers, body[:self.max_bytes],
                            len(body) > self.max_bytes)
            except urllib.error.HTTPError as exc:
                with exc:
                    location = exc.headers.get("Location")
                    if exc.code not in REDIRECTS or not location:
                        raise FetchError(f"HTTP {exc.code} {exc.reason} from {url}") from None
                url = self._follow(url, urljoin(url, location), ctx)
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, socket.timeout | TimeoutError):
                    raise FetchError(f"timed out after {self.timeout:g} s: {url}") from None
                raise FetchError(f"cannot fetch {url}: {reason}") from None
        raise FetchError(f"more than {MAX_REDIRECTS} redirects, last to {url}")

    def _follow(self, old: str, new: str, ctx: ToolContext) -> str:
        _check_url(new)
        gate = ctx.gate
        if gate is not None:
            decision = gate.check(self, {"url": new})
            if decision.behavior != "allow":
                host = urlsplit(new).hostname
                raise FetchError(f"{old} redirects to {new}, which is not allowed "
                                 f"({decision.reason}); allow it with WebFetch(domain:{host})")
        return new


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError(f"not an http(s) URL: {url!r}")


def to_text(body: bytes, headers: Message, url: str) -> str:
    kind = headers.get_content_type()
    charset = headers.get_content_charset() or _meta_charset(body) or "utf-8"
    try:
        text = body.decode(charset, errors="replace")
    except LookupError:
        text = body.decode("utf-8", errors="replace")
    if kind in ("text/html", "application/xhtml+xml") or (
            kind == "text/plain" and re.match(rb"\s*<(!doctype html|html)", body[:200], re.I)):
        return html_to_text(text, url)
    if kind.startswith("text/") or kind in TEXT_TYPES or kind.endswith(("+json", "+xml")):
        return text
    raise FetchError(f"{url} is {kind} ({len(body)} bytes), not text; web_fetch returns text")


def _meta_charset(body: bytes) -> str | None:
    m = re.search(rb"<meta[^>]+charset=[\"']?([A-Za-z0-9_-]+)", body[:4096], re.I)
    return m.group(1).decode() if m else None


def html_to_text(html: str, base_url: str = "") -> str:
    parser = _Readable(base_url)
    parser.feed(html)
    parser.close()
    return parser.text()


class _Readable(HTMLParser):
    SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe"})
    BLOCK = frozenset({"p", "div", "section", "article", "header", "footer", "main", "nav",
                       "aside", "ul", "ol", "table", "tr", "blockquote", "dl", "dt", "dd",
                       "form", "figure", "figcaption", "hr", "br", "li", "pre", "details",
                       "summary", "h1", "h2", "h3", "h4", "h5", "h6"})

    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base = base_url
        self.out: list[str] = []
        self.title = ""
        self.skip = 0
        self.pre = 0
        self.in_title = False
        self.links: list[tuple[int, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        if tag in self.SKIP:
            self.skip += 1
        if self.skip:
            return
        if tag in self.BLOCK:
            self._newline(2 if tag in ("p", "h1", "h2", "h3", "h4", "h5", "h6", "pre") else 1)
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.out.append("#" * int(tag[1]) + " ")
        elif tag == "li":
            self.out.append("- ")
        elif tag in ("td", "th"):
            self._space()
        elif tag == "pre":
            self.pre += 1
        elif tag == "a":
            self.links.append((len(self.out), dict(attrs).get("href")))

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        if tag in self.SKIP:
            self.skip = max(0, self.skip - 1)
            return
        if self.skip:
            return
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        if tag == "a" and self.links:
            start, href = self.links.pop()
            label = "".join(self.out[start:]).strip()
            if label and href and not href.startswith(("#", "javascript:", "mailto:")):
                self.out[start:] = [f"[{label}]({urljoin(self.base, href)})"]
        if tag in self.BLOCK:
            self._newline(2 if tag in ("p", "h1", "h2", "h3", "h4", "h5", "h6", "pre") else 1)

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title += data
        if self.skip:
            return
        if self.pre:
            self.out.append(data)
            return
        data = re.sub(r"\s+", " ", data)
        if self._at_line_start() or self._tail().endswith(" "):
            data = data.lstrip()
        if data:
            self.out.append(data)

    def _tail(self) -> str:
        return next((s for s in reversed(self.out) if s), "")

    def _at_line_start(self) -> bool:
        tail = self._tail()
        return not tail or tail.endswith("\n") or tail in ("- ",) or tail.endswith("# ")

    def _space(self) -> None:
        if not self._at_line_start() and not self._tail().endswith(" "):
            self.out.append(" ")

    def _newline(self, count: int) -> None:
        text = "".join(self.out[-3:])
        have = len(text) - len(text.rstrip("\n"))
        if self.out and have < count:
            self.out.append("\n" * (count - have))

    def text(self) -> str:
        body = "".join(self.out)
        body = re.sub(r"[ \t]+\n", "\n", body)
        body = re.sub(r"\n{3,}", "\n\n", body).strip()
        title = " ".join(self.title.split())
        return f"Title: {title}\n\n{body}" if title else body
