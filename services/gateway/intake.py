"""From received order messages to the orders streams, in one straight line: FIX text in ->
translate -> group by shard -> XADD.

Runs in the intake publisher process (``services.gateway.publisher``), never on a QuickFIX thread.
``Publisher.publish`` translates a batch of records (services.gateway.inbound), groups the commands
by matcher shard and writes one stream entry per shard, plus the count of records done, in one
MULTI/EXEC. An order that can never be valid here is answered where that is decided, here: its
refusal (a ``Refused`` event carrying the FIX answer) goes on this gateway's events stream in the
same transaction, and the events thread sends it like any other report, in order. One attempt: on
a Redis error the caller keeps the batch and tries again later, so nothing is lost or doubled.

On a Redis Cluster the same batch goes out as one transaction per destination stream, each with its
own done count (services.gateway.slots.ClusterIntake); a publisher taking over a run then skips,
per destination, what its predecessor already put there (``skip``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Protocol

import redis

from services.gateway.inbound import Inbound, Refusal, Translated
from shared import streams
from shared.config import Instrument
from shared.fix.codec import split_fields
from shared.schema import (
    EndOfDay,
    MassCancel,
    Refused,
    SessionEnded,
    SetPhase,
    StpSetting,
    as_wire,
    encode_wire_batch,
)

log = logging.getLogger(__name__)

# A record from the acceptor: a received message's text with its receive time (translated here),
# or a command built on the spot (SessionEnded, EndOfDay) in wire form.
Wire = tuple[object, ...]


# Commands made by the gateway itself, for every shard (a MassCancel of its own: the kill switch's).
EVERY_SHARD = frozenset((SessionEnded.CODE, EndOfDay.CODE, MassCancel.CODE))


class Writer(Protocol):
    """Where a batch goes: services.gateway.resp.RespConnection on one Redis, or
    services.gateway.slots.ClusterIntake on a cluster."""

    def xadd_batches(self, entries: Sequence[tuple[str, bytes]], maxlen: int,
                     done: tuple[str, int] | None = None) -> list[int]: ...


class Publisher:
    """Translates records and appends them to the orders stream of each command's shard."""

    def __init__(self, conn: Writer, inbound: Inbound, instruments: Iterable[Instrument],
                 maxlen: int, done_key: str) -> None:
        self.conn = conn
        self.inbound = inbound
        self.maxlen = maxlen
        self.done_key = done_key
        self.events = streams.events_stream(inbound.reply_to)  # where this gateway's refusals go
        self.refused = 0  # orders refused (answered on the events stream)
        self.errors = 0  # records that could not be translated at all
        self.stream_of = {i.symbol: streams.orders_stream(i.shard) for i in instruments}
        self.all_streams = tuple(sorted(set(self.stream_of.values())))
        self.published = 0  # commands on the bus
        self.entries = 0  # stream entries written
        # Translated once: a retried batch is not translated (nor its refusals answered) again.
        self._pending: tuple[dict[str, list[Wire]], int] | None = None
        # On a cluster, after taking over a run: destination stream -> the last record number an
        # earlier publisher put there (a batch may have been half published, one shard's part only).
        self.skip: dict[str, int] = {}
        # Whether a NewOrderSingle is read by Inbound.new_order first (False: split_fields for every
        # message, the path it falls back to; the tests compare the two).
        self.fast_path = True

    def group(self, batch: Sequence[Sequence[object]]) -> tuple[dict[str, list[Wire]], int]:
        """Commands in wire form by orders stream, in arrival order, and how many there are.

        Received messages are translated here; a refusal becomes a ``Refused`` event on this
        gateway's events stream. SessionEnded, EndOfDay and a MassCancel of every order go to every
        shard.
        """
        out: dict[str, list[Wire]] = {}
        stream_of = self.stream_of
        command = self.inbound.command
        fast = self.inbound.new_order if self.fast_path else None
        count = 0
        for record in batch:
            first = record[0]
            if isinstance(first, str):
                try:
                    # A valid NewOrderSingle, read by shared.fix.reader; anything else, None.
                    cmd: Translated | Refusal | None = None if fast is None else fast(
                        first, record[1])  # type: ignore[arg-type]
                    if cmd is None:
                        fields = split_fields(first)
                        if not first.isascii() and not _is_utf8(first):
                            cmd = self._not_utf8(fields, record[1])  # type: ignore[arg-type]
                        else:
                            cmd = command(fields.get("35", ""), fields, record[1])  # type: ignore[arg-type]
                except Exception:
                    self.errors += 1
                    log.exception("cannot translate %r", first[:200])
                    continue
                if isinstance(cmd, Refusal):
                    self.refused += 1
                    out.setdefault(self.events, []).append(
                        as_wire(Refused(cmd.session, cmd.body, record[1])))  # type: ignore[arg-type]
                    continue
                wire = as_wire(cmd)
                # No symbol (a mass cancel of every order, 530=7): every shard holds some of them.
                symbol = cmd.symbol or None
            elif first == StpSetting.CODE:
                # A setting for what follows, not a command: applied here, in order, never published.
                self.inbound.set_stp(record[1], record[2])  # type: ignore[arg-type]
                continue
            elif first in EVERY_SHARD:
                wire = tuple(record)
                symbol = None
            elif first == SetPhase.CODE:  # the schedule's (phasedriver.py): its symbol's shard, "*" every one
                wire = tuple(record)
                symbol = record[1] if record[1] in stream_of else None
            else:
                self.errors += 1
                log.error("dropping a record that is neither a message nor a gateway command: %r", record[:3])
                continue
            count += 1
            if symbol is None:
                for stream in self.all_streams:
                    out.setdefault(stream, []).append(wire)
                continue
            stream = stream_of[symbol]
            msgs = out.get(stream)
            if msgs is None:
                out[stream] = [wire]
            else:
                msgs.append(wire)
        return out, count

    def group_skipping(self, batch: Sequence[Sequence[object]],
                       numbers: Sequence[int]) -> tuple[dict[str, list[Wire]], int]:
        """``group``, leaving out of each destination the records (numbered ``numbers``) that
        ``skip`` says are there already; ``skip`` is forgotten once the batch passes them all."""
        out: dict[str, list[Wire]] = {}
        count = 0
        for record, number in zip(batch, numbers, strict=True):
            grouped, n = self.group([record])
            kept = False
            for stream, msgs in grouped.items():
                if number > self.skip.get(stream, 0):
                    out.setdefault(stream, []).extend(msgs)
                    kept = True
            count += n if kept else 0
        if numbers and numbers[-1] >= max(self.skip.values(), default=0):
            self.skip = {}
        return out, count

    def publish(self, batch: Sequence[Sequence[object]], done: int | None,
                numbers: Sequence[int] | None = None) -> bool:
        """Publish ``batch`` and record ``done`` (records handled so far; None: no count kept);
        False on a Redis error. ``numbers``: each record's number, needed while ``skip`` is set.

        Call again with the same batch after a failure: it is translated only once (or ``forget``
        it, when it goes another way).
        """
        if self._pending is None:
            self._pending = (self.group_skipping(batch, numbers) if self.skip and numbers is not None
                             else self.group(batch))
        grouped, count = self._pending
        entries = [(stream, encode_wire_batch(msgs)) for stream, msgs in grouped.items()]
        try:
            failed = self.conn.xadd_batches(entries, self.maxlen,
                                            done=None if done is None else (self.done_key, done))
        except redis.RedisError as exc:
            log.warning("redis unavailable, %d commands wait: %s", count, exc)
            return False
        if failed:
            # Applied entries stay applied (no rollback in Redis): keep only the others for the retry.
            # (The done count was set with them; the refusals that cause this, OOM or a key of the
            # wrong type, refuse that SET too, or are a misconfiguration that needs an operator.)
            self.entries += len(entries) - len(failed)
            names = [entries[i][0] for i in failed]
            self._pending = ({s: grouped[s] for s in names}, sum(len(grouped[s]) for s in names))
            self.published += count - self._pending[1]
            log.warning("XADD refused for %s; retrying", ", ".join(names))
            return False
        self._pending = None
        self.published += count
        self.entries += len(entries)
        return True

    def _not_utf8(self, fields: dict[str, str], ts: int) -> Refusal:
        """The refusal of a message holding bytes that are not UTF-8 (the acceptor hands them over as
        lone surrogates): no command can carry them onto the bus, and one that tried would fail every
        retry of its batch, stalling the intake for every client. The echo replaces them (U+FFFD)."""
        bad = next(tag for tag, value in fields.items() if not _is_utf8(value))
        shown = {tag: value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                 for tag, value in fields.items()}
        return self.inbound.refusal(shown.get("35", ""), shown, f"tag {bad} is not UTF-8 text", ts)

    def forget(self) -> None:
        """Drop the batch a failed ``publish`` kept for its retry (it goes another way)."""
        self._pending = None


def _is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8: False when it holds lone surrogates, i.e. bytes that were
    not UTF-8 decoded with surrogateescape."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
