"""Fault 6's slow consumers: peers that connect, ask for traffic, and then never read it.

- ``StalledPage``: a lab page that logs on and never reads its WebSocket again (a receive buffer of
  4 KiB, at most one message queued), while it sends pings whose pongs pile up at the web.
- ``DeafFix``: a FIX session that logs on, sends orders, and never reads the ExecutionReports; it
  keeps its TCP connection open (a raw socket, so nothing reads on its behalf).
- ``DeafFix`` with ``subscribe``: a market-data subscriber (V: full depth, updates) that never reads.

What the exchange does about them is the point: the web drops the page that fell a queue behind
(close code 1013), the gateway cuts a FIX peer that left FIXLAB_FIX_STALL_BYTES unread for
FIXLAB_FIX_STALL_S (services/gateway/stalled.py), and everyone else keeps trading.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import time
from datetime import UTC, datetime
from pathlib import Path

from websockets.sync.client import ClientConnection, connect

from shared.compids import BEGIN_STRING, EXCHANGE_COMP_ID
from shared.fix.codec import encode

SOH = b"\x01"


def fix_now() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H:%M:%S.%f")[:-3]


def frame(fields: list[tuple[int, object]]) -> bytes:
    """A whole FIX message with a correct BodyLength and CheckSum."""
    return encode(b"".join(f"{t}={v}".encode() + SOH for t, v in fields), BEGIN_STRING.encode())


class StalledPage:
    """A lab page that never reads: a 4 KiB receive buffer, one message queued at most, no compression
    (compressed pongs of near-identical pings would make its backlog a fraction of what it is owed)."""

    def __init__(self, url: str, pings: int = 200_000, seconds: float = 60.0, send_stall_s: int = 10) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        # A send that cannot go on for this long fails (SO_SNDTIMEO; receives are not affected): the web
        # stopped reading this page. After it drops a page, uvicorn sends the close frame and closes its
        # side only once its write buffer has drained, which a page that never reads never lets happen,
        # so the connection stays open and unread: a blocking send would wait for ever (it once held the
        # test until pytest's timeout, when the kernel buffers of a busy machine were smaller than
        # what the web had queued to write).
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", send_stall_s, 0))
        host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
        with contextlib.ExitStack() as failed:  # the socket is closed if the page cannot log on
            failed.callback(self.sock.close)
            self.sock.connect((host, int(port)))
            self.ports = (self.sock.getsockname()[1], int(port))  # kept: a failed send closes the socket
            self.ws: ClientConnection = connect(url, sock=self.sock, max_queue=1, open_timeout=10,
                                                ping_interval=None, compression=None, legacy=True)
            self.ws.send(json.dumps({"op": "logon"}))
            failed.pop_all()
        self.pings = pings
        self.seconds = seconds
        self.sent = 0

    def flood(self) -> int:
        """Send pings (answered by pongs it never reads) until the web closes it, or ``pings`` were
        sent, or ``seconds`` passed, or a send could not go on for ``send_stall_s`` (the web stopped
        reading it); how many. Until it is dropped: whatever the kernel buffers of this machine hold,
        the web's queue for the page fills behind them."""
        deadline = time.monotonic() + self.seconds
        with contextlib.suppress(Exception):  # the web dropped it
            while self.sent < self.pings and time.monotonic() < deadline:
                self.ws.send(json.dumps({"op": "ping", "id": f"{self.sent:064d}"}))
                self.sent += 1
        return self.sent

    def held_by_web(self) -> bool:
        """Whether the web's end of this connection is still there, open or still sending (ESTABLISHED,
        FIN_WAIT1 or CLOSE_WAIT in /proc/net/tcp), rather than gone, TIME_WAIT or CLOSE."""
        mine, web = self.ports
        return any((local, remote) == (web, mine) and state in {"01", "04", "08"}
                   for local, remote, state, _tx, _rx in tcp_table())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.sock.close()


