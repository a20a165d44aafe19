"""Keys a consumer sets in the transaction that acknowledges its stream share the stream's Redis
Cluster slot (a cluster refuses a transaction over two slots), whatever the stream is named."""

from __future__ import annotations

from redis.crc import key_slot

from shared import streams


def slot(name: str) -> int:
    return key_slot(name.encode())


def test_every_consumed_streams_applied_id_is_in_its_slot() -> None:
    consumed = [(streams.orders_stream("a"), streams.MATCHER_GROUP),
                (streams.events_stream("gw1"), streams.GATEWAY_GROUP),
                (streams.shard_events_stream("b", "gw1"), streams.GATEWAY_GROUP),
                (streams.lab_commands_stream("gw1"), streams.GATEWAY_GROUP),
                (streams.LAB_START_STREAM, streams.GATEWAY_GROUP)]  # no hash tag of its own
    for stream, group in consumed:
        assert slot(streams.applied_key(stream, group)) == slot(stream), stream


def test_a_tagged_streams_applied_id_keeps_its_name() -> None:
    # The matcher's recovery reads it: the name a running exchange already has.
    key = streams.applied_key("fixlab:{shard-a}:orders", "matcher")
    assert key == "fixlab:{shard-a}:orders:applied:matcher"


def test_a_shards_intake_count_is_in_the_shards_slot() -> None:
    assert slot(streams.shard_intake_done_key("a", "gw1", "r")) == slot(streams.orders_stream("a"))
    assert slot(streams.intake_done_key("gw1", "r")) == slot(streams.events_stream("gw1"))


def test_the_replica_probe_of_every_waited_stream_is_in_its_slot() -> None:
    # Written on the connection to the stream's master just before WAIT (shared.replication).
    waited = [streams.orders_stream("a"), streams.events_stream("gw1"),
              streams.shard_events_stream("b", "gw1"),
              streams.LAB_START_STREAM]
    for stream in waited:
        assert slot(streams.replica_probe_key(stream)) == slot(stream), stream
