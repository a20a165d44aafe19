"""The gateway's intake publisher: a process of its own that puts received orders on the bus.

``python -m services.gateway.publisher --run RUN --first N`` is started by the gateway (see
``handoff.py``), never by hand. Why a process and not a thread: QuickFIX's engine thread takes the
GIL for every callback, and any other Python thread that wants the GIL in the same process (even a
light one that wakes every millisecond) cost that engine thread a third of its throughput here,
however small its own work (measured: services/gateway/README.md). So the acceptor only writes each
received message to a pipe; this process translates, checks, groups by shard and publishes.

Pipes:
- stdin, from the acceptor, in arrival order: records (services.gateway.records), each a received
  order message or a command of the gateway's own (SessionEnded, EndOfDay). Records are numbered
  from ``--first`` on; each message is stamped with the time it is read here.
- stdout, to the acceptor, JSON lines ``["S", done, published, refused, errors]``: progress, at once
  when nothing is left to publish, else at most every FIXLAB_PUBLISHER_REPORT_S (0.1 s), where
  ``done`` is the number of the last record handled (the acceptor forgets records up to it).
Refusals do not come back this way: they go on the gateway's events stream with the orders
(services.gateway.intake), and the events thread sends them like any report.

Redis down: records wait here, and the publish is retried with back-off. The bound is the
acceptor's (FIXLAB_GATEWAY_QUEUE records not yet on the bus): past it, it refuses new orders at
once with a clear "exchange busy" text; the commands it makes itself are never refused. The count
of records done is written in the same transaction as the orders, so a publisher started again
after a crash skips the records its predecessor already published. On a Redis Cluster each
destination stream has its own transaction and done count (services.gateway.slots), and a publisher
started again skips, per destination, what its predecessor put there.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import select
import signal
import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import redis

from services.gateway.config import GatewaySettings, gateway_settings
from services.gateway.inbound import Inbound
from services.gateway.intake import Publisher
from services.gateway.records import COMMAND, FIX, RecordError, split_records
from services.gateway.resp import RespConnection
from services.gateway.sessions import load_sessions, stp_modes
from services.gateway.slots import ClusterIntake, done_keys
from shared import gcpolicy, logs, redis_cluster, streams
from shared.config import ConfigError
from shared.schema import SchemaError, as_wire, decode

log = logging.getLogger("services.gateway.publisher")

# Reads land in one buffer kept for the process's life: os.read(fd, 1 MiB) asked malloc for a fresh
# MiB each time, which glibc serves with mmap (over its threshold), shrinks with mremap and frees
# with munmap: about 15% of this process's CPU at 4x8 went to those calls and their page faults.
READ_SIZE = 1 << 20
# Once the acceptor has closed the pipe (it stops, or it died), how long to keep retrying Redis for
# the records still held before giving up (logged, exit 1) rather than linger as an orphan.
FINAL_FLUSH_S = 10.0
# After publishing k >= 16 records with nothing left, wait about as long as they took to arrive
# before reading again: under a flood the next read then finds a batch instead of one record, and
# the acceptor's writes do not have to wake a sleeping reader for each message (that wake-up is paid
# on the acceptor's engine thread). Smaller batches (a lone order, a few sessions trading) are never
# held back: waiting there only adds latency (4x8: 6,500 -> 7,000 orders/s without it).
LINGER_PER_RECORD_S = 0.00001
LINGER_MAX_S = 0.002
LINGER_ABOVE = 16
IDLE_REPORT_S = 0.005


class IntakeLoop:
    """One thread: read records, publish batches, report progress."""

    def __init__(self, settings: GatewaySettings, run: str, first: int, fd_in: int, fd_out: int,
                 generation: int = 0) -> None:
        common = settings.common
        self.fd_in = fd_in
        self.fd_out = fd_out
        self.batch_max = settings.batch_max
        self.report_s = settings.publisher_report_s
        # Exec ids of this process's refusals: distinct from the acceptor's and from an earlier publisher's.
        inbound = Inbound(common.instruments, settings.gateway_id, f"{run}-p{generation}",
                          stp_modes(load_sessions(settings.sessions_file, settings.comp_ids)))
        self.done_key = streams.intake_done_key(settings.gateway_id, run)
        self.cluster: ClusterIntake | None = None
        if redis_cluster.is_cluster_url(common.redis_url):
            self.cluster = ClusterIntake(redis_cluster.cluster_client(common.redis_url),
                                         done_keys(common.instruments, settings.gateway_id, run),
                                         lean=common.cluster_lean, wait_replicas=common.wait_replicas)
            self.publisher = Publisher(self.cluster, inbound, common.instruments, common.stream_maxlen,
                                       self.done_key)
        else:
            self.conn = RespConnection(common.redis_url)
            self.publisher = Publisher(self.conn, inbound, common.instruments, common.stream_maxlen,
                                       self.done_key)
        self.first = first
        self.received = first - 1  # number of the last record read
        self.done = first - 1  # number of the last record handled
        # Learnt from Redis before the first publish: what an earlier publisher of this gateway run
        # put on the bus (records it was handed again because it died before reporting them done).
        self.skip_upto: int | None = None
        self.backlog: deque[tuple[int, Sequence[Any] | None]] = deque()  # None: unreadable, kept for order
        self.batch: list[tuple[int, Sequence[Any]]] | None = None  # (number, record)
        self.batch_last = 0
        self.errors = 0
        self._reported: tuple[int, ...] = ()
        self._reported_at = time.monotonic()

    @property
    def waiting(self) -> int:
        """Records read, not yet on the bus: the backlog (unreadable ones excepted), the batch in hand."""
        return sum(record is not None for _n, record in self.backlog) + len(self.batch or ())

    # ------------------------------------------------------------------ records in

    def take_records(self, buf: bytes) -> bytes:
        """Queue the whole records at the start of ``buf``; return the incomplete rest."""
        records, rest = split_records(buf)
        ts = time.time_ns()
        for kind, payload in records:
            self.received += 1
            record = self.record(kind, payload, ts)
            self.backlog.append((self.received, record))
        return rest

    def record(self, kind: int, payload: bytes, ts: int) -> tuple[Any, ...] | None:
        """A record as (text, ts) or a command in wire form; None (counted, logged) if it is neither."""
        if kind == FIX:
            # surrogateescape: the exact bytes QuickFIX had, whatever their encoding.
            return (payload.decode("utf-8", "surrogateescape"), ts)
        if kind == COMMAND:
            try:
                return as_wire(decode(payload))
            except SchemaError:
                pass
        self.errors += 1
        log.error("not a record from the acceptor: kind %r, %r", chr(kind), payload[:200])
        return None

    def write(self, item: list[Any]) -> None:
        data = json.dumps(item).encode() + b"\n"
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd_out, view):]

    # ------------------------------------------------------------------ publishing

    def next_batch(self) -> bool:
        """Take the next batch from the backlog into hand; False when there is none."""
        batch: list[tuple[int, Sequence[Any]]] = []
        skip = self.skip_upto or 0
        while self.backlog and len(batch) < self.batch_max:
            number, record = self.backlog.popleft()
            self.batch_last = number
            if record is None:
                continue
            if number > skip:
                batch.append((number, record))
        if self.batch_last == self.done:
            return False
        self.batch = batch
        return True

    def publish(self) -> bool:
        """Publish the batch in hand; False on a Redis error (the caller retries later)."""
        assert self.batch is not None
        if self.skip_upto is None:
            try:
                self.skip_upto = self._learn_done()
            except redis.RedisError as exc:
                log.warning("redis unavailable, cannot read what was published: %s", exc)
                return False
            log.info("publisher started at record %d; %d already on the bus", self.first, self.skip_upto)
            self.batch = [(n, r) for n, r in self.batch if n > self.skip_upto]
        numbers = [n for n, _r in self.batch] if self.publisher.skip else None
        if self.batch and not self.publisher.publish([r for _n, r in self.batch], self.batch_last, numbers):
            return False
        self.batch = None
        self.done = self.batch_last
        return True

    def _learn_done(self) -> int:
        """The number of the last record every destination has (records up to it are skipped whole);
        on a cluster, each destination's own goes to the publisher, for the records after it."""
        if self.cluster is None:
            raw = self.conn.call("GET", self.done_key)
            return int(raw) if raw else 0
        counts = self.cluster.done_counts()
        low = min(counts.values())
        if max(counts.values()) > low:
            self.publisher.skip = counts
        return low

    def report(self, force: bool = False) -> None:
        """Tell the acceptor how far we are: every ``report_s`` at most, and soon after the publisher
        goes idle (so the acceptor's bound counts only what really waits), but never more often than
        every IDLE_REPORT_S: each report wakes a thread in the acceptor, which costs its engine thread
        (reporting at every idle moment of a flood took the intake from 28,000 to 20,000 orders/s)."""
        now = time.monotonic()
        since = now - self._reported_at
        idle = self.batch is None and not self.backlog
        if not force and since < self.report_s and not (idle and since >= IDLE_REPORT_S):
            return
        state = self._state()
        if state != self._reported:
            self.write(["S", *state])
            self._reported = state
        self._reported_at = now

    def _state(self) -> tuple[int, ...]:
        p = self.publisher
        return (self.done, p.published, p.refused, self.errors + p.errors)

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        self.report(force=True)  # ready: the acceptor starts taking orders once it sees this
        buf = b""
        into = bytearray(READ_SIZE)
        view = memoryview(into)
        eof = False
        give_up_at = 0.0
        retry_at = 0.0
        delay = 0.05
        while True:
            has_work = self.batch is not None or bool(self.backlog)
            if eof and not has_work:
                break
            if eof and time.monotonic() > give_up_at:
                log.error("the acceptor is gone and redis does not answer: stopping with %d commands "
                          "unpublished", self.waiting)
                raise SystemExit(1)
            timeout = max(0.0, retry_at - time.monotonic()) if has_work else self.report_s
            if not has_work and self._state() != self._reported:
                timeout = min(timeout, IDLE_REPORT_S)  # a report is owed: soon, not in report_s
            if eof:
                time.sleep(timeout)
            elif select.select([self.fd_in], [], [], timeout)[0]:
                n = os.readv(self.fd_in, [into])
                data = view[:n].tobytes()
                if data:
                    try:
                        buf = self.take_records(buf + data if buf else data)
                    except RecordError as exc:  # only a bug in the acceptor can cause this
                        log.error("the acceptor's pipe is not records (%s): stopping", exc)
                        raise SystemExit(1) from None
                else:
                    eof = True
                    give_up_at = time.monotonic() + FINAL_FLUSH_S
                    if buf:
                        self.errors += 1
                        log.error("the acceptor's last record is incomplete: %r", buf[:200])
            if (self.batch is not None or self.next_batch()) and time.monotonic() >= retry_at:
                size = len(self.batch or ())
                if self.publish():
                    delay = 0.05
                    if size >= LINGER_ABOVE and not self.backlog and not eof:
                        time.sleep(min(LINGER_MAX_S, size * LINGER_PER_RECORD_S))
                else:
                    retry_at = time.monotonic() + delay
                    delay = min(delay * 2, 1.0)
            self.report()
        self.report(force=True)
        log.info("publisher stopped: %d commands published, %d refused",
                 self.publisher.published, self.publisher.refused)


def main(argv: list[str] | None = None) -> int:
    logs.setup("gateway-publisher")
    # Ctrl-C and a supervisor's SIGTERM reach the whole process group: this process ends when the
    # acceptor closes the pipe, after publishing what it holds, not before.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="the gateway run's id (names the done counter)")
    parser.add_argument("--first", type=int, default=1, help="number of the first record on stdin")
    parser.add_argument("--generation", type=int, default=0, help="how many publishers this run had before")
    args = parser.parse_args(argv)
    try:
        settings = gateway_settings()
        gc_policy = gcpolicy.policy()
    except ConfigError as exc:
        print(f"gateway publisher: {exc}", file=sys.stderr)
        return 2
    loop = IntakeLoop(settings, args.run, args.first, sys.stdin.fileno(), sys.stdout.fileno(),
                      args.generation)
    gcpolicy.apply(gc_policy)
    try:
        loop.run()
    except BrokenPipeError:
        log.error("the acceptor closed its end: stopping with %d records unpublished", loop.waiting)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
