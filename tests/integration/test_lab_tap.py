"""The tap on real loopback sockets: bytes pass unchanged, every message is recorded, withholding works."""

from __future__ import annotations

import contextlib
import gc
import socket
import threading
import time
import warnings
from collections.abc import Iterator

import pytest

from shared.fix.tap import Tap, TapLoop
from tests.helpers import eventually

pytestmark = pytest.mark.integration

SOH = b"\x01"


def fix(body: bytes) -> bytes:
    head = b"8=FIX.4.4" + SOH + b"9=%d" % len(body) + SOH
    return head + body + b"10=%03d" % (sum(head + body) % 256) + SOH


ONE = fix(b"35=0\x0134=1\x01")
TWO = fix(b"35=D\x0134=2\x0111=a\x01")
THREE = fix(b"35=0\x0134=3\x01")


class Peer:
    """The 'exchange': accepts one connection and keeps what it reads."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.got = b""
        self.conn: socket.socket | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn, _ = self.server.accept()
        self.conn = conn
        while chunk := conn.recv(65536):
            self.got += chunk

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.shutdown(socket.SHUT_RDWR)
            self.conn.close()
        self.server.close()
        self.thread.join(5)


@pytest.fixture
def loop() -> Iterator[TapLoop]:
    tap_loop = TapLoop().start()
    yield tap_loop
    tap_loop.stop()


def test_tap_forwards_unchanged_records_all_and_withholds_on_demand(loop: TapLoop) -> None:
    peer = Peer()
    records: list[tuple[int, str, bytes, bool]] = []
    closed: list[str] = []
    tap = Tap(loop, "127.0.0.1", peer.port, lambda n, src, raw, w, ts: records.append((n, src, raw, w)),
              closed.append)
    port = tap.open()
    client = socket.create_connection(("127.0.0.1", port))
    try:
        stream = b"noise" + ONE + TWO
        for i in range(0, len(stream), 7):  # fragmented writes
            client.sendall(stream[i:i + 7])
        eventually(lambda: peer.got == stream, what="bytes forwarded unchanged")
        assert [(n, src, raw, w) for n, src, raw, w in records] == [
            (1, "client", b"noise", False), (2, "client", ONE, False), (3, "client", TWO, False)]
        tap.drop_next = True
        client.sendall(THREE + ONE)
        eventually(lambda: len(records) == 5, what="two more records")
        assert records[3] == (4, "client", THREE, True) and records[4] == (5, "client", ONE, False)
        eventually(lambda: peer.got == stream + ONE, what="the withheld message never arrives")
        assert not tap.drop_next
        tap.silent = True
        client.sendall(TWO)
        eventually(lambda: len(records) == 6 and records[5][3], what="silent withholds")
        tap.silent = False
        assert peer.conn is not None
        peer.conn.sendall(THREE)  # the other direction is never withheld
        client.settimeout(5)
        assert client.recv(1024) == THREE
        assert records[6] == (7, "exchange", THREE, False)
        peer.conn.shutdown(socket.SHUT_RDWR)  # the exchange gives up: the tap closes the engine's side too
        assert client.recv(1024) == b""
        eventually(lambda: closed, what="on_closed")
        assert "exchange closed" in closed[0]
    finally:
        client.close()
        tap.close()
        peer.close()


def test_tap_reports_an_unreachable_exchange(loop: TapLoop) -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        dead_port = s.getsockname()[1]  # closed again before the tap dials it
    closed: list[str] = []
    tap = Tap(loop, "127.0.0.1", dead_port, lambda *a: None, closed.append)
    client = socket.create_connection(("127.0.0.1", tap.open()))
    try:
        client.settimeout(5)
        assert client.recv(1024) == b""
        eventually(lambda: closed, what="on_closed")
        assert "unreachable" in closed[0]
    finally:
        client.close()
        tap.close()


def test_a_loop_stopped_mid_relay_leaves_no_transport_open() -> None:
    """The gateway stopping while a lab session is connected: TapLoop.stop closes the relay's two
    connections and the tap's listener, so nothing is left to warn when collected later."""
    tap_loop = TapLoop().start()
    peer = Peer()
    tap = Tap(tap_loop, "127.0.0.1", peer.port, lambda *_: None, lambda _reason: None)
    client = socket.create_connection(("127.0.0.1", tap.open()))
    try:
        client.sendall(ONE)
        eventually(lambda: peer.got == ONE, what="the relay up")
        assert len(tap_loop.open) == 2 and len(tap_loop.listeners) == 1  # engine side, exchange side
        tap_loop.stop()
        assert tap_loop.open == set() and tap_loop.listeners == set() and tap_loop.accepted == set()
        client.settimeout(5)
        assert client.recv(100) == b""  # the engine's connection was closed, not abandoned
    finally:
        client.close()
        peer.close()


def test_a_loop_stopped_while_the_exchange_does_not_read_aborts_the_relay() -> None:
    """What the tap holds for an exchange that stopped reading can never be sent, so closing that
    connection would wait for ever: TapLoop.stop aborts it, and the exchange side sees the end."""
    tap_loop = TapLoop().start()
    exchange = socket.create_server(("127.0.0.1", 0))
    exchange.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # inherited by what it accepts
    deaf: list[socket.socket] = []
    threading.Thread(target=lambda: deaf.append(exchange.accept()[0]), daemon=True).start()
    tap = Tap(tap_loop, "127.0.0.1", exchange.getsockname()[1], lambda *_: None, lambda _reason: None)
    client = socket.create_connection(("127.0.0.1", tap.open()))
    try:
        (side,) = eventually(lambda: deaf, what="the exchange side accepted")
        client.settimeout(0.5)
        with contextlib.suppress(OSError):
            for _ in range(400):  # more than the kernel buffers take: the rest waits in the tap
                client.sendall(ONE * 1000)
        started = time.monotonic()
        tap_loop.stop()
        assert time.monotonic() - started < 5 and tap_loop.open == set()
        side.settimeout(5)
        with contextlib.suppress(ConnectionResetError):
            while side.recv(1 << 16):
                pass  # what the kernel held, then the end of the connection
    finally:
        client.close()
        for s in deaf:
            s.close()
        exchange.close()


def test_connections_arriving_as_the_loop_stops_are_all_closed() -> None:
    """An engine connecting just as the gateway stops: its connection may be accepted, or its relay
    created, a moment before the relays are cancelled. Each must still be closed by TapLoop.stop, not
    left to warn when collected during some later test (as one did in a four-worker run)."""
    exchange = socket.create_server(("127.0.0.1", 0), backlog=64)  # connects, never reads
    clients: list[socket.socket] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for attempt in range(40):
                tap_loop = TapLoop().start()
                tap = Tap(tap_loop, "127.0.0.1", exchange.getsockname()[1], lambda *_: None,
                          lambda _reason: None)
                port = tap.open()
                batch = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
                clients += batch
                time.sleep((attempt % 4) * 0.0003)  # a different moment of the accept each time
                tap_loop.stop()
                assert tap_loop.open == set() and tap_loop.accepted == set()
                for client in batch:  # closed by the stop, not by the garbage collector later
                    client.settimeout(5)
                    with contextlib.suppress(ConnectionResetError):
                        assert client.recv(100) == b""
            del tap_loop, tap
            gc.collect()
        unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
        assert unclosed == []
    finally:
        for client in clients:
            client.close()
        exchange.close()
