"""From the gateway's events streams to ExecutionReports on the right session.

Every command carries ``reply_to``: each matcher shard writes its answers to that gateway's stream
in the shard's slot (``shard_events_stream(shard, gateway_id)``) and the intake publisher writes its
refusals to the gateway's own (``events_stream(gateway_id)``). The gateway reads those streams only,
what is for the sessions it holds: several gateways can run side by side without reading each
other's traffic.

The events thread runs the bus's consumer loop on all of them (``shared.bus_lean.LeanMultiStreamConsumer``):
groups created idempotently, each stream's own pending entries first after a restart, in order per
stream, dead letters for what does not decode, back off on Redis errors, and each stream's batch
acknowledged (with its applied id) in the same write as the next read of them all: one round trip
and one wake-up per read, with no redis-py cost per call. Its handler
sends every event of a batch as a FIX message and publishes nothing. A batch is acknowledged only
after its reports were handed to QuickFIX; after a Redis failure the owed acknowledgement is retried
(with the applied-id check) before any pending entry is read again, so a report is not sent twice.
A new gateway process sends its pending ones again (at least once, as before).

On a Redis Cluster, where one read may not name streams of several slots, the same guarantees hold
per slot (``shared.bus_cluster.ClusterMultiStreamConsumer``: a lean consumer and a thread per slot, on a
connection to the slot's master, the handler called by one at a time; with FIXLAB_CLUSTER_LEAN=0 one
per stream on redis-py's cluster client).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import redis

from services.gateway.acceptor import Counters, SessionRegistry
from services.gateway.outbound import MassCancelJoin, Outbound
from services.gateway.untold import Untold
from shared import hoptrace, streams
from shared.bus import Entry, is_cluster
from shared.bus_cluster import ClusterMultiStreamConsumer
from shared.bus_lean import LeanMultiStreamConsumer
from shared.resp import RespConnection
from shared.schema import Accepted, Cancelled, MassCancelReport, Message

log = logging.getLogger(__name__)


def events_streams(gateway_id: str, shards: Sequence[str]) -> list[str]:
    """What a gateway reads: its own events stream, then each matcher shard's stream for it."""
    return [streams.events_stream(gateway_id), *(streams.shard_events_stream(s, gateway_id) for s in shards)]


class ReportSender:
    """The events thread: consume the events streams, send each event as a FIX message."""

    def __init__(self, r: redis.Redis, conn: RespConnection | None, gateway_id: str, shards: Sequence[str],
                 outbound: Outbound, registry: SessionRegistry, counters: Counters, *, count: int = 1000,
                 block_ms: int = 200, maxlen: int = 1_000_000, wait_replicas: int = 0,
                 lean: bool = False, untold: Untold | None = None) -> None:
        """``conn``: the lean connection on one Redis; None on a cluster (``r`` its cluster client),
        where ``lean`` reads each slot over a lean connection to its master.
        ``wait_replicas``: on a cluster, send a batch's reports only once that many replicas hold it
        (redis-py's path then, whatever ``lean`` says)."""
        names = events_streams(gateway_id, shards)
        self.consumer: LeanMultiStreamConsumer | ClusterMultiStreamConsumer
        if conn is None or is_cluster(r):
            self.consumer = ClusterMultiStreamConsumer(r, names, streams.GATEWAY_GROUP, gateway_id,
                                                       count=count, block_ms=block_ms, maxlen=maxlen,
                                                       wait_replicas=wait_replicas, lean=lean)
        else:
            self.consumer = LeanMultiStreamConsumer(r, conn, names, streams.GATEWAY_GROUP, gateway_id,
                                                    count=count, block_ms=block_ms, maxlen=maxlen)
        self.outbound = outbound
        # A mass cancel of every order is answered by each shard: one OrderMassCancelReport goes out.
        self.join = MassCancelJoin(outbound.shards)
        self.registry = registry
        self.counters = counters
        # A Cancelled for a session not logged on (the start-up sweep's) is kept and told at its
        # next Logon (untold.py); None: sent as any report.
        self.untold = untold
        # Every event, before it is told: the risk limits' open orders and positions (risk.py).
        self.observe: Callable[[Message], None] | None = None
        # A kill's MassCancelReport: True when it is the kill switch's own (not sent to the session).
        self.kill_report: Callable[[MassCancelReport], bool] | None = None
        # Each ExecutionReport body told (or kept) for a session: the drop copy (dropcopy.py).
        self.copy: Callable[[list[tuple[str, str]]], None] | None = None
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
        join = self.join.feed
        untold = self.untold
        kept: list[tuple[str, str]] = []
        observe = self.observe
        copy = self.copy
        copies: list[tuple[str, str]] = []
        for _entry_id, msgs in batch:
            for ev in join(msgs):
                try:
                    traced = hoptrace.ON and type(ev) is Accepted
                    if traced:
                        hoptrace.mark("gateway.report")
                    if observe is not None:
                        observe(ev)
                    if (type(ev) is MassCancelReport and self.kill_report is not None
                            and self.kill_report(ev)):
                        continue
                    body = report(ev)
                    if copy is not None and body.startswith("35=8\x01"):
                        copies.append((ev.session, body))  # type: ignore[attr-defined]
                    if (untold is not None and type(ev) is Cancelled and untold.wanted(ev.session)
                            and not self.registry.is_logged_on(ev.session)):
                        kept.append((ev.session, body))
                        continue
                    sent = send(ev.session, body)  # type: ignore[attr-defined]
                    if traced:
                        hoptrace.mark("gateway.reported")
                    if sent:
                        counters.reports_out += 1
                    else:
                        counters.unroutable += 1
                        log.warning("no session %s here for %s", getattr(ev, "session", "?"),
                                    type(ev).__name__)
                except Exception:
                    counters.unroutable += 1
                    log.exception("cannot send %r", ev)
        if copies and copy is not None:
            copy(copies)  # before the batch is acknowledged; a Redis error reads it again
        if kept and untold is not None:
            untold.keep(kept)  # before the batch is acknowledged; a Redis error reads it again
            for session in {s for s, _body in kept if self.registry.is_logged_on(s)}:
                untold.logged_on(session)  # it logged on meanwhile: tell it now

    def _run(self) -> None:
        log.info("events thread started (tid %d)", threading.get_native_id())
        while not self._stop.is_set():
            try:
                self.consumer.run(self.handle, self._stop)
            except Exception:  # an error reply the loop does not retry (a misconfigured Redis)
                log.exception("events thread: unexpected error; reading again in 1 s")
                self._stop.wait(1.0)
