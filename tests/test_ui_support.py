"""Driving a real `orchestrator ui` from tests (helpers, no tests): the server as a
subprocess on a free loopback port, plain HTTP requests, and the browser."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--no-first-run"]


@dataclass
class Ui:
    proc: subprocess.Popen[str]
    url: str
    """As printed (with ``?token=`` off loopback)."""

    @property
    def base(self) -> str:
        parts = urllib.parse.urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def netloc(self) -> str:
        return urllib.parse.urlsplit(self.url).netloc

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
        host, port = self.netloc.rsplit(":", 1)
        conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=90)
        data = None if body is None else json.dumps(body).encode()
        try:
            conn.request(method, path, body=data, headers=headers or {})
            res = conn.getresponse()
            return res.status, {k.lower(): v for k, v in res.getheaders()}, \
                res.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def token(self) -> str:
        """The session token, read from a page as the browser would."""
        _, _, html = self.request("GET", "/")
        start = html.index('name="orch-token" content="') + len('name="orch-token" content="')
        return html[start:html.index('"', start)]

    def post(self, path: str, body: Any, *, token: str | None = None,
             origin: str | None = "self") -> tuple[int, dict[str, Any]]:
        headers = {"Content-Type": "application/json"}
        if origin is not None:
            headers["Origin"] = self.base if origin == "self" else origin
        if token is not None:
            headers["X-Orch-Token"] = token
        status, _, text = self.request("POST", path, body, headers)
        try:
            return status, json.loads(text)
        except json.JSONDecodeError:
            return status, {"text": text}


@contextlib.contextmanager
def running_ui(repo: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Ui]:
    """``orchestrator ui --port 0 ARGS`` in ``repo`` until the block ends (then Ctrl-C)."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "ui", "--port", "0", *args],
                            cwd=repo, env=env or dict(os.environ), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline and "http://" not in line:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                line = proc.stdout.readline()
                if not line and proc.poll() is not None:
                    break
        assert "http://" in line, f"no URL printed: {line!r} (exit {proc.poll()})"
        yield Ui(proc, line[line.index("http://"):].split()[0])
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout:
            proc.stdout.close()


def wait_http_ready(ui: Ui, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            ui.request("GET", "/favicon.ico")
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
