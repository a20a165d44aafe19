"""The tap: a TCP relay on loopback between a FIX client's engine and the exchange.

One implementation serves the gateway's lab sessions (services/gateway/lab) and the terminal client
(services/client): each puts its own QuickFIX initiator behind a tap.

It frames whole FIX messages (``shared.fix.codec.split_frames``), records every one with a timestamp
and forwards it unchanged. It can withhold the next message the client's engine sends, or everything
it sends (silent), so the exchange sees a gap or silence and the engines react as engines do. The
tap never edits a FIX message; it writes one of its own only when told to (``inject``: the bytes no
engine sends on purpose, a bad CheckSum or a garbled message, for certification). One asyncio loop
in one thread serves every tap of a gateway: a few dozen mostly idle connections need no more, and
backpressure (``drain``) plus the framer's bounded remainder keep every buffer bounded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from shared.fix.codec import split_frames

log = logging.getLogger(__name__)

CLIENT = "client"
EXCHANGE = "exchange"
READ_SIZE = 65536
CONNECT_S = 10.0  # the exchange's TCP connect and, with TLS, its handshake
TLS_HANDSHAKE_S = 5.0
ACCEPT_BACKLOG = 100
STOP_S = 5.0  # TapLoop.stop's closing on the loop, before it closes what is left itself
T = TypeVar("T")

# (record number from 1, source, raw bytes, withheld, ns timestamp); called on the loop's thread.
OnRecord = Callable[[int, str, bytes, bool, int], None]
OnClosed = Callable[[str], None]
OnAccept = Callable[[socket.socket], Coroutine[Any, Any, None]]


async def shut(writers: list[asyncio.StreamWriter], grace_s: float = 1.0) -> None:
    """Close connections, and abort those that have not closed within ``grace_s``.

    ``close`` waits until what is buffered has been sent: to a peer that no longer reads, never. Such
    a transport would outlive its loop (and warn, unclosed, when it is collected)."""
    for writer in writers:
        writer.close()
    closing = asyncio.gather(*(w.wait_closed() for w in writers), return_exceptions=True)
    try:
        await asyncio.wait_for(closing, grace_s)
    except TimeoutError:
        for writer in writers:
            writer.transport.abort()  # a no-op on one that did close
        await asyncio.sleep(0)  # abort closes the socket on the loop's next turn


def _why(exc: BaseException, tls: bool) -> str:
    """One line for a failed connect: a TLS failure says so (a certificate not verified, a peer that
    does not speak TLS: a plain FIX port)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"TLS: its certificate was not verified: {exc.verify_message} "
                "(--tls-ca FILE, or --tls-insecure)")
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed: {exc.reason or exc}"
    if isinstance(exc, TimeoutError):
        return "TLS handshake timed out (a plain FIX port?)" if tls else "connect timed out"
    if tls and isinstance(exc, ConnectionError):
        return f"TLS handshake failed: {exc.strerror or exc} (a plain FIX port?)"
    return str(getattr(exc, "strerror", None) or exc)


