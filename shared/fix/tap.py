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
T = TypeVar("T")

# (record number from 1, source, raw bytes, withheld, ns timestamp); called on the loop's thread.
OnRecord = Callable[[int, str, bytes, bool, int], None]
OnClosed = Callable[[str], None]


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

    Its taps register their listeners and connections in ``open``; ``stop`` closes what is still
    there before the loop closes, so no transport outlives its loop (one that does warns when it is
    collected, whichever code runs then)."""

    def __init__(self, name: str = "lab-tap") -> None:
        self.open: set[asyncio.StreamWriter | asyncio.AbstractServer] = set()
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

    def stop(self) -> None:
        if not self._thread.is_alive():
            return

        async def _cancel_all() -> None:
            # Listeners first: a connection accepted while the relays are being cancelled would start
            # a relay after the cancelling, and its socket would outlive the loop.
            for server in [x for x in self.open if isinstance(x, asyncio.AbstractServer)]:
                server.close()
                self.open.discard(server)
            await asyncio.sleep(0)  # accepted connections' relays start on this turn
            while tasks := [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            left = list(self.open)
            self.open.clear()
            await shut([w for w in left if isinstance(w, asyncio.StreamWriter)])

        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            self.call(_cancel_all(), timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


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
        self._server: asyncio.AbstractServer | None = None
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
        self._server = await asyncio.start_server(self._accept, host, port)
        self._loop.open.add(self._server)
        return int(self._server.sockets[0].getsockname()[1])

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._loop.open.discard(self._server)
            self._server = None
        for writer in self._writers:
            writer.close()

    async def _accept(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        if self._busy or self._server is None:  # one engine connection at a time
            self._loop.open.add(c_writer)
            await shut([c_writer])
            self._loop.open.discard(c_writer)
            return
        self._busy = True
        self._loop.open.add(c_writer)
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
                await shut([c_writer])
                self._loop.open.discard(c_writer)
                return
            self.unreachable = False
            self._loop.open.add(x_writer)
            self._writers = [c_writer, x_writer]
            pumps = [asyncio.ensure_future(self._pump(c_reader, x_writer, CLIENT)),
                     asyncio.ensure_future(self._pump(x_reader, c_writer, EXCHANGE))]
            done, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            # Say why before the engine sees its connection close.
            self._closed(next(iter(done)).result())
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            self._writers = []
            await shut([c_writer, x_writer])
            self._loop.open.difference_update((c_writer, x_writer))
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
