"""From the gateway's events stream to ExecutionReports on the right session.

One events stream per gateway (``events_stream(gateway_id)``): every command carries ``reply_to``,
the matcher writes each answer to that gateway's stream, and the gateway reads only what is for the
sessions it holds. Several gateways can run side by side without reading each other's traffic.

The loop follows the bus's consumer rules (group created idempotently, own pending entries first
after a restart, acknowledge only after the reports were handed to QuickFIX, dead-letter what does
not decode, back off on Redis errors) but talks RESP itself: it publishes nothing, so it needs none
of StreamConsumer's atomic effects, and redis-py's per-command cost (~550 us of CPU per order on
this path, measured at one order in flight) was the gateway's largest. The acknowledgement of one
batch goes out in the same write as the read of the next.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import hiredis
import redis

from services.gateway.acceptor import Counters, SessionRegistry
from services.gateway.outbound import Outbound
from services.gateway.resp import RespConnection, command
from shared import streams
from shared.bus import id_after
from shared.schema import Message, SchemaError, decode_batch

log = logging.getLogger(__name__)

Entry = tuple[bytes, list[Message]]


class ReportSender:
    """The events thread: consume the events stream, send each event as a FIX message."""

    def __init__(self, conn: RespConnection, gateway_id: str, outbound: Outbound,
                 registry: SessionRegistry, counters: Counters, *, count: int = 1000,
                 block_ms: int = 200) -> None:
        self.conn = conn
        self.stream = streams.events_stream(gateway_id).encode()
        self.group = streams.GATEWAY_GROUP.encode()
        self.consumer = gateway_id.encode()
        self.count = str(count).encode()
        self.block = str(block_ms).encode()
        self.outbound = outbound
        self.registry = registry
        self.counters = counters
        self.consumed = 0
        self.deadlettered = 0
        # The highest entry id whose reports this process has handed to QuickFIX. After a Redis
        # failure our unacknowledged entries come back as pending; those up to here were sent
        # already (the acknowledgement goes with the next read, which failed), so they are only
        # acknowledged, not sent twice. A new process has none: it sends its pending ones again.
        self.sent_upto: bytes | None = None
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
        report = self.outbound.report
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

    def _read_command(self, pending: bool) -> bytes:
        if pending:
            return command(b"XREADGROUP", b"GROUP", self.group, self.consumer, b"COUNT", self.count,
                           b"STREAMS", self.stream, b"0")
        return command(b"XREADGROUP", b"GROUP", self.group, self.consumer, b"COUNT", self.count,
                       b"BLOCK", self.block, b"STREAMS", self.stream, b">")

    def _ensure_group(self) -> None:
        reply = self.conn.roundtrip(command(b"XGROUP", b"CREATE", self.stream, self.group, b"0",
                                            b"MKSTREAM"), 1)[0]
        if isinstance(reply, hiredis.ReplyError) and "BUSYGROUP" not in str(reply):
            raise redis.ResponseError(str(reply))

    def _decode(self, reply: Any) -> tuple[list[Entry], list[bytes], list[tuple[bytes, str, bytes]]]:
        """(entries, ids to acknowledge, undecodable entries) of an XREADGROUP reply."""
        entries: list[Entry] = []
        ids: list[bytes] = []
        bad: list[tuple[bytes, str, bytes]] = []
        if not reply:
            return entries, ids, bad
        for entry_id, flat in reply[0][1]:
            ids.append(entry_id)
            if flat is None:
                bad.append((entry_id, "entry was trimmed before it was read", b""))
                continue
            fields = dict(zip(flat[0::2], flat[1::2], strict=True))
            payload = fields.get(streams.BATCH_FIELD)
            if payload is None:
                bad.append((entry_id, "entry has no batch field", repr(fields).encode()[:4096]))
                continue
            try:
                entries.append((entry_id, decode_batch(payload)))
            except SchemaError as exc:
                bad.append((entry_id, str(exc), payload[:4096]))
        return entries, ids, bad

    def _ack_commands(self, ids: list[bytes], bad: list[tuple[bytes, str, bytes]]) -> list[bytes]:
        out = []
        for entry_id, reason, payload in bad:
            log.error("dead-lettering %s %s: %s", self.stream.decode(), entry_id.decode(), reason)
            out.append(command(b"XADD", streams.DEADLETTER_STREAM.encode(), b"MAXLEN", b"~", b"10000",
                               b"*", b"stream", self.stream, b"id", entry_id, b"group", self.group,
                               b"reason", reason.encode(), b"payload", payload))
        if ids:
            out.append(command(b"XACK", self.stream, self.group, *ids))
        return out

    def _run(self) -> None:
        log.info("events thread started (tid %d)", threading.get_native_id())
        delay = 0.05
        pending = True
        acks: list[bytes] = []
        while not self._stop.is_set():
            try:
                if pending:
                    self._ensure_group()
                # Acknowledge the last batch and read the next in one round trip.
                replies = self.conn.roundtrip(b"".join([*acks, self._read_command(pending)]), len(acks) + 1)
                acks = []
                for reply in replies:
                    if isinstance(reply, hiredis.ReplyError):
                        raise redis.ResponseError(str(reply))
                entries, ids, bad = self._decode(replies[-1])
                delay = 0.05
            except redis.RedisError as exc:
                log.warning("redis unavailable for the events stream (%s); retrying in %.2fs", exc, delay)
                pending = True  # unacknowledged entries come back as our pending ones
                acks = []
                self._stop.wait(delay)
                delay = min(delay * 2, 2.0)
                continue
            if pending and not ids:
                pending = False
                continue
            if pending and self.sent_upto is not None:
                upto = self.sent_upto
                fresh = [entry for entry in entries if id_after(entry[0], upto)]
                if len(fresh) < len(entries):
                    log.info("%d pending entries were sent before redis failed: acknowledged, not sent "
                             "again", len(entries) - len(fresh))
                entries = fresh
            self.handle(entries)
            if ids and (self.sent_upto is None or id_after(ids[-1], self.sent_upto)):
                self.sent_upto = ids[-1]
            self.consumed += sum(len(m) for _, m in entries)
            self.deadlettered += len(bad)
            acks = self._ack_commands(ids, bad)
        if acks:
            try:
                self.conn.roundtrip(b"".join(acks), len(acks))
            except redis.RedisError as exc:
                log.warning("could not acknowledge the last reports (%s): they come back on restart", exc)

