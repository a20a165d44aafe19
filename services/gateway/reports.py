"""From the gateway's events stream to ExecutionReports on the right session.

One events stream per gateway (``events_stream(gateway_id)``): every command carries ``reply_to``,
the matcher writes each answer to that gateway's stream, and the gateway reads only what is for the
sessions it holds. Several gateways can run side by side without reading each other's traffic,
and a report is acknowledged only after QuickFIX took it.
"""

from __future__ import annotations

import logging
import threading

import redis

from services.gateway.acceptor import Counters, SessionRegistry
from services.gateway.translate import Translator
from shared import streams
from shared.bus import Entry, StreamConsumer

log = logging.getLogger(__name__)


class ReportSender:
    """The events thread: consume the events stream, send each event as a FIX message."""

    def __init__(self, r: redis.Redis, gateway_id: str, translator: Translator, registry: SessionRegistry,
                 counters: Counters, maxlen: int) -> None:
        self.consumer = StreamConsumer(r, streams.events_stream(gateway_id), streams.GATEWAY_GROUP,
                                       gateway_id, count=1000, block_ms=200, maxlen=maxlen)
        self.translator = translator
        self.registry = registry
        self.counters = counters
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gateway-events", daemon=True)

    def start(self) -> ReportSender:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 3.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def handle(self, batch: list[Entry]) -> None:
        """Send every event of ``batch``; an event for a session not held here is logged and dropped."""
        report = self.translator.report
        send = self.registry.send
        counters = self.counters
        for _entry_id, msgs in batch:
            for ev in msgs:
                try:
                    body = report(ev)
                    if send(ev.session, body):  # type: ignore[attr-defined]
                        counters.reports_out += 1
                    else:
                        counters.unroutable += 1
                        log.warning("no session %s here for %s", getattr(ev, "session", "?"),
                                    type(ev).__name__)
                except Exception:
                    counters.unroutable += 1
                    log.exception("cannot send %r", ev)

    def _run(self) -> None:
        log.info("events thread started (tid %d)", threading.get_native_id())
        while not self._stop.is_set():
            try:
                self.consumer.run(self.handle, self._stop)
            except Exception:
                # e.g. the stream or group was deleted under us: start over rather than go deaf.
                log.exception("events loop failed; restarting it")
                self.consumer._pending_first = True
                self._stop.wait(1.0)
