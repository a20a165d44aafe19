"""Cut off a FIX connection whose peer stopped reading, before QuickFIX queues without end for it.

QuickFIX C++ keeps what a session sends and the socket does not take in a per-connection list with
no limit. A client that keeps heartbeating but never reads (a hung GUI, a market-data subscriber that
lags for good) makes that list, and the gateway's memory, grow for as long as it stays connected.
QuickFIX's Python API does not show that list, but the kernel shows its effect: bytes the peer has
not acknowledged (``tx_queue`` in /proc/net/tcp) stay high while its receive window is shut. When one
of the acceptor's connections holds at least ``limit_bytes`` unacknowledged for ``seconds`` on end,
the watch shuts the socket down; QuickFIX sees the connection drop and ends the session as for any
disconnect (its orders cancelled unless CancelOnDisconnect=N). A peer that reads, however slowly,
acknowledges bytes and resets the clock.

``StallTracker`` is the rule (pure: observations in, sockets to cut out); ``StallWatch`` is the thread
that reads /proc and shuts sockets down. Linux only: elsewhere the watch logs that it is off.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

ESTABLISHED = "01"


class StallTracker:
    """Which sockets have held at least ``limit_bytes`` unacknowledged for ``seconds`` on end."""

    def __init__(self, limit_bytes: int, seconds: float) -> None:
        self.limit_bytes = limit_bytes
        self.seconds = seconds
        self.since: dict[int, float] = {}

    def update(self, now: float, queued: Mapping[int, int]) -> list[int]:
        """``queued``: unacknowledged bytes per socket (inode) now; return the sockets to cut."""
        for inode in list(self.since):
            if queued.get(inode, 0) < self.limit_bytes:
                del self.since[inode]
        cut = []
        for inode, n in queued.items():
            if n >= self.limit_bytes:
                start = self.since.setdefault(inode, now)
                if now - start >= self.seconds:
                    cut.append(inode)
                    del self.since[inode]
        return cut


def parse_proc_tcp(text: str, port: int) -> dict[int, tuple[int, str]]:
    """Established sockets whose local port is ``port``: inode -> (tx_queue bytes, remote address)."""
    out: dict[int, tuple[int, str]] = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10 or parts[3] != ESTABLISHED:
            continue
        local, remote, queues, inode = parts[1], parts[2], parts[4], int(parts[9])
        if int(local.rsplit(":", 1)[1], 16) != port or inode == 0:
            continue
        host, rport = remote.rsplit(":", 1)
        out[inode] = (int(queues.split(":")[0], 16), f"{host}:{int(rport, 16)}")
    return out


def _socket_fds() -> dict[int, int]:
    """This process's sockets: inode -> file descriptor."""
    out: dict[int, int] = {}
    for entry in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(entry)
            if target.startswith("socket:["):
                out[int(target[8:-1])] = int(entry.name)
    return out


def _still(fd: int, inode: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == f"socket:[{inode}]"
    except OSError:
        return False


class StallWatch:
    """The thread: once a second, the acceptor's connections' unacknowledged bytes, and cut-offs."""

    def __init__(self, port: int, limit_bytes: int, seconds: float, interval_s: float = 1.0) -> None:
        self.port = port
        self.tracker = StallTracker(limit_bytes, seconds)
        self.interval_s = interval_s
        self.cut = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not Path("/proc/net/tcp").exists():
            log.info("stalled-reader watch off: no /proc/net/tcp on this system")
            return
        self._thread = threading.Thread(target=self._run, name="stall-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        clock = 0.0
        while not self._stop.wait(self.interval_s):
            clock += self.interval_s
            try:
                self._check(clock)
            except Exception:  # a watch that fails must not take the gateway with it
                log.exception("stalled-reader watch failed; trying again")

    def _check(self, now: float) -> None:
        conns: dict[int, tuple[int, str]] = {}
        for name in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(OSError):
                conns.update(parse_proc_tcp(Path(name).read_text(), self.port))
        if not conns:
            self.tracker.update(now, {})
            return
        ours = _socket_fds()
        queued = {inode: q for inode, (q, _) in conns.items() if inode in ours}
        for inode in self.tracker.update(now, queued):
            fd = ours.get(inode)
            if fd is None or not _still(fd, inode):
                continue  # closed meanwhile (and the number perhaps reused)
            with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
                self.cut += 1
                log.warning("cut off %s: it left %d bytes unread for %.0f s (it stopped reading)",
                            conns[inode][1], conns[inode][0], self.tracker.seconds)
