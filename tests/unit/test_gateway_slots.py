"""The intake on a Redis Cluster, its pure parts: each destination's done count lives in the
destination's slot, and a publisher taking over a run skips, destination by destination, what its
predecessor already put there (a batch may have been half published: one shard's transaction ran)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from redis.crc import key_slot

from services.gateway.inbound import Inbound
from services.gateway.intake import Publisher
from services.gateway.slots import done_keys
from shared import streams
from shared.config import Instrument
from shared.schema import SessionEnded, decode_wire_batch
from shared.schema import as_wire as to_wire

INSTS = [Instrument("ACORN.LAB", 10_000, Decimal("0.01"), "a"),
         Instrument("BIRCH.LAB", 2_500, Decimal("0.01"), "b")]
A, B = streams.orders_stream("a"), streams.orders_stream("b")
EVENTS = streams.events_stream("gw")
NOS = "35=D\x0149=S\x0134={}\x0111={}\x0155={}\x0154=1\x0138=1\x0140=2\x0144={}\x01"


class Recorder:
    """A writer that takes everything and keeps what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[tuple[str, bytes]], tuple[str, int] | None]] = []

    def xadd_batches(self, entries: Sequence[tuple[str, bytes]], maxlen: int,
                     done: tuple[str, int] | None = None) -> list[int]:
        self.calls.append((list(entries), done))
        return []


def clordids(payload: bytes) -> list[str]:
    return [w[2] if w[0] != SessionEnded.CODE else "ended" for w in decode_wire_batch(payload)]


def test_every_destination_has_its_done_count_in_its_own_slot() -> None:
    keys = done_keys(INSTS, "gw", "run7")
    assert set(keys) == {A, B, EVENTS}
    for stream, key in keys.items():
        assert key_slot(key.encode()) == key_slot(stream.encode()), (stream, key)
    assert len(set(keys.values())) == 3
    assert keys[EVENTS] == streams.intake_done_key("gw", "run7")  # the one-Redis count's name


def test_a_takeover_skips_per_destination_what_is_already_there() -> None:
    writer = Recorder()
    publisher = Publisher(writer, Inbound(INSTS, "gw"), INSTS, 1000, "done")
    batch = [(NOS.format(2, "a1", "ACORN.LAB", "100.00"), 1),
             (NOS.format(3, "b1", "BIRCH.LAB", "25.00"), 2),
             to_wire(SessionEnded("S", "gw", 9)),  # for every shard
             (NOS.format(4, "bad", "ACORN.LAB", "100.001"), 4),  # refused: on the events stream
             (NOS.format(5, "a2", "ACORN.LAB", "100.00"), 5)]
    # The predecessor's last batch (records 1..5) went out on shard a only, up to record 3; shard b
    # and the events stream had records up to 1 from the batch before.
    publisher.skip = {A: 3, B: 1, EVENTS: 1}
    assert publisher.publish(batch, 5, [1, 2, 3, 4, 5])
    [(entries, done)] = writer.calls
    got = {stream: clordids(payload) for stream, payload in entries}
    assert got[A] == ["a2"]
    assert got[B] == ["b1", "ended"]
    assert len(decode_wire_batch(dict(entries)[EVENTS])) == 1  # the refusal of record 4
    assert done == ("done", 5)
    assert publisher.skip == {}  # past every count: the next batches are grouped as usual


def test_records_every_destination_has_are_not_published_again() -> None:
    writer = Recorder()
    publisher = Publisher(writer, Inbound(INSTS, "gw"), INSTS, 1000, "done")
    publisher.skip = {A: 9, B: 2, EVENTS: 0}
    assert publisher.publish([(NOS.format(2, "a1", "ACORN.LAB", "100.00"), 1)], 1, [1])
    [(entries, _)] = writer.calls
    assert entries == []  # shard a had it; nothing else wanted it
    assert publisher.published == 0
    assert publisher.skip == {A: 9, B: 2, EVENTS: 0}  # shard a's count is still ahead


def test_without_a_takeover_a_batch_is_grouped_as_on_one_redis() -> None:
    writer = Recorder()
    publisher = Publisher(writer, Inbound(INSTS, "gw"), INSTS, 1000, "done")
    batch = [(NOS.format(2, "a1", "ACORN.LAB", "100.00"), 1), (NOS.format(3, "b1", "BIRCH.LAB", "25.00"), 2)]
    assert publisher.publish(batch, 2, None)
    [(entries, done)] = writer.calls
    assert {stream: clordids(payload) for stream, payload in entries} == {A: ["a1"], B: ["b1"]}
    assert done == ("done", 2)
