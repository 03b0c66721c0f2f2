"""A network of the sandbox's own (``sandbox.own_network``), through slirp4netns.

With the network allowed, bubblewrap would otherwise share the host's network
namespace: the host's loopback services (TCP, and abstract Unix sockets, which
belong to a network namespace) are then reachable from the sandbox. With
``sandbox.own_network = true`` the sandbox keeps a namespace of its own and
slirp4netns gives it a NAT to the outside (``--disable-host-loopback``: the host's
``127.0.0.1`` is not reachable through it; DNS through slirp's 10.0.2.3). The CLI
backends reach their model through the credential proxy's Unix socket
(`orchestrator.sandbox.credproxy`), as without the network.

The dance: bubblewrap is started with ``--info-fd`` (it writes the sandbox's pid)
and ``--block-fd`` (it waits before running the command); slirp4netns is attached
to that pid once bubblewrap has brought up the loopback (two netlink clients
configuring one namespace at once can fail), joining the user namespace that owns
the network one (``NS_GET_USERNS``: bubblewrap nests a second user namespace for the
unprivileged uid, from which the network namespace cannot be entered); once it says
it is ready, the command is let go. slirp4netns is stopped with the session
(``--exit-fd``). If it cannot be attached, the command runs without a network.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

RESOLV = "nameserver 10.0.2.3\n"
"""slirp4netns's own DNS, which forwards to the host's resolvers."""
READY_TIMEOUT = 10.0
ATTEMPTS = 3
NS_GET_USERNS = 0xB701
"""ioctl(2) on a namespace: a descriptor of the user namespace that owns it."""


@dataclass
class OwnNetwork:
    slirp: str
    info_r: int
    info_w: int
    block_r: int
    block_w: int
    exit_r: int
    exit_w: int
    resolv: Path
    proc: subprocess.Popen[bytes] | None = field(default=None)

    @classmethod
    def open(cls, slirp: str) -> OwnNetwork:
        fd, name = tempfile.mkstemp(prefix="orch-resolv-")
        with os.fdopen(fd, "w") as f:
            f.write(RESOLV)
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        exit_r, exit_w = os.pipe()
        return cls(slirp, info_r, info_w, block_r, block_w, exit_r, exit_w, Path(name))

    def bwrap_args(self) -> list[str]:
        return ["--info-fd", str(self.info_w), "--block-fd", str(self.block_r),
                "--ro-bind", str(self.resolv), os.path.realpath("/etc/resolv.conf")]

    @property
    def pass_fds(self) -> tuple[int, int]:
        return self.info_w, self.block_r

    def attach(self) -> None:
        """Right after bubblewrap started: give its namespace the network, then let the
        command run. If bubblewrap failed before saying its pid, nothing is attached."""
        for fd in (self.info_w, self.block_r):
            os.close(fd)
        self.info_w = self.block_r = -1
        pid = self._child_pid()
        try:
            if pid is not None and _loopback_set(pid):
                for _ in range(ATTEMPTS):  # joining can fail while bubblewrap sets it up
                    if self._start(pid):
                        break
                    time.sleep(0.01)
        finally:
            with contextlib.suppress(OSError):
                os.write(self.block_w, b"1")  # the command runs (without a network if none)
            os.close(self.block_w)
            self.block_w = -1

    def _start(self, pid: int) -> bool:
        """Start slirp4netns for ``pid``; True once it says the network is ready."""
        try:  # the user namespace that owns the network one (bubblewrap nests another)
            with open(f"/proc/{pid}/ns/net", "rb") as net:
                owner = fcntl.ioctl(net.fileno(), NS_GET_USERNS)
        except OSError:
            return False
        ready_r, ready_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [self.slirp, "--configure", "--mtu=65520", "--disable-host-loopback",
                 "--userns-path", f"/proc/self/fd/{owner}", "--ready-fd", str(ready_w),
                 "--exit-fd", str(self.exit_r), str(pid), "tap0"],
                pass_fds=(ready_w, self.exit_r, owner), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.close(ready_w)
            ready_w = -1
            if select.select([ready_r], [], [], READY_TIMEOUT)[0] and os.read(ready_r, 1):
                return True
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            return False
        finally:
            os.close(ready_r)
            os.close(owner)
            if ready_w >= 0:
                os.close(ready_w)

    def _child_pid(self) -> int | None:
        data = b""
        deadline = time.monotonic() + READY_TIMEOUT
        while not data.rstrip().endswith(b"}") and time.monotonic() < deadline:
            if not select.select([self.info_r], [], [], deadline - time.monotonic())[0]:
                break
            chunk = os.read(self.info_r, 4096)
            if not chunk:
                break
            data += chunk
        try:
            return int(json.loads(data)["child-pid"])
        except (ValueError, KeyError, TypeError):
            return None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.exit_w)  # slirp4netns's --exit-fd: stop
        self.exit_w = -1
        if self.proc is not None:
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for fd in (self.info_r, self.info_w, self.block_r, self.block_w, self.exit_r):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.info_r = self.exit_r = -1
        self.resolv.unlink(missing_ok=True)


def _loopback_set(pid: int) -> bool:
    """Wait until bubblewrap has brought up the sandbox's loopback (it does so after it
    said its pid; two netlink clients configuring the namespace at once can fail)."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        try:
            routes = Path(f"/proc/{pid}/net/route").read_text()
            trie = Path(f"/proc/{pid}/net/fib_trie").read_text()
        except OSError:
            return False  # gone: nothing to attach
        if "127.0.0.1" in trie and routes is not None and _lo_up(pid):
            return True
        time.sleep(0.002)
    return False


def _lo_up(pid: int) -> bool:
    """Whether the namespace's ``lo`` is up (``/proc/<pid>/net/dev_mcast`` is silent on
    it; ``igmp`` lists only links that are up)."""
    try:
        return any(line.split()[1:2] == ["lo"] for line in
                   Path(f"/proc/{pid}/net/igmp").read_text().splitlines()[1:])
    except OSError:
        return False