class TapLoop:
    """An asyncio event loop running in its own thread.

    Its taps listen through ``listen``; their connections are registered in ``open`` (and an
    accepted socket in ``accepted`` until it is a connection), their relays' tasks in ``relays``.
    ``stop`` closes what is still there before the loop closes, so no socket outlives its loop (one
    that does warns when it is collected, whichever code runs then).

    It accepts on its own (a reader on the listening socket) rather than through asyncio's Server:
    in Python 3.11 a Server closed between accepting a socket and making it a connection drops that
    socket, open, without a word (``Server._attach`` asserts in a task that logs nothing)."""

    def __init__(self, name: str = "lab-tap") -> None:
        self.open: set[asyncio.StreamWriter] = set()
        self.accepted: set[socket.socket] = set()
        self.listeners: set[socket.socket] = set()
        self.relays: set[asyncio.Task[Any]] = set()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self) -> TapLoop:
        self._thread.start()
        return self

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        """Run ``coro`` on the loop and wait for its result (from another thread)."""
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Start a relay's task (on the loop's thread); ``stop`` cancels it if it is still running."""
        task = self.loop.create_task(coro)
        self.relays.add(task)
        task.add_done_callback(self.relays.discard)
        return task

    def listen(self, host: str, port: int, on_accept: OnAccept) -> socket.socket:
        """Listen on ``host``:``port`` (on the loop's thread); each accepted socket is registered in
        ``accepted`` at once and handed to a new relay task, ``on_accept(sock)``."""
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        sock = socket.create_server((host, port), family=family, backlog=ACCEPT_BACKLOG)
        sock.setblocking(False)
        self.listeners.add(sock)
        self.loop.add_reader(sock.fileno(), self._accept, sock, on_accept)
        return sock

    def unlisten(self, sock: socket.socket) -> None:
        """Stop listening (on the loop's thread): nothing more is accepted, nothing is half-accepted."""
        if sock in self.listeners:
            self.listeners.discard(sock)
            self.loop.remove_reader(sock.fileno())
            sock.close()

    def _accept(self, sock: socket.socket, on_accept: OnAccept) -> None:
        for _ in range(ACCEPT_BACKLOG):
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:  # out of file descriptors: pause, as asyncio's own accept does
                log.warning("tap: accept failed (%s); pausing the listener for 1 s", exc)
                self.loop.remove_reader(sock.fileno())
                self.loop.call_later(1.0, self._resume, sock, on_accept)
                return
            conn.setblocking(False)
            self.accepted.add(conn)
            self.spawn(on_accept(conn))

    def _resume(self, sock: socket.socket, on_accept: OnAccept) -> None:
        if sock in self.listeners:
            self.loop.add_reader(sock.fileno(), self._accept, sock, on_accept)

    async def connection(self, conn: socket.socket) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Make an accepted socket a connection, registered in ``open`` as it is made (an OSError:
        the socket is closed and the error raised)."""
        try:
            reader, writer = await asyncio.open_connection(sock=conn)
        except OSError:
            conn.close()
            raise
        finally:
            self.accepted.discard(conn)
        self.open.add(writer)
        return reader, writer

    async def release(self, *writers: asyncio.StreamWriter) -> None:
        """Close connections made by ``connection`` (or registered in ``open``) and forget them."""
        await shut(list(writers))
        self.open.difference_update(writers)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            self.call(self._close_all(), timeout=STOP_S)
        except (concurrent.futures.TimeoutError, RuntimeError) as exc:
            log.warning("tap loop %s: closing its connections did not finish on the loop (%r); "
                        "aborting what is left once it has stopped", self._thread.name, exc)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():  # the loop is free: whatever is left is closed from here
            self.loop.run_until_complete(self._abort_all())
        self.loop.close()

    async def _close_all(self) -> None:
        for sock in list(self.listeners):  # first: nothing is accepted after this
            self.unlisten(sock)
        # The relays are cancelled, again until they are done: in Python 3.11 a wait_for whose call
        # completes as it is cancelled returns the result and drops the cancellation.
        deadline = self.loop.time() + STOP_S / 2
        while self.relays and self.loop.time() < deadline:
            for task in self.relays:
                task.cancel()
            await asyncio.wait(list(self.relays), timeout=0.1)
        await self._abort_all()

    async def _abort_all(self) -> None:
        """Cancel every task still there and close every connection (aborting those that do not
        close at once) and every accepted socket not yet a connection."""
        me = asyncio.current_task()
        if tasks := [t for t in asyncio.all_tasks() if t is not me]:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=1.0)
        left = list(self.open)
        self.open.clear()
        await shut(left)
        for conn in list(self.accepted):
            conn.close()  # a no-op on one a cancelled relay's transport has closed
        self.accepted.clear()


class Tap:
    """One session's relay: the engine connects to ``port``, the tap connects to the exchange."""

    def __init__(self, loop: TapLoop, exchange_host: str, exchange_port: int, on_record: OnRecord,
                 on_closed: OnClosed, tls: ssl.SSLContext | None = None) -> None:
        self._loop = loop
        self.exchange_host = exchange_host
        self.exchange_port = exchange_port
        # TLS to the exchange (its stunnel port, shared/tls.py); the engine's side stays plain loopback.
        self.tls = tls
        self.on_record = on_record
        self.on_closed = on_closed
        self.port = 0
        # Set from the command thread, read on the loop thread: plain attribute writes are atomic.
        self.silent = False
        self.drop_next = False
        self.records = 0
        # The last connection attempt could not reach the exchange (a refused or failed connect).
        self.unreachable = False
        self._listener: socket.socket | None = None
        self._busy = False
        self._writers: list[asyncio.StreamWriter] = []

    @property
    def idle(self) -> bool:
        """No engine connection is being relayed (the last one's on_closed has been called)."""
        return not self._busy

    def open(self, port: int = 0, host: str = "127.0.0.1") -> int:
        """Listen on ``host`` (loopback by default), on ``port`` (0: a free one); return the port."""
        self.port = self._loop.call(self._listen(port, host))
        return self.port

    def inject(self, raw: bytes) -> None:
        """Write ``raw`` to the engine's connection as if the exchange had sent it, between two whole
        messages, and record it as from the exchange. Raise ConnectionError when no engine is connected."""
        self._loop.call(self._inject(raw))

    async def _inject(self, raw: bytes) -> None:
        if not self._writers:
            raise ConnectionError("no engine is connected to the tap")
        self.records += 1
        try:
            self.on_record(self.records, EXCHANGE, raw, False, time.time_ns())
        except Exception:
            log.exception("tap on_record callback failed")
        self._writers[0].write(raw)
        await self._writers[0].drain()

    def close(self) -> None:
        """Stop listening and close any connection (idempotent)."""
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            self._loop.call(self._close(), timeout=5)

    def hang_up(self) -> None:
        """Close the connection being relayed, if any, and keep listening for the next one.

        An engine stopped before its Logon was answered may leave its socket open; the next engine's
        connection would be turned away while this one lasts."""
        async def _hang_up() -> None:
            for writer in self._writers:
                writer.close()

        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            self._loop.call(_hang_up(), timeout=5)

    async def _listen(self, port: int = 0, host: str = "127.0.0.1") -> int:
        self._listener = self._loop.listen(host, port, self._accept)
        return int(self._listener.getsockname()[1])

    async def _close(self) -> None:
        if self._listener is not None:
            self._loop.unlisten(self._listener)
            self._listener = None
        for writer in self._writers:
            writer.close()

    async def _accept(self, conn: socket.socket) -> None:
        try:
            c_reader, c_writer = await self._loop.connection(conn)
        except OSError as exc:  # the engine's side went away as it was accepted
            log.info("tap: an accepted connection failed at once (%s)", exc)
            return
        if self._busy or self._listener is None:  # one engine connection at a time
            await self._loop.release(c_writer)
            return
        self._busy = True
        try:
            try:
                x_reader, x_writer = await asyncio.wait_for(asyncio.open_connection(
                    self.exchange_host, self.exchange_port, ssl=self.tls,
                    server_hostname=self.exchange_host if self.tls is not None else None,
                    ssl_handshake_timeout=TLS_HANDSHAKE_S if self.tls is not None else None),
                    CONNECT_S)
            except (OSError, TimeoutError) as exc:
                self.unreachable = True
                self._closed(f"the exchange at {self.exchange_host}:{self.exchange_port} is unreachable "
                             f"({_why(exc, self.tls is not None)})")
                await self._loop.release(c_writer)
                return
            self.unreachable = False
            self._loop.open.add(x_writer)
            if self._listener is None:  # the tap was closed while it dialled the exchange
                await self._loop.release(c_writer, x_writer)
                return
            self._writers = [c_writer, x_writer]
            pumps = [self._loop.spawn(self._pump(c_reader, x_writer, CLIENT)),
                     self._loop.spawn(self._pump(x_reader, c_writer, EXCHANGE))]
            done, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            # Say why before the engine sees its connection close.
            self._closed(next(iter(done)).result())
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            self._writers = []
            await self._loop.release(c_writer, x_writer)
        finally:
            # A relay cancelled before its end leaves its connections to TapLoop.stop.
            self._writers = []
            self._busy = False

    def _closed(self, reason: str) -> None:
        try:
            self.on_closed(reason)
        except Exception:  # a callback must not kill the loop every tap shares
            log.exception("tap on_closed callback failed")

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source: str) -> str:
        buf = b""
        try:
            while True:
                chunk = await reader.read(READ_SIZE)
                if not chunk:
                    return f"the {source} closed the connection"
                frames, buf = split_frames(buf + chunk)
                for frame in frames:
                    withheld = False
                    if source == CLIENT and frame.whole:
                        if self.silent:
                            withheld = True
                        elif self.drop_next:
                            self.drop_next = False
                            withheld = True
                    self.records += 1
                    try:
                        self.on_record(self.records, source, frame.raw, withheld, time.time_ns())
                    except Exception:
                        log.exception("tap on_record callback failed")
                    if not withheld:
                        writer.write(frame.raw)
                await writer.drain()
        except (ConnectionError, OSError) as exc:
            return f"the {source} connection failed ({exc})"