def tcp_table() -> list[tuple[int, int, str, int, int]]:
    """IPv4 TCP sockets of this machine (/proc/net/tcp): local port, remote port, state, send queue,
    receive queue."""
    rows: list[tuple[int, int, str, int, int]] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            parts = line.split()
            if len(parts) < 5:
                continue
            tx, rx = (int(x, 16) for x in parts[4].split(":"))
            rows.append((int(parts[1].split(":")[1], 16), int(parts[2].split(":")[1], 16), parts[3], tx, rx))
    return rows


class DeafFix:
    """A FIX 4.4 session on a raw socket that reads its Logon answer and nothing after."""

    def __init__(self, port: int, comp_id: str, heartbeat_s: int = 30) -> None:
        self.comp_id = comp_id
        self.seq = 1
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.settimeout(10)
        with contextlib.ExitStack() as failed:  # the socket is closed if the Logon fails
            failed.callback(self.sock.close)
            self.sock.connect(("127.0.0.1", port))
            self.send("A", [(98, 0), (108, heartbeat_s), (141, "Y")])
            got = b""
            while SOH + b"10=" not in got:  # the Logon answer: the last thing it reads
                chunk = self.sock.recv(4096)
                if not chunk:
                    raise ConnectionError(f"{comp_id}: the gateway closed the connection at Logon")
                got += chunk
            if b"\x0135=A\x01" not in got:
                raise ConnectionError(f"{comp_id}: no Logon answer: {got[:200]!r}")
            failed.pop_all()

    def send(self, msg_type: str, fields: list[tuple[int, object]]) -> None:
        header: list[tuple[int, object]] = [(35, msg_type), (49, self.comp_id), (56, EXCHANGE_COMP_ID),
                                            (34, self.seq), (52, fix_now())]
        self.sock.sendall(frame(header + fields))
        self.seq += 1

    def orders(self, count: int, symbol: str = "ACORN.LAB", price: str = "100.00") -> None:
        """Buy and sell in turn at one price: they trade, and every report goes unread."""
        for i in range(count):
            self.send("D", [(11, f"{self.comp_id}-{i}"), (55, symbol), (54, 1 + i % 2), (60, fix_now()),
                            (38, 1), (40, 2), (44, price)])

    def subscribe(self, symbol: str = "ACORN.LAB") -> None:
        """MarketDataRequest: snapshot plus updates, full depth, bids and offers."""
        self.send("V", [(262, f"{self.comp_id}-md"), (263, 1), (264, 0), (265, 1), (267, 2), (269, 0),
                        (269, 1), (146, 1), (55, symbol)])

    def cut(self, quiet_s: float = 3.0, timeout_s: float = 60.0) -> bool:
        """Whether the gateway ended the connection: read (and drop) what is owed to it until the end
        of the connection (True), or until nothing came for ``quiet_s`` (False: it is still open).

        A peer the gateway shut down still has its backlog in the gateway's kernel, sent ahead of the
        end of the connection as fast as this reads; the end comes only after all of it, so reading
        until the receive queue is momentarily empty is not enough (that once said "not cut")."""
        deadline = time.monotonic() + timeout_s
        self.sock.settimeout(quiet_s)
        try:
            while time.monotonic() < deadline:
                if not self.sock.recv(1 << 16):
                    return True
        except TimeoutError:
            return False
        except OSError:  # reset: ended too
            return True
        return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def unread_bytes(self) -> int:
        """What it has not read yet: its own receive queue plus what the gateway's kernel holds for
        it unacknowledged (/proc/net/tcp; QuickFIX's own send queue, in user space, is not visible)."""
        mine = self.sock.getsockname()[1]
        peer = self.sock.getpeername()[1]
        total = 0
        for local, remote, state, tx, rx in tcp_table():
            if state != "01":
                continue
            if (local, remote) == (mine, peer):
                total += rx
            elif (local, remote) == (peer, mine):
                total += tx
        return total
